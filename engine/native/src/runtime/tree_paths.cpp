#include "tree_paths.h"

#include <algorithm>

namespace luce {

static int round_up_pow2(int x) {
    int p = 1;
    while (p < x) p *= 2;
    return p;
}

static int bucket_depth(int tokens) { return (tokens + 3) / 4 * 4; }

int tree_paths_max(int n) { return round_up_pow2(std::max(1, n - 1)); }

int tree_path_rows_max(int n) {
    int rows = bucket_depth(n);   // one path (a chain)
    for (int leaves = 2; leaves < n; ++leaves) rows = std::max(rows, round_up_pow2(leaves) * bucket_depth(n - leaves + 1));
    return rows;
}

TreePaths tree_paths(const int32_t * parents, int32_t n) {
    std::vector<char> has_child(size_t(n), 0);
    std::vector<int32_t> depth(size_t(n), 0);
    for (int32_t i = 1; i < n; ++i) {
        has_child[size_t(parents[i])] = 1;
        depth[size_t(i)] = depth[size_t(parents[i])] + 1;
    }
    std::vector<int32_t> leaves;
    int32_t max_depth = 0;
    for (int32_t i = 0; i < n; ++i) {
        if (!has_child[size_t(i)]) leaves.push_back(i);
        max_depth = std::max(max_depth, depth[size_t(i)]);
    }
    TreePaths t;
    t.n_paths = round_up_pow2(int(leaves.size()));
    t.depth = bucket_depth(max_depth + 1);
    t.path_rows.assign(size_t(t.rows()), 0);
    t.node_slot.assign(size_t(n), -1);
    for (int p = 0; p < t.n_paths; ++p) {
        const int32_t leaf = leaves[p < int(leaves.size()) ? size_t(p) : 0];
        int32_t * row = &t.path_rows[size_t(p) * size_t(t.depth)];
        for (int32_t v = leaf; v >= 0; v = parents[v]) row[depth[size_t(v)]] = v;
        for (int d = depth[size_t(leaf)] + 1; d < t.depth; ++d) row[d] = leaf;   // padding: outputs unused
        for (int d = 0; d <= depth[size_t(leaf)]; ++d) {
            int32_t & slot = t.node_slot[size_t(row[d])];
            if (slot < 0) slot = p * t.depth + d;
        }
    }
    return t;
}

} // namespace luce
