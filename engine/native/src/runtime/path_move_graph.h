// path_move_graph.h — commit_path's device graphs, built once per length (graph_per_length.h).
// RowMoveGraph: the kept path's K/V and capture-ring rows moved into place (engine_tree.cpp).
// PathMoveGraph: after a hybrid tree verify, the kept path's recurrent inputs moved to where a
// chain verify of the same tokens would have left them, so commit's replay applies unchanged: per
// DeltaNet layer the conv window's columns W + nodes[d] -> W + d, the decay and beta rows
// nodes[d] -> d (engine_tree_hybrid.cpp).
#pragma once

#include "context_state.h"
#include "model.h"

#include "ggml.h"

#include <string>
#include <vector>

namespace luce {

struct RowMoveGraph {
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * kv_src = nullptr, * kv_dst = nullptr;       // I32 / I64 [m]: cache rows
    ggml_tensor * ring_src = nullptr, * ring_dst = nullptr;   // I32 / I64 [m]: capture-ring rows
    // m rows of every tensor in `tensors` (cache tensors whose rows are whole 4-byte words) and of
    // every capture ring; throws
    RowMoveGraph(const ContextState & kv, const std::vector<ggml_tensor *> & tensors, int m, const std::string & device);
    ~RowMoveGraph();
    RowMoveGraph(const RowMoveGraph &) = delete;
    RowMoveGraph & operator=(const RowMoveGraph &) = delete;
};

struct PathMoveGraph {
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * hist_cols = nullptr;   // I32 [W + k]: 0..W-1, then W + nodes[d]
    ggml_tensor * hist_dst = nullptr;    // I64 [W + k]: 0..W+k-1, where they go
    ggml_tensor * rows = nullptr;        // I32 [k]: nodes[d]
    PathMoveGraph(const Model & m, const ContextState & kv, int k);   // throws
    ~PathMoveGraph();
    PathMoveGraph(const PathMoveGraph &) = delete;
    PathMoveGraph & operator=(const PathMoveGraph &) = delete;
};

} // namespace luce
