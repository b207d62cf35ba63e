// graph_per_length.h — small graphs built once per length k (a rollback's replay of k tokens, a tree
// commit's move of a k-node path) and allocated on one gallocr reserved at start for the largest k.
// A graph keeps the addresses of its allocation, valid while the scratch buffer is not reallocated;
// should an allocation grow it anyway, the other graphs' addresses are stale and they are dropped.
#pragma once

#include "error.h"

#include "ggml-alloc.h"

#include <memory>
#include <string>
#include <vector>

namespace luce {

// The graph of length k in `cache` (G has a ggml_cgraph * gf), built by make() on first use.
// Throws LUCE_ERR_MEMORY ("cannot allocate <what> on <device>").
template <class G, class Make>
G & graph_per_length(std::vector<std::unique_ptr<G>> & cache, ggml_gallocr_t alloc, int32_t k, Make && make,
                     const char * what, const std::string & device) {
    if (cache.size() <= size_t(k)) cache.resize(size_t(k) + 1);
    std::unique_ptr<G> & g = cache[size_t(k)];
    if (!g) {
        g = make();
        const size_t before = ggml_gallocr_get_buffer_size(alloc, 0);
        if (!ggml_gallocr_alloc_graph(alloc, g->gf)) {
            g.reset();
            throw Error(LUCE_ERR_MEMORY, std::string("cannot allocate ") + what + " on " + device);
        }
        if (ggml_gallocr_get_buffer_size(alloc, 0) != before) {
            for (size_t i = 0; i < cache.size(); ++i) if (i != size_t(k)) cache[i].reset();
        }
    }
    return *g;
}

} // namespace luce
