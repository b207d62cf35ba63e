// graph_pieces.cpp — see graph_pieces.h.
#include "graph_pieces.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace luce {

GraphPieces::~GraphPieces() {
    if (ctx_) ggml_free(ctx_);
}

namespace {

// Index of the last node that reads t, directly or through views of it; -1 when none does.
std::unordered_map<const ggml_tensor *, int> last_reads(ggml_cgraph * gf) {
    std::unordered_map<const ggml_tensor *, int> last;
    const int n = ggml_graph_n_nodes(gf);
    for (int i = 0; i < n; ++i) {
        const ggml_tensor * node = ggml_graph_node(gf, i);
        for (int s = 0; s < GGML_MAX_SRC; ++s) {
            for (const ggml_tensor * t = node->src[s]; t; t = t->view_src) last[t] = i;
        }
        for (const ggml_tensor * t = node->view_src; t; t = t->view_src) last[t] = i;   // a view keeps its source
    }
    return last;
}

} // namespace

bool GraphPieces::build(ggml_cgraph * gf, const std::vector<std::pair<int, int>> & ranges) {
    graphs_.clear();
    if (ctx_) ggml_free(ctx_);
    ctx_ = nullptr;

    // size the context exactly: per range its nodes, the proxies of its outside sources, a graph
    std::vector<size_t> n_proxies(ranges.size(), 0);
    size_t bytes = 0;
    for (size_t r = 0; r < ranges.size(); ++r) {
        std::unordered_set<const ggml_tensor *> inside, outside;
        for (int i = ranges[r].first; i < ranges[r].second; ++i) inside.insert(ggml_graph_node(gf, i));
        for (int i = ranges[r].first; i < ranges[r].second; ++i) {
            const ggml_tensor * node = ggml_graph_node(gf, i);
            for (int s = 0; s < GGML_MAX_SRC; ++s) {
                if (node->src[s] && !inside.count(node->src[s])) outside.insert(node->src[s]);
            }
            // a view's source gets a proxy too, and need not be among its srcs (a view of a view)
            if (node->view_src && !inside.count(node->view_src)) outside.insert(node->view_src);
        }
        n_proxies[r] = outside.size();
        const size_t n = size_t(ranges[r].second - ranges[r].first) + outside.size();
        bytes += ggml_graph_overhead_custom(n, false) + n * ggml_tensor_overhead();
    }
    ggml_init_params ip{bytes + 4096, nullptr, true};
    ctx_ = ggml_init(ip);
    if (!ctx_) return false;

    const auto last = last_reads(gf);
    for (size_t r = 0; r < ranges.size(); ++r) {
        const int begin = ranges[r].first, end = ranges[r].second;
        std::unordered_map<const ggml_tensor *, ggml_tensor *> copy;   // originals -> duplicates or proxies
        auto proxy = [&](ggml_tensor * t) {
            ggml_tensor * p = ggml_new_tensor(ctx_, t->type, GGML_MAX_DIMS, t->ne);
            *p = *t;                  // same shape, strides, data and buffer ...
            p->op = GGML_OP_NONE;     // ... but a leaf: nothing before the range is recomputed
            p->flags &= ~GGML_TENSOR_FLAG_COMPUTE;
            for (auto & s : p->src) s = nullptr;
            p->view_src = nullptr;
            p->view_offs = 0;
            return p;
        };
        ggml_cgraph * g = ggml_new_graph_custom(ctx_, size_t(end - begin) + n_proxies[r], false);
        for (int i = begin; i < end; ++i) {
            ggml_tensor * node = ggml_graph_node(gf, i);
            ggml_tensor * d = ggml_new_tensor(ctx_, node->type, GGML_MAX_DIMS, node->ne);
            *d = *node;
            for (auto & s : d->src) {
                if (!s) continue;
                auto it = copy.find(s);
                s = it != copy.end() ? it->second : (copy[s] = proxy(s));
            }
            if (d->view_src) {
                auto it = copy.find(d->view_src);
                d->view_src = it != copy.end() ? it->second : (copy[d->view_src] = proxy(d->view_src));
            }
            const auto lr = last.find(node);
            if (lr == last.end() || lr->second >= end) d->flags |= GGML_TENSOR_FLAG_OUTPUT;   // read later, or a result
            copy[node] = d;
            ggml_build_forward_expand(g, d);
        }
        graphs_.push_back(g);
    }
    return true;
}

} // namespace luce
