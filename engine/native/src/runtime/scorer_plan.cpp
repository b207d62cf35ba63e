// scorer_plan.cpp — the PFlash scorer's parameters as it runs them and the memory plan of one call
// (the fit rule itself is memory_plan.h's).
#include "scorer.h"
#include "device.h"
#include "error.h"
#include "memory_plan.h"
#include "runtime.h"

#include <algorithm>

namespace luce {

static constexpr int kPad = kCtxPad;   // cache and attended-key granularity (as the engine's)

// ---- plan -------------------------------------------------------------------------------------

luce_scorer_params normalized_scorer_params(luce_scorer_params p) {
    if (p.n_batch <= 0) p.n_batch = 512;
    p.sparse_sink = std::max(p.sparse_sink, 0);
    p.sparse_window = std::max(p.sparse_window, 0);
    return p;
}

int scorer_layers(const HParams & hp, const luce_scorer_params & p) {
    return p.n_layers > 0 ? std::min(p.n_layers, hp.n_layer) : hp.n_layer;
}

// Scratch estimates: the live activations of one layer (ggml-alloc reuses the memory of tensors
// that are done, so a graph needs about one layer's worth, not n_layer's), the inputs, and the
// large per-graph tensors. They are upper bounds; stats report what was measured after a call.
static uint64_t layer_activations(const HParams & hp, uint64_t n) {
    const uint64_t E = uint64_t(hp.n_embd), F = uint64_t(hp.n_ff);
    const uint64_t QD = uint64_t(hp.n_head) * hp.head_dim, KVD = uint64_t(hp.n_head_kv) * hp.head_dim;
    return n * 4 * (4 * E + 3 * F + 3 * QD + 4 * KVD) + n * 16;
}

static uint64_t body_scratch(const HParams & hp, const luce_scorer_params & p, int n_total, int n_body) {
    if (n_body <= 0) return 0;
    const uint64_t KVD = uint64_t(hp.n_head_kv) * hp.head_dim;
    const uint64_t nb = uint64_t(std::min(p.n_batch, n_body));
    // the widest batch: the last one (dense), or one of sink + window + batch keys (sparse)
    const bool long_input = p.sparse_threshold > 0 && n_total > p.sparse_threshold;
    uint64_t n_kv = uint64_t(round_up(n_body, kPad));
    if (long_input) n_kv = std::min<uint64_t>(n_kv, uint64_t(round_up(p.sparse_sink + p.sparse_window + p.n_batch, kPad)));
    uint64_t bytes = layer_activations(hp, nb) + n_kv * nb * 2 + n_kv * 4;
    if (long_input) bytes += 2 * n_kv * KVD * (4 + 2);   // gathered K and V: F32 rows, then F16
    return bytes;
}

static uint64_t tail_scratch(const Model & m, int n_total, int n_question, int n_tail) {
    const HParams & hp = m.hp;
    const uint64_t S = uint64_t(n_total), nt = uint64_t(n_tail), Hq = uint64_t(hp.n_head);
    const uint64_t KVD = uint64_t(hp.n_head_kv) * hp.head_dim;
    uint64_t bytes = layer_activations(hp, uint64_t(n_question)) + uint64_t(round_up(n_total, kPad)) * uint64_t(n_question) * 2;
    bytes += S * KVD * 2;                 // the un-rotated keys of one layer (pre-RoPE)
    bytes += 3 * S * nt * Hq * 4;         // scores, their softmax, the first halving over heads
    bytes += 3 * S * nt * 4 + S * nt * 2 + S * 4;   // running max (and its update), mask, key positions
    // A GPU's batched matmul copies the permuted keys to a contiguous F16 temporary (its own pool).
    if (!device_is_cpu(m.dev)) bytes += S * KVD * 2;
    return bytes;
}

// ggml_backend_sched keeps graph inputs (ggml_set_input) in the CPU backend's buffer and copies
// them to the device: on a GPU the masks and indices exist twice. The device copies are in the
// scratch estimates above; this is the host side, the largest over the body and the tail graphs.
static uint64_t host_inputs(const luce_scorer_params & p, int n_total, int n_question, int n_tail) {
    constexpr uint64_t kAlign = 256;   // per tensor
    const uint64_t S = uint64_t(round_up(n_total, kPad));
    const uint64_t nb = uint64_t(std::min(p.n_batch, n_total)), nq = uint64_t(n_question);
    // body: tokens, positions, cache rows, mask [n_kv, nb], sparse key rows [n_kv]; n_kv as in body_scratch
    uint64_t n_kv = S;
    if (p.sparse_threshold > 0 && n_total > p.sparse_threshold) {
        n_kv = std::min<uint64_t>(n_kv, uint64_t(round_up(p.sparse_sink + p.sparse_window + p.n_batch, kPad)));
    }
    const uint64_t body = nb * (4 + 4 + 8) + n_kv * nb * 2 + n_kv * 4 + 5 * kAlign;
    // tail: the question's own inputs, its mask [S, nq], the score mask [S, n_tail], key positions
    const uint64_t tail = nq * (4 + 4 + 8) + S * nq * 2 + S * uint64_t(n_tail) * 2 + S * 4 + 6 * kAlign;
    return std::max(body, tail);
}

luce_memory_plan plan_scorer(const Model & m, const luce_scorer_params & params, int n_tokens, int n_tail, int n_question) {
    const luce_scorer_params p = normalized_scorer_params(params);
    const HParams & hp = m.hp;
    const int n = std::max(n_tokens, 1);
    n_tail = std::clamp(n_tail, 1, n);
    n_question = std::clamp(std::max(n_question, n_tail), n_tail, n);
    luce_memory_plan plan{};
    plan.n_ctx = round_up(n, kPad);
    plan.weights = m.weight_bytes;
    plan.kv_cache = ScorerCache::bytes(hp, scorer_layers(hp, p), plan.n_ctx);
    plan.compute = std::max(body_scratch(hp, p, n, n - n_question), tail_scratch(m, n, n_question, n_tail));
    if (!device_is_cpu(m.dev)) plan.compute += host_inputs(p, n, n_question, n_tail);
    // host: the scores, the downloaded [n_tail, S] maxima, mask staging
    const uint64_t staging = std::max<uint64_t>(uint64_t(plan.n_ctx) * uint64_t(std::max(p.n_batch, n_question)),
                                                uint64_t(n) * uint64_t(n_tail)) * 2;
    plan.outputs = uint64_t(n) * 4 * (1 + uint64_t(n_tail)) + staging;
    finish_plan(plan, m.dev, m.buffer != nullptr);
    return plan;
}

void check_scorer_plan(const Model & m, const luce_memory_plan & plan, int n_tokens) {
    if (plan_fits(plan)) return;
    const uint64_t fixed = plan.device_need - plan.kv_cache - plan.compute;   // weights (and host staging on the CPU)
    const uint64_t per_token = std::max<uint64_t>((plan.kv_cache + plan.compute) / uint64_t(std::max(n_tokens, 1)), 1);
    const int64_t fit = int64_t(plan_spare(plan, fixed) / per_token) / kPad * kPad;
    throw Error(LUCE_ERR_MEMORY, "scoring " + std::to_string(n_tokens) + " tokens with the scorer " + m.name + " needs " +
                                     format_bytes(plan.kv_cache) + " of KV cache (f16) and " + format_bytes(plan.compute) +
                                     " of scratch on " + m.device_name + ", but only " + format_bytes(plan.device_free) +
                                     " is free. Attach less text (about " + std::to_string(std::max<int64_t>(fit, 0)) +
                                     " tokens fit), free device memory (a smaller --max-ctx for the target), or turn "
                                     "prefill compression off.");
}

} // namespace luce
