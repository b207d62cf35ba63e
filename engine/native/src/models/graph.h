// graph.h — forward graphs of one evaluation shape (n_tokens new tokens attending to n_kv cache
// cells). A graph is built once per shape and replayed while the shape repeats; only the input
// tensors (tokens, positions, cache rows, mask) change between launches.
#pragma once

#include "context_state.h"
#include "model.h"

#include "ggml.h"

#include <memory>

namespace luce {

struct GraphShape {
    int n_tokens = 0;
    int n_kv = 0;           // cache cells attended: used length rounded up to 256
    bool logits_all = false;
    bool verify = false;    // hybrid: leave the state; keep what rollback needs (recurrent_state.h)
    // hybrid tree verify: the recurrent layers run tree_paths sequences of tree_depth tokens
    // (tree_paths.h); 0 for every other graph
    int tree_paths = 0, tree_depth = 0;
    // hybrid tree verify: the recurrent layers run the nodes once each instead (tree_nodes.h)
    bool tree_nodes = false;
    bool operator==(const GraphShape & o) const {
        return n_tokens == o.n_tokens && n_kv == o.n_kv && logits_all == o.logits_all && verify == o.verify &&
               tree_paths == o.tree_paths && tree_depth == o.tree_depth && tree_nodes == o.tree_nodes;
    }
};

// A graph over a batch of tokens written to a KV cache, with the inputs every such graph has
// (the target's forward graphs, the PFlash scorer's).
struct TokenBatchGraph {
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * tokens = nullptr;   // I32 [n_tokens]
    ggml_tensor * pos = nullptr;      // I32 [n_tokens · positions per token]
    ggml_tensor * kv_idx = nullptr;   // I64 [n_tokens]: cache rows written
    ggml_tensor * mask = nullptr;     // F16 [n_kv, n_tokens]: 0 = visible, -inf = hidden
    // The graph's context (room for max_nodes nodes) and those inputs; throws LUCE_ERR_MEMORY.
    void init(size_t max_nodes, int64_t n_tokens, int64_t n_pos_per_token, int64_t n_kv);
    TokenBatchGraph() = default;
    TokenBatchGraph(const TokenBatchGraph &) = delete;
    TokenBatchGraph & operator=(const TokenBatchGraph &) = delete;
    ~TokenBatchGraph();
};

struct ForwardGraph : TokenBatchGraph {
    GraphShape shape;
    ggml_tensor * logits = nullptr;   // F32 [n_vocab, n_out]
    ggml_tensor * argmax = nullptr;   // I32 [n_out]: greedy token per row
    ggml_tensor * logit_sums = nullptr;   // F32 [1, n_out]: finite iff the row is (GPU graphs; on the CPU argmax is -1)
    ggml_tensor * cap_idx = nullptr;  // I64 [n_tokens]: capture ring rows (position mod ring), if capturing
    ggml_tensor * path_rows = nullptr;   // I32 [tree_paths · tree_depth]: TreePaths::path_rows (hybrid tree verify)
    ggml_tensor * node_slot = nullptr;   // I32 [n_tokens]: TreePaths::node_slot
    ggml_tensor * tree_visits = nullptr;   // I32 [3 · n_tokens]: TreeNodes::visits (hybrid tree verify by nodes)
    ggml_tensor * tree_windows = nullptr;  // I32 [ssm_conv · n_tokens]: TreeNodes::window_rows
};

size_t graph_max_nodes(const Model & m);
// The model's forward graph, by its architecture's row (arch.h).
std::unique_ptr<ForwardGraph> build_graph(const Model & m, const ContextState & kv, GraphShape shape);
// Rollback by replay (kv.rec.replay): adds to gf the recurrence of the pending verify's first k tokens
// from each DeltaNet layer's state, written back in place, and the conv window that ends at token k.
void add_qwen35_replay(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const ContextState & kv, int k);
// That replay for k tokens in a context of its own.
struct ReplayGraph {
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ReplayGraph(const Model & m, const ContextState & kv, int k);   // throws
    ~ReplayGraph();
    ReplayGraph(const ReplayGraph &) = delete;
    ReplayGraph & operator=(const ReplayGraph &) = delete;
};

// Shared blocks (graph_blocks.cpp)
ggml_tensor * rms_norm_w(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, float eps);
ggml_tensor * linear(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, ggml_tensor * b = nullptr);
ggml_tensor * swiglu_ffn(ggml_context * ctx, const LayerWeights & L, ggml_tensor * x);
// The model's RoPE (llama: adjacent pairs, qwen3: NEOX halves) of x [D, H, n] at positions pos [n].
ggml_tensor * rope(ggml_context * ctx, const Model & m, ggml_tensor * x, ggml_tensor * pos);
// Causal attention of the new tokens over the cache after writing their K/V. q [D, Hq, n]. Returns [D·Hq, n].
ggml_tensor * cached_attention(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const ContextState & kv,
                               const ForwardGraph & g, int il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v);
// Graph context, cgraph and the common inputs (positions: n_pos_per_token values per token).
std::unique_ptr<ForwardGraph> new_forward_graph(const Model & m, GraphShape shape, int n_pos_per_token);
// Copies x [E, n] into the capture ring of layer il when il is captured at this stage
// (stage_output false: x is the layer's input; true: its output).
void capture_hidden(ggml_context * ctx, ForwardGraph & g, const ContextState & kv, int il, bool stage_output, ggml_tensor * x);
// Final norm + LM head over the last row (or all rows), marked as the graph's output.
void finish_logits(ggml_context * ctx, ForwardGraph & g, const Model & m, const ContextState & kv, ggml_tensor * x);

} // namespace luce
