// graph_views.h — node ranges of an allocated graph as graphs of their own, for computing a graph
// in pieces (small_batch_runner.h) without losing what a backend does within a piece.
//
// A backend fuses ops where an intermediate has no other use, which it reads from the graph's use
// counts. ggml.h has no graph views (ggml_graph_view is internal), so a view here is the graph
// object of the pinned ggml (ggml-impl.h) with the range's nodes and the whole graph's use counts
// and hash set: a backend then fuses within a range exactly where it would in the whole graph, and
// never elides a result that a later piece (or the caller) reads, since that read is a use too.
// The layout is checked against ggml's accessors on every build; where it does not match, views
// hold their nodes alone (no use counts: no fusion, never wrong).
#pragma once

#include "ggml.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace luce {

class GraphViews {
public:
    GraphViews() = default;
    GraphViews(const GraphViews &) = delete;
    GraphViews & operator=(const GraphViews &) = delete;
    ~GraphViews();

    // One view per range [begin, end) of gf's nodes, ranges ascending and disjoint; gf must outlive
    // the views. keyed: each view also gets a twin led by a no-op key node (keyed_view, key), for
    // backends that cache work per first node (small_batch_runner_cuda.cpp). False when the memory
    // for the fallback graphs cannot be had.
    bool build(ggml_cgraph * gf, const std::vector<std::pair<int, int>> & ranges, bool keyed);
    size_t size() const { return views_.size(); }
    ggml_cgraph * view(size_t i) { return views_[i].plain; }
    ggml_cgraph * keyed_view(size_t i) { return views_[i].keyed; }
    ggml_tensor * key(size_t i) { return views_[i].key; }
    bool shares_use_counts() const { return shared_; }   // false: the fallback (no fusion)

private:
    struct View {
        ggml_cgraph * plain = nullptr;
        ggml_cgraph * keyed = nullptr;
        ggml_tensor * key = nullptr;
    };
    void clear();

    ggml_context * ctx_ = nullptr;        // key nodes, and the fallback's graphs
    std::vector<View> views_;
    std::vector<std::vector<ggml_tensor *>> node_lists_;   // the shared views' nodes
    std::vector<void *> graph_objects_;                     // the shared views' graph objects
    bool shared_ = false;
};

} // namespace luce
