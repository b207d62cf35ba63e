#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace luce {

static bool by_logit_desc(const Candidate & a, const Candidate & b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

// Normalised probabilities of c at temperature t, in c's order (any order: the maximum is searched).
static void softmax(std::vector<Candidate> & c, float temperature) {
    const float inv_t = temperature > 0 ? 1.0f / temperature : 1.0f;
    float max_l = -INFINITY;
    for (const auto & x : c) max_l = std::max(max_l, x.logit);
    double sum = 0.0;
    for (auto & x : c) { x.p = std::exp((x.logit - max_l) * inv_t); sum += x.p; }
    for (auto & x : c) x.p = float(x.p / sum);
}

// Penalty-adjusted logit of token id (the history is short; only its tokens change).
static std::unordered_map<int32_t, float> penalized(const float * logits, int32_t n_vocab, const luce_sampling_params & sp,
                                                    const int32_t * history, int32_t n_history) {
    std::unordered_map<int32_t, float> out;
    const bool repeat = sp.repeat_penalty != 1.0f && sp.repeat_penalty > 0.0f;
    const bool presence = sp.presence_penalty != 0.0f;
    if ((!repeat && !presence) || n_history <= 0 || sp.penalty_last_n == 0) return out;
    const int32_t window = sp.penalty_last_n < 0 ? n_history : std::min(n_history, sp.penalty_last_n);
    for (int32_t i = n_history - window; i < n_history; ++i) {
        const int32_t id = history[i];
        if (id < 0 || id >= n_vocab || out.count(id)) continue;
        float l = logits[id];
        if (repeat) l = l > 0 ? l / sp.repeat_penalty : l * sp.repeat_penalty;
        if (presence) l -= sp.presence_penalty;
        out[id] = l;
    }
    return out;
}

static double mass(std::vector<Candidate>::const_iterator a, std::vector<Candidate>::const_iterator b) {
    double m = 0.0;
    for (; a != b; ++a) m += a->p;
    return m;
}

// Keeps top-p's nucleus of c (probabilities normalised, any order): the fewest candidates of highest
// probability (ties: lower id first) whose mass reaches top_p. Found by partitioning around pivots,
// as a selection does, so that no more than a few dozen candidates are ever sorted.
static void keep_top_p(std::vector<Candidate> & c, float top_p) {
    auto lo = c.begin(), hi = c.end();   // the cut lies in [lo, hi); everything before lo is kept
    double need = top_p;                 // the mass still to take from [lo, hi)
    while (hi - lo > 32) {
        Candidate a = *lo, b = *(lo + (hi - lo) / 2), d = *(hi - 1);   // the pivot: the median of three
        if (by_logit_desc(b, a)) std::swap(a, b);
        if (by_logit_desc(d, b)) std::swap(b, d);
        if (by_logit_desc(b, a)) std::swap(a, b);
        const Candidate pivot = b;
        auto mid = std::partition(lo, hi, [&](const Candidate & x) { return by_logit_desc(x, pivot); });
        std::iter_swap(mid, std::find_if(mid, hi, [&](const Candidate & x) { return x.id == pivot.id; }));
        const double front = mass(lo, mid);
        if (front >= need) {
            hi = mid;                                   // the cut is above the pivot
        } else if (front + mid->p >= need) {
            c.erase(mid + 1, c.end());                  // the cut is the pivot
            return;
        } else {
            need -= front + mid->p;                     // the pivot and everything above it are kept
            lo = mid + 1;
        }
    }
    std::sort(lo, hi, by_logit_desc);
    double cum = 0.0;
    auto cut = lo;
    while (cut != hi) { cum += cut->p; ++cut; if (cum >= need) break; }
    c.erase(cut == c.begin() ? cut + 1 : cut, c.end());
}

// The k best of the vocabulary (penalised logits where changed), best first: a heap of k that
// rejects most tokens with one comparison, read straight from the logits (building all n_vocab
// candidates first cost more than the selection on a 248K vocabulary). The same candidates, in the
// same order, as a partial sort of all of them by by_logit_desc.
static std::vector<Candidate> top_k_candidates(const float * logits, int32_t n_vocab, int32_t k,
                                               const std::unordered_map<int32_t, float> & changed) {
    std::vector<Candidate> heap;   // by_logit_desc as "less": front() is the worst kept
    heap.reserve(size_t(k));
    const auto offer = [&](int32_t id, float l) {
        const Candidate x{id, l, 0.0f};
        if (int32_t(heap.size()) < k) {
            heap.push_back(x);
            std::push_heap(heap.begin(), heap.end(), by_logit_desc);
        } else if (by_logit_desc(x, heap.front())) {
            std::pop_heap(heap.begin(), heap.end(), by_logit_desc);
            heap.back() = x;
            std::push_heap(heap.begin(), heap.end(), by_logit_desc);
        }
    };
    for (int32_t i = 0; i < n_vocab; ++i) {
        const float l = logits[i];
        // most tokens: below the worst kept, by value alone (ties need the id: by_logit_desc)
        if (int32_t(heap.size()) == k && l < heap.front().logit) continue;
        if (!changed.empty() && changed.count(i)) continue;   // offered with its penalised logit below
        offer(i, l);
    }
    for (const auto & [id, l] : changed) offer(id, l);
    std::sort(heap.begin(), heap.end(), by_logit_desc);
    return heap;
}

std::vector<Candidate> processed_distribution(const float * logits, int32_t n_vocab, const luce_sampling_params & sp,
                                              const int32_t * history, int32_t n_history) {
    const auto changed = penalized(logits, n_vocab, sp, history, n_history);

    if (sp.temperature <= 0.0f) {
        // Greedy runs every decode step: scan the row instead of building candidates
        // (ties go to the lower id, like a stable sort).
        int32_t best = 0;
        float best_l = -INFINITY;
        for (int32_t i = 0; i < n_vocab; ++i) {
            const float l = logits[i];
            if (l > best_l) { best_l = l; best = i; }
        }
        if (!changed.empty()) {
            // Penalties moved a few tokens: the winner is the best untouched token or one of those.
            if (changed.count(best)) {
                best_l = -INFINITY;
                for (int32_t i = 0; i < n_vocab; ++i) {
                    if (logits[i] > best_l && !changed.count(i)) { best_l = logits[i]; best = i; }
                }
            }
            for (const auto & [id, l] : changed) {
                if (l > best_l || (l == best_l && id < best)) { best_l = l; best = id; }
            }
        }
        return {{best, best_l, 1.0f}};
    }

    const bool cut_k = sp.top_k > 0 && sp.top_k < n_vocab;
    const bool cut_p = sp.top_p < 1.0f || sp.min_p > 0.0f;
    std::vector<Candidate> c;
    if (cut_k) {
        c = top_k_candidates(logits, n_vocab, sp.top_k, changed);
    } else {
        c.resize(static_cast<size_t>(n_vocab));
        for (int32_t i = 0; i < n_vocab; ++i) c[size_t(i)] = {i, logits[i], 0.0f};
        for (const auto & [id, l] : changed) c[size_t(id)].logit = l;
    }
    if (!cut_k && !cut_p) {   // the whole vocabulary: no order needed, sorting it cost ~4 ms a token
        softmax(c, sp.temperature);
        return c;
    }
    // top-p and min-p look at the distribution before temperature (as llama.cpp's chain does).
    if (cut_p) {
        softmax(c, 1.0f);
        if (sp.top_p < 1.0f) {
            keep_top_p(c, sp.top_p);
        }
        if (sp.min_p > 0.0f) {
            float p_max = 0.0f;
            for (const auto & x : c) p_max = std::max(p_max, x.p);
            const float floor_p = sp.min_p * p_max;
            c.erase(std::partition(c.begin(), c.end(), [floor_p](const Candidate & x) { return x.p >= floor_p; }), c.end());
        }
    }
    softmax(c, sp.temperature);
    return c;
}

static uint64_t splitmix64(uint64_t & x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void Rng::reseed(uint64_t seed) {
    for (auto & s : s_) s = splitmix64(seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t Rng::next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0]; s_[3] ^= s_[1]; s_[1] ^= s_[2]; s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

double Rng::uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }

// A draw from the whole vocabulary at temperature t (no top-k, top-p or min-p): the arithmetic of
// softmax() and sample_token()'s walk, in the same order, so the same token for the same u, without
// building a candidate for every token.
static int32_t sample_whole_vocabulary(const float * logits, int32_t n_vocab, float temperature,
                                       const std::unordered_map<int32_t, float> & changed, Rng & rng) {
    thread_local std::vector<float> e;
    e.assign(logits, logits + n_vocab);
    for (const auto & [id, l] : changed) e[size_t(id)] = l;
    const float inv_t = 1.0f / temperature;
    float max_l = -INFINITY;
    for (const float l : e) max_l = std::max(max_l, l);
    double sum = 0.0;
    for (float & x : e) { x = std::exp((x - max_l) * inv_t); sum += x; }
    const double u = rng.uniform();
    double cum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        cum += float(e[size_t(i)] / sum);
        if (u < cum) return i;
    }
    return n_vocab - 1;   // u fell in the rounding gap at the very end
}

int32_t sample_token(const float * logits, int32_t n_vocab, const luce_sampling_params & sp, const int32_t * history,
                     int32_t n_history, Rng & rng) {
    const bool cut = (sp.top_k > 0 && sp.top_k < n_vocab) || sp.top_p < 1.0f || sp.min_p > 0.0f;
    if (sp.temperature > 0.0f && !cut && n_vocab > 1) {
        return sample_whole_vocabulary(logits, n_vocab, sp.temperature, penalized(logits, n_vocab, sp, history, n_history), rng);
    }
    auto c = processed_distribution(logits, n_vocab, sp, history, n_history);
    if (c.size() == 1) return c.front().id;
    const double u = rng.uniform();
    double cum = 0.0;
    for (auto & x : c) {
        cum += x.p;
        if (u < cum) return x.id;
    }
    return c.back().id;   // u fell in the rounding gap at the very end
}

} // namespace luce
