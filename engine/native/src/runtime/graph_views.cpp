// graph_views.cpp — see graph_views.h.
#include "graph_views.h"

#include <cstring>

namespace luce {
namespace {

// struct ggml_cgraph and struct ggml_hash_set of the pinned ggml (ggml-impl.h).
struct HashSetLayout {
    size_t size;
    uint32_t * used;   // ggml_bitset_t
    ggml_tensor ** keys;
};
struct GraphLayout {
    int size;
    int n_nodes;
    int n_leafs;
    ggml_tensor ** nodes;
    ggml_tensor ** grads;
    ggml_tensor ** grad_accs;
    ggml_tensor ** leafs;
    int32_t * use_counts;   // indexed by hash slot
    HashSetLayout visited_hash_set;
    int order;              // enum ggml_cgraph_eval_order
    uint64_t uid;
};

// ggml_hash_find: the slot of t, or size when it is not in the set.
size_t hash_slot(const HashSetLayout & hs, const ggml_tensor * t) {
    const size_t h = (size_t(reinterpret_cast<uintptr_t>(t)) >> 4) % hs.size;
    for (size_t i = h;;) {
        if (!(hs.used[i >> 5] & (1u << (i & 31)))) return hs.size;
        if (hs.keys[i] == t) return i;
        i = (i + 1) % hs.size;
        if (i == h) return hs.size;
    }
}

// gf laid out as GraphLayout says: its fields agree with ggml's accessors, and every node is in its
// hash set with a use count.
bool layout_matches(ggml_cgraph * gf) {
    const auto * g = reinterpret_cast<const GraphLayout *>(gf);
    if (g->size != ggml_graph_size(gf) || g->n_nodes != ggml_graph_n_nodes(gf) || g->nodes != ggml_graph_nodes(gf)) return false;
    const HashSetLayout & hs = g->visited_hash_set;
    if (!g->use_counts || !hs.used || !hs.keys || hs.size < size_t(g->n_nodes)) return false;
    for (int i = 0; i < g->n_nodes; ++i) {
        const size_t slot = hash_slot(hs, g->nodes[i]);
        if (slot == hs.size || g->use_counts[slot] < 0) return false;
    }
    return true;
}

} // namespace

GraphViews::~GraphViews() { clear(); }

void GraphViews::clear() {
    views_.clear();
    node_lists_.clear();
    for (void * g : graph_objects_) delete static_cast<GraphLayout *>(g);
    graph_objects_.clear();
    if (ctx_) ggml_free(ctx_);
    ctx_ = nullptr;
    shared_ = false;
}

bool GraphViews::build(ggml_cgraph * gf, const std::vector<std::pair<int, int>> & ranges, bool keyed) {
    clear();
    shared_ = layout_matches(gf);
    size_t bytes = 1024;
    for (const auto & r : ranges) {
        const size_t n = size_t(r.second - r.first);
        if (keyed) bytes += ggml_tensor_overhead();
        if (!shared_) bytes += ggml_graph_overhead_custom(n, false) + (keyed ? ggml_graph_overhead_custom(n + 1, false) : 0);
    }
    ggml_init_params ip{bytes, nullptr, true};
    ctx_ = ggml_init(ip);
    if (!ctx_) return false;

    const auto * whole = reinterpret_cast<const GraphLayout *>(gf);
    // a view: the whole graph's object with these nodes (no leafs, no gradients), as ggml_graph_view
    auto shared_view = [&](std::vector<ggml_tensor *> nodes) {
        node_lists_.push_back(std::move(nodes));
        auto * v = new GraphLayout(*whole);
        v->size = 0;
        v->n_nodes = int(node_lists_.back().size());
        v->n_leafs = 0;
        v->nodes = node_lists_.back().data();
        v->grads = v->grad_accs = v->leafs = nullptr;
        v->uid = 0;
        graph_objects_.push_back(v);
        return reinterpret_cast<ggml_cgraph *>(v);
    };
    auto own_graph = [&](const std::vector<ggml_tensor *> & nodes) {
        ggml_cgraph * g = ggml_new_graph_custom(ctx_, nodes.size(), false);
        for (ggml_tensor * t : nodes) ggml_graph_add_node(g, t);
        return g;
    };
    node_lists_.reserve(ranges.size() * (keyed ? 2 : 1));   // views point into these lists
    for (const auto & r : ranges) {
        std::vector<ggml_tensor *> nodes(ggml_graph_nodes(gf) + r.first, ggml_graph_nodes(gf) + r.second);
        View v;
        if (keyed) {
            v.key = ggml_new_tensor_1d(ctx_, GGML_TYPE_F32, 1);   // GGML_OP_NONE: backends skip it
            std::vector<ggml_tensor *> with_key{v.key};
            with_key.insert(with_key.end(), nodes.begin(), nodes.end());
            v.keyed = shared_ ? shared_view(std::move(with_key)) : own_graph(with_key);
        }
        v.plain = shared_ ? shared_view(std::move(nodes)) : own_graph(nodes);
        views_.push_back(v);
    }
    return true;
}

} // namespace luce
