// engine_tree.cpp — tree verification (DDTree, docs/algorithms.md §3): one batch
// of n nodes with an ancestor mask and depth positions, then the commit of one root-to-node path,
// whose K/V and captured features are moved into place without running the model again.
#include "engine.h"
#include "error.h"

#include "ggml-backend.h"

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
// quantization blocks for q8_0/q4_0, never requantized. All sources are read before any write.
void Engine::move_path_rows(const int32_t * nodes, int32_t k) {
    const int64_t n0 = int64_t(tokens_.size()) - pending_;
    int32_t first = 1;
    while (first < k && nodes[first] == first) ++first;
    if (first == k) return;   // the path is the first k rows already
    const int32_t span = nodes[k - 1] + 1;   // rows n0 .. n0 + span - 1 hold every source
    std::vector<uint8_t> buf;
    auto move_rows = [&](ggml_tensor * t) {
        const size_t rb = t->nb[1];
        buf.resize(size_t(span) * rb);
        ggml_backend_tensor_get(t, buf.data(), size_t(n0) * rb, buf.size());
        for (int32_t d = first; d < k; ++d) std::memmove(buf.data() + size_t(d) * rb, buf.data() + size_t(nodes[d]) * rb, rb);
        ggml_backend_tensor_set(t, buf.data() + size_t(first) * rb, size_t(n0 + first) * rb, size_t(k - first) * rb);
    };
    for (size_t il = 0; il < kv_.attn.k.size(); ++il) {
        if (kv_.attn.k[il]) move_rows(kv_.attn.k[il]);
        if (kv_.attn.v[il]) move_rows(kv_.attn.v[il]);
    }
    // The capture rings hold position p at row p % ring: the draft reads the path's features there.
    const int64_t ring = kv_.capture.ring;
    for (ggml_tensor * t : kv_.capture.rings) {
        const size_t rb = t->nb[1];
        buf.resize(size_t(k) * rb);
        for (int32_t d = first; d < k; ++d) ggml_backend_tensor_get(t, buf.data() + size_t(d) * rb, size_t((n0 + nodes[d]) % ring) * rb, rb);
        for (int32_t d = first; d < k; ++d) ggml_backend_tensor_set(t, buf.data() + size_t(d) * rb, size_t((n0 + d) % ring) * rb, rb);
    }
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
