// small_batch_runner.h — runs a graph of a few tokens (a decode step, a draft's verification) on a
// CUDA device with its quantized matmuls on luce's small-batch GEMM (cuda/small_batch_gemm.h) and
// every other node on ggml's CUDA backend.
//
// ggml's CUDA backend offers no way to plug a kernel into its graphs, so the graph is computed in
// pieces: the node ranges between our matmuls go to ggml (as views that keep the graph's use counts,
// so ggml fuses within them: graph_views.h), the matmuls to the stream ggml computes on, where
// stream order alone orders the two (the host does not wait); where that stream cannot be found,
// to a stream of their own, with two events a piece ordering the streams. With step graphs on (and
// ggml's stream found), the second compute of a graph captures all of it, ggml's pieces and our
// kernels, as one CUDA graph, and every later compute replays that graph alone: no per-piece
// launches and no gaps between them. Memory is the scheduler's: the graph is allocated as usual, as
// one split on the device with its inputs there too, and computed in the node order the allocator
// planned for.
#pragma once

#include "ggml-backend.h"
#include "small_batch_gemm.h"
#include "tree_nodes.h"
#include "tree_recurrence.h"

#include <algorithm>
#include <memory>

namespace luce {

// Graphs of 1..16 tokens by default: decode steps and verifies. ggml's MMQ stays cheaper at 32
// (28.3 against 39.1 ms a verify on the H200, bench/RESULTS.md); an engine may move the limit
// (luce_engine_params.small_batch_max_tokens, up to the kernels' kSmallGemmMaxCols).
constexpr int kSmallBatchMinTokens = 1;
constexpr int kSmallBatchMaxTokens = 16;

// Device scratch the runner may hold for a model whose widest matmul input has k_max values
// (counted in the memory plan on GPUs).
inline size_t small_batch_scratch_bound(int64_t k_max, int max_tokens = kSmallBatchMaxTokens) {
    return cuda::small_gemm_scratch_bytes(k_max, max_tokens);
}

// A hybrid tree verify by nodes (tree_nodes.h) of up to this many nodes runs on a runner whatever
// its width: the runner computes the recurrence (cuda/tree_recurrence.h) and leaves the matmuls past
// kSmallBatchMaxTokens columns to ggml.
constexpr int kTreeNodesMax = 64;
// The state stack a runner holds for such a tree of n nodes (state size S, H heads).
inline size_t tree_nodes_stack_bound(int n, int64_t S, int64_t H) {
    return cuda::tree_recurrence_stack_bytes(tree_nodes_slots_max(n), S, H);
}
// ... the stacks of an engine's two runners: the batch slot's (trees of up to n_verify_max nodes)
// and the one-token slot's (a root alone)
inline size_t tree_nodes_stacks_bound(int n_verify_max, int64_t S, int64_t H) {
    return tree_nodes_stack_bound(n_verify_max, S, H) + tree_nodes_stack_bound(1, S, H);
}

// Which matmuls a runner's kernels take. A target's one-token steps take the core formats only:
// Q4_K, Q6_K and Q8_0 rows of whole 256-value steps (the 27B's). SmolLM2's Q8_0 output matrix (k =
// 576) on our kernels gained nothing at 8 rows (the chain of 7 1.25x plain against 1.24x with the
// kernels off, H100, bench/RESULTS.md) while its decode left llama.cpp's bits. A target's batches
// also take Q4_1 and Q8_0 rows with a partial last step once they are past ggml's
// one-kernel range (MMVQ, up to kGgmlMmvqMaxColumns columns): there ggml's MMQ rounds unlike a
// decode anyway, and its stream-k fix-ups made SmolLM2's 9-row verify 3.4 ms against 1.9 at 8 rows.
// A draft's runner takes every format at any width: its rounding only changes what is proposed
// (SmolLM2's draft pass ran 0.52 against 0.59 ms).
enum class KernelScope { core_formats, more_past_mmvq, all_formats };

// Columns up to which ggml-cuda computes a quantized matmul with MMVQ (its MMVQ_MAX_BATCH_SIZE).
constexpr int64_t kGgmlMmvqMaxColumns = 8;

inline bool small_batch_core_format(const ggml_tensor * w) {
    return w->type != GGML_TYPE_Q4_1 && w->ne[0] % 256 == 0;
}


// Whether the kernels could take a matmul with weight w (its type and row length) at some width: a
// model or draft without such a weight never replaces a matmul, so its runner allocates no scratch.
inline bool small_batch_kernels_may_take(const ggml_tensor * w, KernelScope scope) {
    return w && ggml_n_dims(w) == 2 && cuda::small_gemm_takes(int(w->type), w->ne[0]) &&
           (scope != KernelScope::core_formats || small_batch_core_format(w));
}
// ... and at n_cols columns.
inline bool small_batch_kernels_take(const ggml_tensor * w, KernelScope scope, int64_t n_cols) {
    if (scope == KernelScope::more_past_mmvq && n_cols <= kGgmlMmvqMaxColumns) scope = KernelScope::core_formats;
    return small_batch_kernels_may_take(w, scope);
}
// The same for any weight of a context of weight tensors (a model's or a draft's headers).
inline bool small_batch_kernels_may_take_any(ggml_context * weights, KernelScope scope) {
    for (ggml_tensor * t = ggml_get_first_tensor(weights); t; t = ggml_get_next_tensor(weights, t)) {
        if (small_batch_kernels_may_take(t, scope)) return true;
    }
    return false;
}

class SmallBatchRunner {
public:
    virtual ~SmallBatchRunner() = default;

    // Graphs of kSmallBatchMinTokens..max_tokens tokens qualify (make_small_batch_runner).
    virtual bool wants(int n_tokens) const = 0;
    // ... and hybrid tree verifies by nodes of n nodes with recurrent state size S (their recurrence
    // node, tree_recurrence_op.h, is replaced by the tree kernel; prepare() fails where it cannot be).
    virtual bool takes_tree_nodes(int64_t S, int n) const = 0;
    // Between building and allocating a graph: keep these graph inputs on the device (then the graph
    // is one split without input copies).
    virtual void place_input(ggml_backend_sched_t sched, ggml_tensor * input) = 0;
    // After allocation: true when gf can be computed piecewise (one split, on this device, with at
    // least one matmul for our kernels, or none when capture_alone and the step graphs capture it);
    // compute() then runs it. False leaves gf to the scheduler. capture_alone is for batches over
    // one token, which ggml's own CUDA graphs leave uncaptured (a single token keeps them).
    virtual bool prepare(ggml_backend_sched_t sched, ggml_cgraph * gf, bool capture_alone = false) = 0;
    // Computes the prepared graph and waits for it.
    virtual ggml_status compute(ggml_cgraph * gf) = 0;
    // How the last compute() ran: in pieces, captured as one CUDA graph, or replayed from it.
    enum class Ran { pieces, captured, replayed };
    virtual Ran last_ran() const = 0;
    // Matmuls of the prepared graph that run on our kernels.
    virtual int n_replaced() const = 0;
    // Device scratch held for the quantized activations.
    virtual size_t scratch_bytes() const = 0;
};

// The runner for `backend`, or null when it cannot run there: not a CUDA device of compute
// capability 8.0 or more, or luce built without CUDA. (Engines made with
// luce_engine_params.small_batch_kernels false never ask for one.) step_graphs: capture and replay
// each prepared graph as one CUDA graph (luce_engine_params.step_graphs); scope: the matmuls it takes.
// max_tokens: the widest graph (and matmul) it takes, kSmallBatchMinTokens..cuda::kSmallGemmMaxCols.
std::unique_ptr<SmallBatchRunner> make_small_batch_runner(ggml_backend_t backend, bool step_graphs, KernelScope scope,
                                                          int max_tokens = kSmallBatchMaxTokens);

} // namespace luce
