// graph_scorer.cpp — graphs of the PFlash scorer (docs/algorithms.md §4.2, §4.3, §4.7) for the dense
// archs (llama, qwen3), on the blocks of graph_blocks.cpp.
//
// Body micro-batch: the model's forward for a run of tokens, writing K/V into the scorer's cache.
// Nothing after the last layer's K/V write is computed (no attention output, FFN or LM head
// there): later graphs read only the cache.
//
// Block-sparse attention of long inputs (§4.7, FlashPrefill's sink + local pattern): a query of
// the micro-batch [q0, q1) sees the first `sparse_sink` keys, the `sparse_window` keys before q0,
// and the batch itself causally. Those cache rows are gathered (ggml_get_rows) into a compact K/V
// of sink + window + batch rows and attended densely with ggml_flash_attn_ext under a causal mask,
// so a batch costs O(sink + window + batch) keys instead of O(q1). The tail graph always attends
// (and scores) every key, so the tail queries' view of the prompt is never sparse.
//
// Tail graph: a question (the prompt's last tokens) through the model after the cached body; at
// each layer the queries of its last n_tail tokens are scored against all S keys — softmax(Q·Kᵀ/√d) with a causal mask among the tail rows, GQA by
// ggml_mul_mat's broadcast (query head h reads KV head h / (Hq/Hkv)) — and reduced by max over
// heads into a running max over layers, M [S, n_tail], the graph's only output.
#include "scorer.h"
#include "graph.h"
#include "error.h"
#include "runtime.h"

#include <cmath>

namespace luce {

size_t scorer_graph_nodes(const Model & m) { return size_t(96) * m.hp.n_layer + 256; }

static std::unique_ptr<ScorerGraph> new_scorer_graph(const Model & m, ScorerShape shape) {
    auto g = std::make_unique<ScorerGraph>();
    g->shape = shape;
    g->init(scorer_graph_nodes(m), shape.n_tokens, 1, shape.n_kv);
    if (shape.sparse) {
        g->sel = ggml_new_tensor_1d(g->ctx, GGML_TYPE_I32, shape.n_kv);
        ggml_set_input(g->sel);
    }
    return g;
}

// q (pre-RoPE, after the q norm), and K/V written to the cache; returns the post-RoPE q.
struct LayerQKV {
    ggml_tensor * q_pre = nullptr;   // [D, Hq, n]
    ggml_tensor * q = nullptr;       // [D, Hq, n] after RoPE
    ggml_tensor * k_written = nullptr, * v_written = nullptr;   // the caches, after this batch's rows
};

static LayerQKV layer_qkv(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const ScorerCache & c,
                          const ScorerGraph & g, int il, ggml_tensor * h, bool need_q) {
    const HParams & hp = m.hp;
    const LayerWeights & L = m.layers[size_t(il)];
    const int64_t D = hp.head_dim, n = g.shape.n_tokens, KVD = int64_t(hp.n_head_kv) * D;
    LayerQKV r;
    if (need_q) {
        r.q_pre = ggml_reshape_3d(ctx, linear(ctx, L.wq, h, L.bq), D, hp.n_head, n);
        if (hp.qk_norm) r.q_pre = rms_norm_w(ctx, r.q_pre, L.q_norm, hp.rms_eps);
        r.q = rope(ctx, m, r.q_pre, g.pos);
    }
    ggml_tensor * k = ggml_reshape_3d(ctx, linear(ctx, L.wk, h, L.bk), D, hp.n_head_kv, n);
    ggml_tensor * v = linear(ctx, L.wv, h, L.bv);
    if (hp.qk_norm) k = rms_norm_w(ctx, k, L.k_norm, hp.rms_eps);
    k = rope(ctx, m, k, g.pos);
    // Later reads take the set_rows results as their source, so they are ordered after the writes
    // by the graph itself (not only by the order of expansion).
    r.k_written = ggml_set_rows(ctx, c.k[size_t(il)], ggml_reshape_2d(ctx, k, KVD, n), g.kv_idx);
    r.v_written = ggml_set_rows(ctx, c.v[size_t(il)], ggml_reshape_2d(ctx, v, KVD, n), g.kv_idx);
    ggml_build_forward_expand(gf, r.k_written);
    ggml_build_forward_expand(gf, r.v_written);
    return r;
}

// The keys of this graph as [D, Hkv, n_kv]: a view of the first cells, or the gathered rows.
static ggml_tensor * attended(ggml_context * ctx, const Model & m, const ScorerGraph & g, ggml_tensor * cache) {
    const int64_t D = m.hp.head_dim, Hkv = m.hp.n_head_kv, n_kv = g.shape.n_kv;
    if (g.shape.sparse) {
        // get_rows yields F32; flash attention wants F16 K/V on every backend, so cast back.
        ggml_tensor * rows = ggml_cast(ctx, ggml_get_rows(ctx, cache, g.sel), GGML_TYPE_F16);
        return ggml_reshape_3d(ctx, rows, D, Hkv, n_kv);
    }
    return ggml_view_3d(ctx, cache, D, Hkv, n_kv, ggml_row_size(cache->type, D), ggml_row_size(cache->type, D * Hkv), 0);
}

static ggml_tensor * attention(ggml_context * ctx, const Model & m, const ScorerGraph & g, const LayerQKV & r) {
    const int64_t D = m.hp.head_dim;
    ggml_tensor * k = attended(ctx, m, g, r.k_written);
    ggml_tensor * v = attended(ctx, m, g, r.v_written);
    ggml_tensor * o = ggml_flash_attn_ext(ctx, ggml_permute(ctx, r.q, 0, 2, 1, 3), ggml_permute(ctx, k, 0, 2, 1, 3),
                                          ggml_permute(ctx, v, 0, 2, 1, 3), g.mask, 1.0f / std::sqrt(float(D)), 0.0f, 0.0f);
    ggml_prec_set_acc(o, GGML_PREC_F32);
    return ggml_reshape_2d(ctx, o, o->ne[0] * o->ne[1], o->ne[2] * o->ne[3]);
}

static ggml_tensor * finish_layer(ggml_context * ctx, const LayerWeights & L, const HParams & hp, ggml_tensor * x,
                                  ggml_tensor * a) {
    x = ggml_add(ctx, linear(ctx, L.wo, a, L.bo), x);
    return ggml_add(ctx, swiglu_ffn(ctx, L, rms_norm_w(ctx, x, L.ffn_norm, hp.rms_eps)), x);
}

std::unique_ptr<ScorerGraph> build_scorer_body(const Model & m, const ScorerCache & c, ScorerShape shape) {
    const HParams & hp = m.hp;
    auto g = new_scorer_graph(m, shape);
    ggml_context * ctx = g->ctx;
    ggml_tensor * x = ggml_get_rows(ctx, m.tok_embd, g->tokens);
    for (int il = 0; il < c.n_layers; ++il) {
        const LayerWeights & L = m.layers[size_t(il)];
        const bool last = il == c.n_layers - 1;
        ggml_tensor * h = rms_norm_w(ctx, x, L.attn_norm, hp.rms_eps);
        LayerQKV r = layer_qkv(ctx, g->gf, m, c, *g, il, h, /*need_q=*/!last);
        if (last) break;   // only the last layer's K/V are needed from here on
        x = finish_layer(ctx, L, hp, x, attention(ctx, m, *g, r));
    }
    return g;
}

// max(a, b) elementwise with stock ops (ggml has no binary max): a + relu(b - a).
static ggml_tensor * maximum(ggml_context * ctx, ggml_tensor * a, ggml_tensor * b) {
    return ggml_add(ctx, a, ggml_relu(ctx, ggml_sub(ctx, b, a)));
}

// p [S, n_tail, H] → [S, n_tail, 1]: halving over the heads (ceil(log2 H) steps); for an odd count
// the two halves share the middle head, which max does not mind.
static ggml_tensor * max_over_heads(ggml_context * ctx, ggml_tensor * p) {
    while (p->ne[2] > 1) {
        const int64_t n = p->ne[2], h = (n + 1) / 2;
        ggml_tensor * a = ggml_view_3d(ctx, p, p->ne[0], p->ne[1], h, p->nb[1], p->nb[2], 0);
        ggml_tensor * b = ggml_view_3d(ctx, p, p->ne[0], p->ne[1], h, p->nb[1], p->nb[2], size_t(n - h) * p->nb[2]);
        p = maximum(ctx, a, b);
    }
    return p;
}

// Pre-RoPE keys. The cache holds K after RoPE (the forward needs it so), and the options were:
// keep a second, pre-RoPE copy of K (+50% of the scorer's cache, for all S tokens), re-apply RoPE
// to the cache in every micro-batch (O(S) extra work per batch, O(S²) in all), or un-rotate the
// cached K once per layer here. The last is O(S) once and costs no memory beyond this graph's
// scratch. ggml_rope_ext_back is that inverse: the same rotation with the sine negated (Rᵀ = R⁻¹),
// on the same positions, a stock op on CPU and CUDA. The cache's f16 rounding happened after the
// rotation; un-rotating is orthogonal, so the error stays at f16 level.
static ggml_tensor * unrope(ggml_context * ctx, const Model & m, ggml_tensor * k, ggml_tensor * pos) {
    const HParams & hp = m.hp;
    return ggml_rope_ext_back(ctx, k, pos, m.rope_freqs, hp.n_rot, hp.rope_type, hp.n_ctx_train, hp.rope_freq_base,
                              hp.rope_freq_scale, /*ext_factor=*/0.0f, /*attn_factor=*/1.0f, /*beta_fast=*/32.0f,
                              /*beta_slow=*/1.0f);
}

std::unique_ptr<ScorerGraph> build_scorer_tail(const Model & m, const ScorerCache & c, int n_question, int n_tail,
                                               int n_keys, int n_kv_pad, bool pre_rope) {
    const HParams & hp = m.hp;
    auto g = new_scorer_graph(m, {n_question, n_kv_pad, false});
    ggml_context * ctx = g->ctx;
    const int64_t D = hp.head_dim, Hkv = hp.n_head_kv, S = n_keys;
    g->n_keys = n_keys;
    g->score_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, S, n_tail);
    ggml_set_input(g->score_mask);
    if (pre_rope) {
        g->key_pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, S);
        ggml_set_input(g->key_pos);
    }

    ggml_tensor * x = ggml_get_rows(ctx, m.tok_embd, g->tokens);
    ggml_tensor * best = nullptr;   // [S, n_tail, 1]
    for (int il = 0; il < c.n_layers; ++il) {
        const LayerWeights & L = m.layers[size_t(il)];
        ggml_tensor * h = rms_norm_w(ctx, x, L.attn_norm, hp.rms_eps);
        LayerQKV r = layer_qkv(ctx, g->gf, m, c, *g, il, h, true);

        ggml_tensor * keys = ggml_view_3d(ctx, r.k_written, D, Hkv, S, ggml_row_size(r.k_written->type, D),
                                          ggml_row_size(r.k_written->type, D * Hkv), 0);
        ggml_tensor * q = pre_rope ? r.q_pre : r.q;
        if (pre_rope) keys = unrope(ctx, m, keys, g->key_pos);
        if (n_tail < n_question) {   // the queries are the question's last n_tail tokens
            q = ggml_view_3d(ctx, q, q->ne[0], q->ne[1], n_tail, q->nb[1], q->nb[2], size_t(n_question - n_tail) * q->nb[2]);
        }
        // [S, n_tail, Hq] = K [D, S, Hkv] · Q [D, n_tail, Hq], broadcast over the query heads
        ggml_tensor * kq = ggml_mul_mat(ctx, ggml_permute(ctx, keys, 0, 2, 1, 3), ggml_permute(ctx, q, 0, 2, 1, 3));
        ggml_mul_mat_set_prec(kq, GGML_PREC_F32);
        ggml_tensor * p = ggml_soft_max_ext(ctx, kq, g->score_mask, 1.0f / std::sqrt(float(D)), 0.0f);
        ggml_tensor * layer_max = max_over_heads(ctx, p);
        best = best ? maximum(ctx, best, layer_max) : layer_max;

        if (il == c.n_layers - 1) break;   // the scores are all the last layer contributes
        x = finish_layer(ctx, L, hp, x, attention(ctx, m, *g, r));
    }
    g->tail_max = ggml_cont(ctx, ggml_reshape_2d(ctx, best, S, n_tail));
    ggml_set_output(g->tail_max);
    ggml_build_forward_expand(g->gf, g->tail_max);
    return g;
}


// Dense: every key before the query (cells [0, q1), padded). Sparse (inputs longer than the
// threshold, once the window has moved past the sink): cells [0, sink) + [q0 - window, q1).
ScorerKeys scorer_keys(const luce_scorer_params & p, int n_total, int q0, int q1) {
    ScorerKeys k;
    const bool long_input = p.sparse_threshold > 0 && n_total > p.sparse_threshold;
    const int lo = q0 - p.sparse_window;
    if (!long_input || lo <= p.sparse_sink) {
        k.n_real = q1;
        k.n_kv = round_up(q1, kCtxPad);
        return k;
    }
    k.sparse = true;
    k.n_real = p.sparse_sink + (q1 - lo);
    k.n_kv = round_up(k.n_real, kCtxPad);
    k.rows.reserve(size_t(k.n_kv));
    for (int i = 0; i < p.sparse_sink; ++i) k.rows.push_back(i);
    for (int i = lo; i < q1; ++i) k.rows.push_back(i);
    k.rows.resize(size_t(k.n_kv), 0);   // padding: masked out
    return k;
}

} // namespace luce
