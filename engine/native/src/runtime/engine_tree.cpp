// engine_tree.cpp — tree verification (DDTree, docs/algorithms.md §3): one batch
// of n nodes with an ancestor mask and depth positions, then the commit of one root-to-node path,
// whose K/V and captured features are moved into place without running the model again.
#include "engine.h"
#include "error.h"
#include "graph_per_length.h"
#include "path_move_graph.h"

#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace luce {

void Engine::verify_tree(const int32_t * toks, const int32_t * parents, int32_t n, bool keep_pre_logits) {
    if (m_.hp.hybrid() && !params_.tree_verify) {
        throw Error(LUCE_ERR_INVALID_ARG, "tree verification of a hybrid (" + m_.hp.arch + ") model needs the engine "
                                          "created with tree_verify (its paths' scratch is planned then)");
    }
    if (m_.hp.hybrid() && !kv_.rec.replay) {
        // the recurrent layers run each root-to-leaf path from the committed state (tree_paths.h), and
        // commit_path replays the kept one: per-token snapshots would be per path
        throw Error(LUCE_ERR_UNSUPPORTED, "tree verification of a hybrid (" + m_.hp.arch +
                                              ") model needs rollback by replay (the default), not snapshots");
    }
    if (!parents) throw Error(LUCE_ERR_INVALID_ARG, "a tree verify needs parent ids");
    begin_verify(toks, n, keep_pre_logits);
    if (parents[0] != -1) throw Error(LUCE_ERR_INVALID_ARG, "tree node 0 is the root: its parent must be -1, not " + std::to_string(parents[0]));
    for (int32_t i = 1; i < n; ++i) {
        if (parents[i] < 0 || parents[i] >= i) {
            throw Error(LUCE_ERR_INVALID_ARG, "tree node " + std::to_string(i) + " has parent " + std::to_string(parents[i]) +
                                                  ": a parent must be an earlier node (0.." + std::to_string(i - 1) + ")");
        }
    }
    try {
        eval(toks, n, /*logits_all=*/true, /*verify=*/true, /*decode=*/false, parents);
    } catch (...) {
        logits_.restore(LogitRows::Saved(pre_verify_logits_));
        throw;
    }
    pending_ = n;
    tree_parents_.assign(parents, parents + n);
}

void Engine::commit_path(const int32_t * nodes, int32_t k) {
    if (pending_ == 0) throw Error(LUCE_ERR_STATE, "no verification to commit");
    if (k < 0 || k > pending_) {
        throw Error(LUCE_ERR_INVALID_ARG, "a path keeps 0.." + std::to_string(pending_) + " nodes, not " + std::to_string(k));
    }
    if (k > 0 && !nodes) throw Error(LUCE_ERR_INVALID_ARG, "commit_path needs the path's nodes");
    for (int32_t d = 0; d < k; ++d) {
        const int32_t want_parent = d == 0 ? -1 : nodes[d - 1];
        const bool in_range = nodes[d] >= 0 && nodes[d] < pending_;
        const int32_t parent = !in_range ? -2 : tree_parents_.empty() ? nodes[d] - 1 : tree_parents_[size_t(nodes[d])];
        if (parent != want_parent) {
            throw Error(LUCE_ERR_INVALID_ARG, "path entry " + std::to_string(d) + " (node " + std::to_string(nodes[d]) +
                                                  ") is not " + (d == 0 ? std::string("the root (node 0)")
                                                                        : "a child of node " + std::to_string(want_parent)));
        }
    }
    if (tree_parents_.empty() || k == 0) {   // a chain's paths are its prefixes
        tree_parents_.clear();
        commit(k);
        return;
    }
    const size_t n0 = tokens_.size() - size_t(pending_);
    move_path_rows(nodes, k);
    if (m_.hp.hybrid()) {   // the recurrence of the kept path, from its inputs moved into place like a chain's
        move_recurrent_path_inputs(nodes, k);
        replay_recurrent(k);
    }
    for (int32_t d = 1; d < k; ++d) tokens_[n0 + size_t(d)] = tokens_[n0 + size_t(nodes[d])];   // nodes[d] >= d
    tokens_.resize(n0 + size_t(k));   // cells past this are hidden by the mask
    logits_.keep_only(nodes[k - 1]);
    tree_parents_.clear();
    pending_ = 0;
}

// Node nodes[d] was written to cache row n0 + nodes[d]; it belongs at n0 + d. Its RoPE position is
// already n0 + d (a node's position is its depth), so the rows move as raw bytes — whole
// quantization blocks for q8_0/q4_0, never requantized — on the device, by one small graph: per
// tensor a get_rows of the source rows, then a set_rows of them to their places, both on an F32
// alias of the tensor's bytes (F32 get_rows/set_rows copy values without arithmetic, so any bit
// pattern survives). Each set_rows reads its get_rows' result, so all of a tensor's sources are
// read before any of its rows is written. The capture rings move the same way (position p lives in
// ring row p % ring). A tensor whose rows are not whole 4-byte words (a quantized cache with an odd
// number of blocks per row) takes the host round trip instead.
RowMoveGraph::RowMoveGraph(const ContextState & kv, const std::vector<ggml_tensor *> & tensors, int m,
                           const std::string & device) {
    const size_t n_tensors = tensors.size() + kv.capture.rings.size();
    ggml_init_params ip = {ggml_tensor_overhead() * (3 * n_tensors + 8) + ggml_graph_overhead_custom(2 * n_tensors + 8, false),
                           nullptr, /*no_alloc=*/true};
    ctx = ggml_init(ip);
    if (!ctx) throw Error(LUCE_ERR_MEMORY, "cannot create the path commit's graph");
    gf = ggml_new_graph_custom(ctx, 2 * n_tensors + 8, false);
    auto indices = [&](ggml_type type, const char * name) {
        ggml_tensor * t = ggml_new_tensor_1d(ctx, type, m);
        ggml_set_name(t, name);
        ggml_set_input(t);
        return t;
    };
    kv_src = indices(GGML_TYPE_I32, "path_kv_src");
    kv_dst = indices(GGML_TYPE_I64, "path_kv_dst");
    ring_src = indices(GGML_TYPE_I32, "path_ring_src");
    ring_dst = indices(GGML_TYPE_I64, "path_ring_dst");
    auto move = [&](ggml_tensor * t, ggml_tensor * src, ggml_tensor * dst) {
        ggml_tensor * words = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, int64_t(t->nb[1] / sizeof(float)), t->ne[1]);
        if (ggml_backend_tensor_alloc(t->buffer, words, t->data) != GGML_STATUS_SUCCESS) {
            ggml_free(ctx);
            throw Error(LUCE_ERR_COMPUTE, "cannot alias a cache tensor for the path commit on " + device);
        }
        ggml_build_forward_expand(gf, ggml_set_rows(ctx, words, ggml_get_rows(ctx, words, src), dst));
    };
    for (ggml_tensor * t : tensors) move(t, kv_src, kv_dst);
    for (ggml_tensor * t : kv.capture.rings) move(t, ring_src, ring_dst);   // F32 [E, ring]
}

RowMoveGraph::~RowMoveGraph() { ggml_free(ctx); }

void Engine::move_path_rows(const int32_t * nodes, int32_t k) {
    const int64_t n0 = int64_t(tokens_.size()) - pending_;
    int32_t first = 1;
    while (first < k && nodes[first] == first) ++first;
    if (first == k) return;   // the path is the first k rows already
    const int32_t m = k - first;   // rows to move; nodes[d] > d for each (the nodes increase)

    std::vector<ggml_tensor *> word_rows, host_rows;
    for (size_t il = 0; il < kv_.attn.k.size(); ++il) {
        for (ggml_tensor * t : {kv_.attn.k[il], kv_.attn.v[il]}) {
            if (t) (t->nb[1] % sizeof(float) == 0 ? word_rows : host_rows).push_back(t);
        }
    }
    for (ggml_tensor * t : host_rows) move_rows_via_host(t, nodes, first, k);
    if (word_rows.empty() && kv_.capture.rings.empty()) return;

    if (!move_alloc_) move_alloc_ = ggml_gallocr_new(ggml_backend_dev_buffer_type(m_.dev));
    if (!move_alloc_) throw Error(LUCE_ERR_MEMORY, "cannot allocate the path commit's scratch on " + m_.device_name);
    RowMoveGraph & g = graph_per_length(row_moves_, move_alloc_, m,
                                        [&] { return std::make_unique<RowMoveGraph>(kv_, word_rows, m, m_.device_name); },
                                        "the path commit's scratch", m_.device_name);
    const int64_t ring = std::max<int64_t>(kv_.capture.ring, 1);
    std::vector<int32_t> src_kv(static_cast<size_t>(m)), src_ring(static_cast<size_t>(m));
    std::vector<int64_t> dst_kv(static_cast<size_t>(m)), dst_ring(static_cast<size_t>(m));
    for (int32_t i = 0; i < m; ++i) {
        const int32_t d = first + i;
        src_kv[size_t(i)] = int32_t(n0 + nodes[d]);
        dst_kv[size_t(i)] = n0 + d;
        src_ring[size_t(i)] = int32_t((n0 + nodes[d]) % ring);
        dst_ring[size_t(i)] = (n0 + d) % ring;
    }
    // an index tensor no node reads has no memory (no K/V rows here, or no capture)
    auto upload = [](ggml_tensor * t, const void * data, size_t bytes) {
        if (t->buffer) ggml_backend_tensor_set(t, data, 0, bytes);
    };
    upload(g.kv_src, src_kv.data(), src_kv.size() * sizeof(int32_t));
    upload(g.kv_dst, dst_kv.data(), dst_kv.size() * sizeof(int64_t));
    upload(g.ring_src, src_ring.data(), src_ring.size() * sizeof(int32_t));
    upload(g.ring_dst, dst_ring.data(), dst_ring.size() * sizeof(int64_t));
    const ggml_status st = ggml_backend_graph_compute(runner_->backend(), g.gf);
    if (st != GGML_STATUS_SUCCESS) throw Error(LUCE_ERR_COMPUTE, "moving the accepted path's cache rows failed on " + m_.device_name);
}

// The same for one K/V tensor through a host buffer: rows n0 .. n0 + nodes[k-1] hold every source.
void Engine::move_rows_via_host(ggml_tensor * t, const int32_t * nodes, int32_t first, int32_t k) {
    const int64_t n0 = int64_t(tokens_.size()) - pending_;
    const int32_t span = nodes[k - 1] + 1;
    const size_t rb = t->nb[1];
    std::vector<uint8_t> buf(size_t(span) * rb);
    ggml_backend_tensor_get(t, buf.data(), size_t(n0) * rb, buf.size());
    for (int32_t d = first; d < k; ++d) std::memmove(buf.data() + size_t(d) * rb, buf.data() + size_t(nodes[d]) * rb, rb);
    ggml_backend_tensor_set(t, buf.data() + size_t(first) * rb, size_t(n0 + first) * rb, size_t(k - first) * rb);
}

std::vector<int32_t> Engine::tree_history(int32_t node, int32_t last_n) const {
    const size_t n0 = tokens_.size() - size_t(pending_);
    std::vector<int32_t> path;
    for (int32_t j = node; j >= 0; j = tree_parents_[size_t(j)]) path.push_back(tokens_[n0 + size_t(j)]);
    const size_t ctx = last_n < 0 ? n0 : std::min(n0, size_t(last_n));
    std::vector<int32_t> h(tokens_.begin() + long(n0 - ctx), tokens_.begin() + long(n0));
    h.insert(h.end(), path.rbegin(), path.rend());
    return h;
}

} // namespace luce
