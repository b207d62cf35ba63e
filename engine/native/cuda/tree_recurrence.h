// tree_recurrence.h — a verify tree's gated DeltaNet recurrence in one pass over its nodes (CUDA).
//
// A recurrence has one state per sequence, so a tree would otherwise run each root-to-leaf path as
// its own sequence from a copy of the committed state (tree_paths.h): the state read once a path and
// the shared prefixes recomputed. Here each node is computed once, in a depth-first visit order the
// host plans (tree_recurrence_plan.h): a node whose parent was the node visited just before continues
// from the state in registers; a node that has more children than one saves its state to a small
// stack in device memory, from which its later children resume.
//
// Per node the arithmetic is that of ggml-cuda's gated_delta_net kernel (llama-cpp-python 0.3.36)
// for one token, statement for statement and built with the same -use_fast_math: a node's output is
// bit for bit the output of a chain verify of its path.
#pragma once

#include <cstddef>
#include <cstdint>

namespace luce::cuda {

struct TreeRecurrence {
    // q, k: [S, Hk, n] (head h reads q/k head h % Hk); v: [S, H, n]; strides in floats
    const float * q;
    const float * k;
    const float * v;
    int64_t qk_head_stride, qk_node_stride;
    int64_t v_head_stride, v_node_stride;
    const float * g;      // [H, n] contiguous: log decay per head and node
    const float * beta;   // [H, n] contiguous
    const float * state;  // [S, S, H]: the committed state, each head's columns contiguous (as ggml keeps it)
    float * out;          // [S, H, n]: the outputs, node i at i·S·H
    const int32_t * plan; // device [3·n]: per visit (node, load, save), tree_recurrence_plan.h
    float * stack;        // device: H · S · S floats for each stack slot the visits name
    int S, H, Hk, n;
    float scale;          // 1 / sqrt(S), computed on the host in float as ggml does
};

// S the kernel is built for (ggml's gated_delta_net takes the same).
constexpr bool tree_recurrence_supports(int64_t S) { return S == 16 || S == 32 || S == 64 || S == 128; }
inline size_t tree_recurrence_stack_bytes(int slots, int64_t S, int64_t H) {
    return size_t(slots) * size_t(H) * size_t(S) * size_t(S) * sizeof(float);
}

// Queues the pass on `stream` (a cudaStream_t). Returns 0, or a CUDA error code.
int tree_recurrence(const TreeRecurrence & r, void * stream);

} // namespace luce::cuda
