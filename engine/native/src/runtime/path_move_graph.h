// path_move_graph.h — after a hybrid tree verify, the kept path's recurrent inputs moved to where a
// chain verify of the same tokens would have left them, so commit's replay applies unchanged: per
// DeltaNet layer the conv window's columns W + nodes[d] -> W + d, the decay and beta rows
// nodes[d] -> d (engine_tree_hybrid.cpp). Built once per path length, on the device.
#pragma once

#include "context_state.h"
#include "model.h"

#include "ggml.h"

namespace luce {

struct PathMoveGraph {
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * hist_cols = nullptr;   // I32 [W + k]: 0..W-1, then W + nodes[d]
    ggml_tensor * rows = nullptr;        // I32 [k]: nodes[d]
    PathMoveGraph(const Model & m, const ContextState & kv, int k);   // throws
    ~PathMoveGraph();
    PathMoveGraph(const PathMoveGraph &) = delete;
    PathMoveGraph & operator=(const PathMoveGraph &) = delete;
};

} // namespace luce
