// tree_recurrence_op.h — the graph node of a hybrid tree verify's recurrence by nodes (tree_nodes.h):
// per node the gated delta rule from its parent's state, in the visit order of TreeNodes::visits.
//
// ggml has no such op. On the CPU it is a custom op of luce's (tree_recurrence_op.cpp). On CUDA it
// is a gated_delta_net node over the n nodes as if they were a chain, marked by its name and its
// visits as an extra source: only the small-batch runner may compute the graph, and it replaces that
// node with cuda/tree_recurrence.h's kernel (ggml would compute a chain, which is not the tree).
#pragma once

#include "ggml.h"

namespace luce {

// q, k [S, Hk, n, 1], v [S, H, n, 1] (rows contiguous), g and beta [1, H, n, 1], state [S, S, H, 1],
// visits I32 [3 · n]. Returns the outputs [S · H, n] (a view on CUDA).
ggml_tensor * tree_recurrence_node(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * g,
                                   ggml_tensor * beta, ggml_tensor * state, ggml_tensor * visits, bool on_cpu);

// The CUDA form's node (the gated_delta_net whose src[kTreeVisitsSrc] holds the visits).
constexpr int kTreeVisitsSrc = 6;
bool is_tree_recurrence_node(const ggml_tensor * t);

} // namespace luce
