// engine_tree_hybrid.cpp — commit_path on a hybrid model (qwen35): the tree verify left the state as
// it was and kept every node's conv input, decay and beta in node order (qwen35.cpp); the kept
// path's are moved into chain order on the device, then commit's replay recomputes its state.
#include "engine.h"
#include "error.h"
#include "graph_per_length.h"
#include "path_move_graph.h"

#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <vector>

namespace luce {

PathMoveGraph::PathMoveGraph(const Model & m, const ContextState & kv, int k) {
    const HParams & hp = m.hp;
    const int64_t C = hp.conv_channels(), W = hp.ssm_conv - 1, Hv = hp.ssm_heads;
    const size_t n_nodes = size_t(12 * hp.n_layer + 16);
    ggml_init_params ip = {ggml_tensor_overhead() * n_nodes + ggml_graph_overhead_custom(n_nodes, false), nullptr, true};
    ctx = ggml_init(ip);
    if (!ctx) throw Error(LUCE_ERR_MEMORY, "cannot create the tree commit's graph");
    gf = ggml_new_graph_custom(ctx, n_nodes, false);
    hist_cols = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, W + k);
    hist_dst = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, W + k);
    rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, k);
    ggml_set_input(hist_cols);
    ggml_set_input(hist_dst);
    ggml_set_input(rows);
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!hp.is_recurrent(il)) continue;
        // The window [W + n_verify_max, C] has time along its rows: its columns move in a contiguous
        // transposed copy (gathered, then set: the set reads the gather), which is copied back whole.
        // Back into a view of the first W + k columns would be less to copy, but CUDA's copy of a
        // transposed source writes its destination as if contiguous (ggml of llama-cpp-python
        // 0.3.36), which scrambled the window of every tree commit on the H200 (2026-12-06).
        ggml_tensor * hist = kv.rec.conv_hist[size_t(il)];
        ggml_tensor * by_time = ggml_cont(ctx, ggml_transpose(ctx, hist));                      // [C, W + n_verify_max]
        ggml_tensor * moved = ggml_set_rows(ctx, by_time, ggml_get_rows(ctx, by_time, hist_cols), hist_dst);
        ggml_build_forward_expand(gf, ggml_cpy(ctx, ggml_transpose(ctx, moved), hist));
        for (ggml_tensor * t : {kv.rec.replay_g[size_t(il)], kv.rec.replay_beta[size_t(il)]}) {   // [Hv, n_verify_max]
            ggml_build_forward_expand(gf, ggml_cpy(ctx, ggml_get_rows(ctx, t, rows), ggml_view_2d(ctx, t, Hv, k, t->nb[1], 0)));
        }
    }
}

PathMoveGraph::~PathMoveGraph() { ggml_free(ctx); }

void Engine::move_recurrent_path_inputs(const int32_t * nodes, int32_t k) {
    const int64_t W = m_.hp.ssm_conv - 1;
    PathMoveGraph & pm = graph_per_length(path_moves_, path_move_alloc_, k,
                                          [&] { return std::make_unique<PathMoveGraph>(m_, kv_, k); },
                                          "the tree commit's scratch", m_.device_name);
    std::vector<int32_t> cols(size_t(W + k));
    std::vector<int64_t> dst(size_t(W + k));
    for (int64_t c = 0; c < W; ++c) cols[size_t(c)] = int32_t(c);
    for (int32_t d = 0; d < k; ++d) cols[size_t(W + d)] = int32_t(W) + nodes[d];
    for (int64_t c = 0; c < W + k; ++c) dst[size_t(c)] = c;
    ggml_backend_tensor_set(pm.hist_cols, cols.data(), 0, cols.size() * sizeof(int32_t));
    ggml_backend_tensor_set(pm.hist_dst, dst.data(), 0, dst.size() * sizeof(int64_t));
    ggml_backend_tensor_set(pm.rows, nodes, 0, size_t(k) * sizeof(int32_t));
    const ggml_status st = ggml_backend_graph_compute(runner_->backend(), pm.gf);
    if (st != GGML_STATUS_SUCCESS) throw Error(LUCE_ERR_COMPUTE, "moving the tree path's recurrent inputs failed on " + m_.device_name);
}

} // namespace luce
