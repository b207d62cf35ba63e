// graph_pieces.h — node ranges of an allocated graph as graphs of their own, for computing a graph
// in pieces (small_batch_runner.h) without losing what a backend does within a piece.
//
// ggml.h has no graph views. A graph built with ggml_graph_add_node holds the nodes but not their
// use counts, and ggml's CUDA backend then fuses no ops (its fusion checks that an intermediate has
// exactly one use). Here each range's nodes are duplicated (same op, parameters, data and buffer),
// with sources from outside the range replaced by leaf proxies of the same memory, and expanded
// into a graph with ggml_build_forward_expand, which counts uses within the range. A node whose
// result is read after its range (by a later node, through a view, or by the caller) is flagged
// an output, so no fusion elides it. Memory stays the allocation of the whole graph.
#pragma once

#include "ggml.h"

#include <utility>
#include <vector>

namespace luce {

class GraphPieces {
public:
    GraphPieces() = default;
    GraphPieces(const GraphPieces &) = delete;
    GraphPieces & operator=(const GraphPieces &) = delete;
    ~GraphPieces();

    // One graph per range [begin, end) of gf's nodes; ranges ascending and disjoint. Returns false
    // when the memory for the duplicates cannot be had.
    bool build(ggml_cgraph * gf, const std::vector<std::pair<int, int>> & ranges);
    ggml_cgraph * graph(size_t i) const { return graphs_[i]; }
    size_t size() const { return graphs_.size(); }

private:
    ggml_context * ctx_ = nullptr;
    std::vector<ggml_cgraph *> graphs_;
};

} // namespace luce
