// scorer.cpp — the PFlash scorer: its KV cache and its scoring pass (see scorer.h; plan in scorer_plan.cpp).
#include "scorer.h"
#include "memory_plan.h"
#include "arch.h"
#include "runtime.h"
#include "device.h"
#include "error.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace luce {

static constexpr int kPad = kCtxPad;      // cache and attended-key granularity (as the engine's)
static constexpr int kMaxTail = 256;      // tail queries per call

// ---- cache ------------------------------------------------------------------------------------

uint64_t ScorerCache::bytes(const HParams & hp, int n_layers, int n_ctx) {
    return uint64_t(n_layers) * 2 * uint64_t(n_ctx) * ggml_row_size(GGML_TYPE_F16, int64_t(hp.head_dim) * hp.n_head_kv);
}

void ScorerCache::allocate(const Model & m, int layers, int n) {
    const HParams & hp = m.hp;
    n_ctx = n;
    n_layers = layers;
    ggml_init_params ip = {ggml_tensor_overhead() * size_t(2 * n_layers + 2), nullptr, true};
    ctx = ggml_init(ip);
    if (!ctx) throw Error(LUCE_ERR_MEMORY, "cannot create the scorer's cache context");
    const int64_t row = int64_t(hp.head_dim) * hp.n_head_kv;
    for (int il = 0; il < n_layers; ++il) {
        k.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F16, row, n_ctx));
        v.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F16, row, n_ctx));
        ggml_format_name(k.back(), "scorer_k_l%d", il);
        ggml_format_name(v.back(), "scorer_v_l%d", il);
    }
    buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_dev_buffer_type(m.dev));
    if (!buffer) {
        throw Error(LUCE_ERR_MEMORY, "cannot allocate " + format_bytes(bytes(hp, n_layers, n_ctx)) + " for the scorer's KV cache on " +
                                         m.device_name);
    }
    // Cells past the written ones are attended under a -inf mask; on GPUs a masked cell still
    // enters as 0·V, so it must hold finite values, not whatever the allocation contained.
    ggml_backend_buffer_clear(buffer, 0);
}

ScorerCache::~ScorerCache() {
    if (buffer) ggml_backend_buffer_free(buffer);
    if (ctx) ggml_free(ctx);
}

// ---- scorer -----------------------------------------------------------------------------------

static const Model & scorer_model(const Model & m) {
    if (!m.buffer) throw Error(LUCE_ERR_STATE, "this model was opened for planning only (no weights loaded)");
    return m;
}

Scorer::Scorer(Model & model, const luce_scorer_params & params)
    : m_(model), params_(normalized_scorer_params(params)),
      runner_(scorer_model(model).dev, model.n_threads, scorer_graph_nodes(model), 1, /*stop_on_cancel=*/true) {
    if (!m_.ops->scorer) {
        throw Error(LUCE_ERR_UNSUPPORTED, m_.name + " is a " + m_.hp.arch +
                                              " model; the PFlash scorer runs dense llama or qwen3 models (e.g. Qwen3-0.6B)");
    }
}

Scorer::~Scorer() { body_.reset(); }

void Scorer::check_cancel() { runner_.throw_if_cancelled(); }

void Scorer::run(ScorerGraph & g) { runner_.compute(g.gf, 0, "scorer graph computation"); }

void Scorer::measure_compute() { stats_.compute_bytes = std::max<uint64_t>(stats_.compute_bytes, runner_.compute_bytes()); }

// toks: the batch's own tokens (positions q0..q1-1)
void Scorer::eval_body(const ScorerCache & c, const int32_t * toks, int q0, int q1, int n_total) {
    const ScorerKeys keys = scorer_keys(params_, n_total, q0, q1);
    const ScorerShape shape{q1 - q0, keys.n_kv, keys.sparse};
    const bool built = runner_.use(body_, shape, 0, [] { return std::string("the scorer's body batch"); },
                                   [&] { return build_scorer_body(m_, c, shape); });
    (built ? stats_.n_graph_builds : stats_.n_graph_reuses)++;
    if (built) measure_compute();
    ScorerGraph & g = *body_.graph;
    const int n = q1 - q0;
    std::vector<int32_t> pos(static_cast<size_t>(n));
    std::vector<int64_t> rows(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), q0);
    std::iota(rows.begin(), rows.end(), int64_t(q0));
    ggml_backend_tensor_set(g.tokens, toks, 0, size_t(n) * sizeof(int32_t));
    ggml_backend_tensor_set(g.pos, pos.data(), 0, pos.size() * sizeof(int32_t));
    ggml_backend_tensor_set(g.kv_idx, rows.data(), 0, rows.size() * sizeof(int64_t));
    if (g.sel) ggml_backend_tensor_set(g.sel, keys.rows.data(), 0, keys.rows.size() * sizeof(int32_t));

    // Row i (position q0 + i) sees key column j iff the cell that column holds is at or before it.
    // Sparse columns: the sink cells, then cells lo.. in order; cell lo + k is visible iff lo + k <= q0 + i.
    const int n_visible = keys.sparse ? params_.sparse_sink + params_.sparse_window + 1 : q0 + 1;
    causal_mask(mask_buf_, keys.n_kv, n, n_visible);
    stats_.attended_keys += int64_t(n) * n_visible + int64_t(n) * (n - 1) / 2;
    stats_.dense_keys += int64_t(n) * (q0 + 1) + int64_t(n) * (n - 1) / 2;
    ggml_backend_tensor_set(g.mask, mask_buf_.data(), 0, mask_buf_.size() * sizeof(uint16_t));
    run(g);
    (keys.sparse ? stats_.n_sparse_batches : stats_.n_dense_batches)++;
}

void Scorer::eval_tail(const ScorerCache & c, const Question & q, int n_body, int n_tail, bool pre_rope,
                       std::vector<float> & out) {
    body_.reset();   // the body graph's allocation is about to be replaced
    const int nq = q.n, S = n_body + nq, n_kv = round_up(S, kPad), first = S - n_tail;
    const std::unique_ptr<ScorerGraph> tail = build_scorer_tail(m_, c, nq, n_tail, S, n_kv, pre_rope);   // this question's alone
    ggml_backend_sched_reset(runner_.sched());
    runner_.allocate(tail->gf, 0, "the scorer's tail");
    stats_.n_graph_builds++;
    measure_compute();
    ScorerGraph & g = *tail;

    std::vector<int32_t> pos(static_cast<size_t>(S));
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<int64_t> rows(static_cast<size_t>(nq));
    std::iota(rows.begin(), rows.end(), int64_t(n_body));
    ggml_backend_tensor_set(g.tokens, q.tokens, 0, size_t(nq) * sizeof(int32_t));
    ggml_backend_tensor_set(g.pos, pos.data() + n_body, 0, size_t(nq) * sizeof(int32_t));
    ggml_backend_tensor_set(g.kv_idx, rows.data(), 0, rows.size() * sizeof(int64_t));
    if (g.key_pos) ggml_backend_tensor_set(g.key_pos, pos.data(), 0, size_t(S) * sizeof(int32_t));

    // Question token i (position n_body + i) sees keys 0..n_body+i in its own attention (padded to
    // n_kv cells); tail row t (position first + t) sees keys 0..first+t in the scores (exactly S).
    causal_mask(mask_buf_, n_kv, nq, n_body + 1);
    ggml_backend_tensor_set(g.mask, mask_buf_.data(), 0, mask_buf_.size() * sizeof(uint16_t));
    causal_mask(mask_buf_, S, n_tail, first + 1);
    ggml_backend_tensor_set(g.score_mask, mask_buf_.data(), 0, mask_buf_.size() * sizeof(uint16_t));
    mask_buf_.clear();
    mask_buf_.shrink_to_fit();

    run(g);

    // s[j] = mean over the tail rows of M[t, j]
    std::vector<float> m(size_t(S) * size_t(n_tail));
    ggml_backend_tensor_get(g.tail_max, m.data(), 0, m.size() * sizeof(float));
    out.assign(size_t(S), 0.0f);
    for (int j = 0; j < S; ++j) {
        double acc = 0.0;
        for (int t = 0; t < n_tail; ++t) acc += m[size_t(t) * S + size_t(j)];
        out[size_t(j)] = float(acc / n_tail);
        if (!std::isfinite(out[size_t(j)])) {
            throw Error(LUCE_ERR_COMPUTE, "the scorer produced non-finite scores (NaN/Inf) at token " + std::to_string(j) +
                                              "; its weights may be unsuitable");
        }
    }
}

void Scorer::check_tokens(const int32_t * toks, int n, const char * what) const {
    for (int32_t i = 0; i < n; ++i) {
        if (toks[i] < 0 || toks[i] >= m_.hp.n_vocab) {
            throw Error(LUCE_ERR_INVALID_ARG, "token id " + std::to_string(toks[i]) + " at index " + std::to_string(i) + " of the " +
                                                  what + " is outside the scorer's vocabulary (" + std::to_string(m_.hp.n_vocab) + ")");
        }
    }
}

template <typename Sink>
void Scorer::run_call(const int32_t * body, int n_body, const std::vector<Question> & questions, int n_tail, bool pre_rope,
                      Sink && sink, luce_progress_cb cb, void * ud) {
    const auto t0 = clock_type::now();
    int max_q = 0, total = n_body;
    for (const Question & q : questions) {
        max_q = std::max(max_q, q.n);
        total += q.n;
    }
    const luce_memory_plan plan = plan_scorer(m_, params_, n_body + max_q, n_tail, max_q);
    check_scorer_plan(m_, plan, n_body + max_q);

    const int64_t builds = stats_.n_graph_builds, reuses = stats_.n_graph_reuses;
    stats_ = {};
    stats_.n_graph_builds = builds;
    stats_.n_graph_reuses = reuses;
    stats_.n_tokens = n_body + max_q;
    stats_.n_tail = n_tail;
    stats_.planned_kv_bytes = plan.kv_cache;
    stats_.planned_compute_bytes = plan.compute;

    // Everything of this call goes when it returns, on success or failure: the graphs reference
    // the cache, and the cache and the compute buffers are the memory the target needs back.
    struct Release {
        Scorer & s;
        ~Release() {
            s.body_.reset();
            s.runner_.release(0);
            s.mask_buf_ = {};
        }
    } release{*this};

    ScorerCache cache;
    cache.allocate(m_, scorer_layers(m_.hp, params_), plan.n_ctx);
    stats_.kv_bytes = ggml_backend_buffer_get_size(cache.buffer);

    const auto t_fwd = clock_type::now();
    for (int q0 = 0; q0 < n_body; q0 += params_.n_batch) {
        check_cancel();
        const int q1 = std::min(q0 + params_.n_batch, n_body);
        eval_body(cache, body + q0, q0, q1, n_body + max_q);
        if (cb && !cb(q1, total, ud)) throw Error(LUCE_ERR_CANCELLED, "cancelled by the progress callback");
    }
    stats_.forward_ms = ms_since(t_fwd);
    const auto t_tail = clock_type::now();
    std::vector<float> scores;
    int done = n_body;
    for (size_t i = 0; i < questions.size(); ++i) {
        check_cancel();
        eval_tail(cache, questions[i], n_body, n_tail, pre_rope, scores);
        sink(i, scores);
        done += questions[i].n;
        if (cb && !cb(done, total, ud)) throw Error(LUCE_ERR_CANCELLED, "cancelled by the progress callback");
    }
    stats_.tail_ms = ms_since(t_tail);
    stats_.total_ms = ms_since(t0);
}

void Scorer::score(const int32_t * toks, int32_t n, int32_t n_tail, bool pre_rope, float * out, luce_progress_cb cb,
                   void * ud) {
    if (n <= 0 || !toks || !out) throw Error(LUCE_ERR_INVALID_ARG, "scoring needs at least one token");
    if (n_tail < 1 || n_tail > std::min<int32_t>(n, kMaxTail)) {
        throw Error(LUCE_ERR_INVALID_ARG, "n_tail must be in 1.." + std::to_string(std::min<int32_t>(n, kMaxTail)) +
                                              " for " + std::to_string(n) + " tokens, not " + std::to_string(n_tail));
    }
    check_tokens(toks, n, "input");
    // The question is the tail itself: the rest of the prompt is the body.
    const int n_body = n - n_tail;
    run_call(toks, n_body, {{toks + n_body, n_tail}}, n_tail, pre_rope,
             [&](size_t, const std::vector<float> & s) { std::copy(s.begin(), s.end(), out); }, cb, ud);
}

void Scorer::score_questions(const int32_t * body, int32_t n_body, const int32_t * questions, const int32_t * lens,
                             int32_t n_questions, int32_t n_tail, bool pre_rope, float * out, luce_progress_cb cb,
                             void * ud) {
    if (n_body <= 0 || !body || !out) throw Error(LUCE_ERR_INVALID_ARG, "scoring needs a body of at least one token");
    if (n_questions <= 0 || !questions || !lens) throw Error(LUCE_ERR_INVALID_ARG, "scoring needs at least one question");
    if (n_tail < 1 || n_tail > kMaxTail) {
        throw Error(LUCE_ERR_INVALID_ARG, "n_tail must be in 1.." + std::to_string(kMaxTail) + ", not " + std::to_string(n_tail));
    }
    check_tokens(body, n_body, "body");
    std::vector<Question> qs;
    const int32_t max_len = std::max(params_.n_batch, kMaxTail);
    for (int32_t i = 0, at = 0; i < n_questions; at += lens[i], ++i) {
        if (lens[i] < n_tail || lens[i] > max_len) {
            throw Error(LUCE_ERR_INVALID_ARG, "question " + std::to_string(i) + " has " + std::to_string(lens[i]) +
                                                  " tokens; a question needs n_tail (" + std::to_string(n_tail) + ") to " +
                                                  std::to_string(max_len) + " tokens");
        }
        check_tokens(questions + at, lens[i], "questions");
        qs.push_back({questions + at, lens[i]});
    }
    run_call(body, n_body, qs, n_tail, pre_rope,
             [&](size_t i, const std::vector<float> & s) { std::copy_n(s.begin(), n_body, out + i * size_t(n_body)); },
             cb, ud);
}

} // namespace luce
