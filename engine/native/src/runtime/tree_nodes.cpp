#include "tree_nodes.h"

#include <algorithm>

namespace luce {

int tree_nodes_slots_max(int n) {
    int slots = 1;
    while ((2 << slots) <= n) ++slots;   // floor(log2(n)) + 1 for n >= 2
    return slots;
}

TreeNodes tree_nodes(const int32_t * parents, int32_t n, int window) {
    TreeNodes t;
    if (n <= 0) return t;
    std::vector<int32_t> size(size_t(n), 1);
    for (int32_t i = n - 1; i > 0; --i) size[size_t(parents[i])] += size[size_t(i)];
    std::vector<std::vector<int32_t>> children(static_cast<size_t>(n));
    for (int32_t i = 1; i < n; ++i) children[size_t(parents[i])].push_back(i);
    for (auto & c : children) {
        std::stable_sort(c.begin(), c.end(), [&](int32_t a, int32_t b) { return size[size_t(a)] < size[size_t(b)]; });
    }
    // depth-first, pre-order; a node of several children holds a slot until its last child starts
    std::vector<int32_t> slot_of(size_t(n), -1), todo{0};
    int depth = 0;   // slots in use
    int32_t previous = -1;
    while (!todo.empty()) {
        const int32_t v = todo.back();
        todo.pop_back();
        int32_t load = kTreeLoadCommitted;
        if (v > 0) {
            const int32_t p = parents[v];
            load = p == previous ? kTreeLoadContinue : slot_of[size_t(p)];
            if (children[size_t(p)].size() > 1 && v == children[size_t(p)].back()) --depth;   // the last child frees it
        }
        int32_t save = kTreeNoSave;
        if (children[size_t(v)].size() > 1) {
            save = slot_of[size_t(v)] = depth++;
            t.slots = std::max(t.slots, depth);
        }
        t.visits.insert(t.visits.end(), {v, load, save});
        for (auto c = children[size_t(v)].rbegin(); c != children[size_t(v)].rend(); ++c) todo.push_back(*c);
        previous = v;
    }
    // conv windows: committed inputs are rows 0..window-2, node j's input row window-1+j
    const int32_t W = window - 1;
    t.window_rows.assign(size_t(n) * size_t(window), 0);
    for (int32_t i = 0; i < n; ++i) {
        int32_t * row = &t.window_rows[size_t(i) * size_t(window)];
        int32_t v = i, back = 0;   // row[W - back] is the input `back` steps before node i
        for (; back <= W && v >= 0; ++back, v = parents[v]) row[W - back] = W + v;
        for (int32_t c = W - 1; back <= W; ++back, --c) row[W - back] = c;   // before the root: committed
    }
    return t;
}

} // namespace luce
