#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace luce {

static bool by_logit_desc(const Candidate & a, const Candidate & b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

static void softmax(std::vector<Candidate> & c, float temperature) {
    const float inv_t = temperature > 0 ? 1.0f / temperature : 1.0f;
    const float max_l = c.front().logit;   // sorted descending
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

    std::vector<Candidate> c(static_cast<size_t>(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) c[size_t(i)] = {i, logits[i], 0.0f};
    for (const auto & [id, l] : changed) c[size_t(id)].logit = l;

    size_t keep = c.size();
    if (sp.top_k > 0 && size_t(sp.top_k) < keep) {
        keep = size_t(sp.top_k);
        std::partial_sort(c.begin(), c.begin() + long(keep), c.end(), by_logit_desc);
        c.resize(keep);
    } else {
        std::sort(c.begin(), c.end(), by_logit_desc);
    }

    // top-p and min-p look at the distribution before temperature (as llama.cpp's chain does).
    if (sp.top_p < 1.0f || sp.min_p > 0.0f) {
        softmax(c, 1.0f);
        if (sp.top_p < 1.0f) {
            double cum = 0.0;
            size_t n = 0;
            while (n < c.size()) { cum += c[n].p; ++n; if (cum >= sp.top_p) break; }
            c.resize(std::max<size_t>(n, 1));
        }
        if (sp.min_p > 0.0f) {
            const float p_max = c.front().p;
            size_t n = 1;
            while (n < c.size() && c[n].p >= sp.min_p * p_max) ++n;
            c.resize(n);
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

int32_t sample_token(const float * logits, int32_t n_vocab, const luce_sampling_params & sp, const int32_t * history,
                     int32_t n_history, Rng & rng) {
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
