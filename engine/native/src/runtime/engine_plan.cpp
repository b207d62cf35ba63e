// engine_plan.cpp — an engine's parameters as it will run them, and its memory plan before anything
// is allocated (the fit rule itself is memory_plan.h's).
#include "engine.h"
#include "device.h"
#include "error.h"
#include "memory_plan.h"
#include "runtime.h"
#include "tree_paths.h"

#include <algorithm>

namespace luce {

luce_engine_params normalized_engine_params(const Model & m, luce_engine_params p) {
    if (p.rollback != LUCE_ROLLBACK_SNAPSHOT && p.rollback != LUCE_ROLLBACK_REPLAY) {
        throw Error(LUCE_ERR_INVALID_ARG, "rollback must be LUCE_ROLLBACK_SNAPSHOT or LUCE_ROLLBACK_REPLAY");
    }
    if (p.tree_recurrence != LUCE_TREE_RECURRENCE_AUTO && p.tree_recurrence != LUCE_TREE_RECURRENCE_PATHS &&
        p.tree_recurrence != LUCE_TREE_RECURRENCE_NODES) {
        throw Error(LUCE_ERR_INVALID_ARG, "tree_recurrence must be LUCE_TREE_RECURRENCE_AUTO, _PATHS or _NODES");
    }
    if (p.n_ctx <= 0) p.n_ctx = std::min(m.hp.n_ctx_train, 8192);
    p.n_ctx = round_up(p.n_ctx, kCtxPad);
    if (p.n_batch <= 0) p.n_batch = 512;
    p.n_verify_max = std::clamp(p.n_verify_max, 0, int32_t(LUCE_MAX_STEP_TOKENS));
    if (p.small_batch_max_tokens < kSmallBatchMinTokens || p.small_batch_max_tokens > cuda::kSmallGemmMaxCols) {
        throw Error(LUCE_ERR_INVALID_ARG, "small_batch_max_tokens must be " + std::to_string(kSmallBatchMinTokens) + ".." +
                                              std::to_string(cuda::kSmallGemmMaxCols) + ", not " + std::to_string(p.small_batch_max_tokens));
    }
    if (p.step_kv_pad <= 0) p.step_kv_pad = kCtxPad;
    if (p.step_kv_pad % kCtxPad != 0) {
        throw Error(LUCE_ERR_INVALID_ARG, "step_kv_pad must be a multiple of " + std::to_string(kCtxPad) + ", not " +
                                              std::to_string(p.step_kv_pad));
    }
    p.n_batch = std::min(p.n_batch, p.n_ctx);
    return p;
}

// The widest input of the model's matmuls (what sizes the small-batch kernels' scratch).
int64_t matmul_width(const HParams & hp) {
    return std::max({int64_t(hp.n_embd), int64_t(hp.n_ff), int64_t(hp.n_head) * hp.head_dim,
                     int64_t(hp.ssm_heads) * hp.ssm_state});
}

// Rollback by replay (recurrent_state.h) for these parameters.
bool rollback_by_replay(const Model & m, const luce_engine_params & p) {
    return m.hp.hybrid() && p.n_verify_max > 0 && p.rollback == LUCE_ROLLBACK_REPLAY;
}

// Scratch of the replay graph: one DeltaNet layer's intermediates at a time (conv window, conv
// output, normed q/k, outputs and state), twice over for the allocator's placement.
static uint64_t replay_scratch_bound(const HParams & hp, int n) {
    const uint64_t S = uint64_t(hp.ssm_state), Hk = uint64_t(hp.ssm_groups), Hv = uint64_t(hp.ssm_heads);
    const uint64_t C = uint64_t(hp.conv_channels()), W = uint64_t(hp.ssm_conv - 1), N = uint64_t(n);
    const uint64_t layer = 4 * ((W + N) * C + 2 * C * N + 4 * Hk * S * N + S * Hv * (N + S));
    return 2 * layer + (1u << 20);
}

// Scratch of a hybrid tree verify's recurrence (tree_paths.h) beyond the verify's own: per DeltaNet
// layer the gathered and transposed path inputs, their conv windows and outputs, normed q/k, the
// state repeated per path and the outputs with each path's final state; twice over for placement.
// Plus the commit's move of the longest path (the conv window transposed and gathered).
static uint64_t tree_scratch_bound(const HParams & hp, int n) {
    const uint64_t S = uint64_t(hp.ssm_state), Hk = uint64_t(hp.ssm_groups), Hv = uint64_t(hp.ssm_heads);
    const uint64_t C = uint64_t(hp.conv_channels()), W = uint64_t(hp.ssm_conv - 1);
    const uint64_t R = uint64_t(tree_path_rows_max(n)), P = uint64_t(tree_paths_max(n)), N = uint64_t(n);
    const uint64_t layer = 4 * (3 * C * R + W * C * P + 4 * Hk * S * R + 2 * Hv * R + 2 * S * S * Hv * P + S * Hv * (R + N));
    const uint64_t move = 4 * 2 * (W + N) * C;
    return 2 * layer + move + (1u << 20);
}

luce_memory_plan plan_memory(const Model & m, const luce_engine_params & params) {
    const luce_engine_params p = normalized_engine_params(m, params);
    const HParams & hp = m.hp;
    const ggml_type tk = cache_ggml_type(p.type_k), tv = cache_ggml_type(p.type_v);
    luce_memory_plan plan{};
    plan.n_ctx = p.n_ctx;
    plan.weights = m.weight_bytes;
    plan.kv_cache = AttentionKv::bytes(hp, p.n_ctx, tk, tv);
    const bool replay = rollback_by_replay(m, p);
    plan.recurrent = hp.hybrid() ? RecurrentState::bytes(hp, p.n_verify_max, replay) : 0;
    // Scratch of the largest graph (one micro-batch attending the full cache): live activations,
    // the mask, and on GPUs the F16 copy of a quantized K/V that batched attention makes.
    const uint64_t nb = uint64_t(p.n_batch), E = uint64_t(hp.n_embd), F = uint64_t(hp.n_ff);
    const uint64_t QD = uint64_t(hp.n_head) * hp.head_dim, KVD = uint64_t(hp.n_head_kv) * hp.head_dim;
    const auto graph_bytes = [&](uint64_t n) {   // a graph of n tokens: activations, mask, logits
        return n * (4 * E + 3 * F + 4 * QD + 2 * KVD) * 4 + uint64_t(p.n_ctx) * n * 2 + uint64_t(hp.n_vocab) * 4;
    };
    // the batches' graph, the one-token steps' graph of their own (Engine's step slot), and a
    // graph of the widest verify in each verify slot
    const uint64_t nv = uint64_t(p.n_verify_max);
    uint64_t compute = graph_bytes(nb) + graph_bytes(1) + (nv > 1 ? kVerifyGraphs * graph_bytes(nv) : 0);
    if (!device_is_cpu(m.dev) && (ggml_is_quantized(tk) || ggml_is_quantized(tv))) compute += 2 * uint64_t(p.n_ctx) * KVD * 2;
    // a small-batch runner's scratch for the step slot and each verify slot
    if (!device_is_cpu(m.dev) && p.small_batch_kernels && small_batch_kernels_may_take_any(m.ctx, KernelScope::more_past_mmvq)) compute += (1 + kVerifyGraphs) * small_batch_scratch_bound(matmul_width(hp), p.small_batch_max_tokens);
    if (replay) compute += replay_scratch_bound(hp, p.n_verify_max);
    if (replay && p.tree_verify) compute += kVerifyGraphs * tree_scratch_bound(hp, p.n_verify_max);
    // a tree by nodes on a GPU: the verify slots' runners' state stacks
    if (replay && p.tree_verify && !device_is_cpu(m.dev) && p.small_batch_kernels &&
        p.tree_recurrence != LUCE_TREE_RECURRENCE_PATHS && cuda::tree_recurrence_supports(hp.ssm_state)) {
        compute += kVerifyGraphs * tree_nodes_stacks_bound(p.n_verify_max, hp.ssm_state, hp.ssm_heads);
    }
    plan.compute = compute;
    plan.outputs = uint64_t(hp.n_vocab) * 4 * nb;
    finish_plan(plan, m.dev, m.buffer != nullptr);
    return plan;
}

void check_plan_fits(const Model & m, const luce_engine_params & p, const luce_memory_plan & plan) {
    if (plan_fits(plan)) return;
    const uint64_t per_token = AttentionKv::bytes(m.hp, 1, cache_ggml_type(p.type_k), cache_ggml_type(p.type_v));
    const uint64_t spare = plan_spare(plan, plan.device_need - plan.kv_cache);
    const int64_t max_ctx = int64_t(spare / std::max<uint64_t>(per_token, 1)) / kCtxPad * kCtxPad;
    const bool resident = plan.device_budget > plan.device_free;   // the weights are in the need and the budget
    throw Error(LUCE_ERR_MEMORY,
                "memory plan does not fit " + m.device_name + ": KV cache for " + std::to_string(plan.n_ctx) +
                    " tokens (" + cache_type_name(p.type_k) + "/" + cache_type_name(p.type_v) + ") needs " +
                    format_bytes(plan.kv_cache) + " plus " + format_bytes(plan.compute) + " of scratch" +
                    (resident ? std::string() : " and " + format_bytes(plan.weights) + " of weights") + ", but only " +
                    format_bytes(plan.device_free) + " is free. Use --max-ctx " + std::to_string(std::max<int64_t>(max_ctx, 0)) +
                    " or less, or a smaller cache type (--cache-type-k/-v q8_0 or q4_0).");
}

} // namespace luce
