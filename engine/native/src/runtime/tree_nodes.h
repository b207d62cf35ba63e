// tree_nodes.h — a verify tree's recurrent layers computed node by node (the other way than
// tree_paths.h): each node once, from its parent's state. The host plans a depth-first visit
// (cuda/tree_recurrence.h runs it on CUDA, tree_recurrence_cpu.cpp on the CPU) and each node's
// causal conv window (its last conv_kernel - 1 ancestors' inputs, then its own).
#pragma once

#include <cstdint>
#include <vector>

namespace luce {

// A visit's state source and destination (TreeNodes::visits).
constexpr int32_t kTreeLoadContinue = -1;    // the state the previous visit left (the parent's)
constexpr int32_t kTreeLoadCommitted = -2;   // the layer's committed state (the root)
constexpr int32_t kTreeNoSave = -1;

struct TreeNodes {
    // per visit, 3 ints: the node, where its parent's state is (kTreeLoad*, or a stack slot), and
    // the stack slot its own state is saved to for its later children (kTreeNoSave)
    std::vector<int32_t> visits;
    int slots = 0;   // stack slots the visits use
    // per node, `window` ints: the rows of [committed conv inputs (window - 1) | the nodes' inputs]
    // that make its conv window, oldest first (row window - 1 + j is node j's input)
    std::vector<int32_t> window_rows;
};

// parents[0] = -1, parents[i] < i. Children are visited smallest subtree first, so that a slot is
// held only while a subtree of at most half its parent's size is visited: at most
// tree_nodes_slots_max(n) slots.
TreeNodes tree_nodes(const int32_t * parents, int32_t n, int window);
int tree_nodes_slots_max(int n);

} // namespace luce
