// tree_paths.h — a verify tree's root-to-leaf paths, for the recurrent (DeltaNet) layers of a hybrid
// model: attention sees the tree through its mask, but a recurrence has one state per sequence, so
// each path runs as its own sequence from the committed state (the matmuls still see each node once).
#pragma once

#include <cstdint>
#include <vector>

namespace luce {

struct TreePaths {
    int n_paths = 0;   // sequences (the leaves, padded up to a bucket by repeating the first path)
    int depth = 0;     // tokens per sequence (the deepest path, padded up to a bucket)
    // path_rows[p * depth + d]: the node at step d of sequence p (a short path repeats its leaf)
    std::vector<int32_t> path_rows;
    // node_slot[i]: the slot p * depth + depth(i) of a sequence that passes through node i
    std::vector<int32_t> node_slot;
    int rows() const { return n_paths * depth; }
};

// parents[0] = -1, parents[i] < i. Buckets (paths: powers of two, depth: multiples of 4) keep the
// number of distinct graph shapes small while trees change shape every step.
TreePaths tree_paths(const int32_t * parents, int32_t n);

// The bucketed sizes a tree of at most n nodes can need, whatever its shape (what the memory plan
// reserves): at most n-1 leaves, and leaves + depth <= n + 1.
int tree_paths_max(int n);      // sequences
int tree_path_rows_max(int n);  // sequences x tokens

} // namespace luce
