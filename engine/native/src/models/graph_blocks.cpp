// graph_blocks.cpp — the blocks every architecture's forward graph is made of (graph.h): norms,
// projections, RoPE, cached attention, the SwiGLU FFN, graph inputs, hidden-state capture, logits.
// Op order mirrors llama.cpp's (q, v, k expanded before the cache writes) so that backends fuse
// the same kernels and round the same way.
#include "device.h"
#include "graph.h"
#include "runtime.h"
#include "error.h"

#include <cmath>

namespace luce {

TokenBatchGraph::~TokenBatchGraph() {
    if (ctx) ggml_free(ctx);
}

void TokenBatchGraph::init(size_t max_nodes, int64_t n, int64_t n_pos_per_token, int64_t n_kv) {
    ggml_init_params ip = {ggml_tensor_overhead() * max_nodes + ggml_graph_overhead_custom(max_nodes, false), nullptr, true};
    ctx = ggml_init(ip);
    if (!ctx) throw Error(LUCE_ERR_MEMORY, "cannot create a graph context");
    gf = ggml_new_graph_custom(ctx, max_nodes, false);
    tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
    pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n * n_pos_per_token);
    kv_idx = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, n);
    mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n_kv, n);
    for (ggml_tensor * t : {tokens, pos, kv_idx, mask}) ggml_set_input(t);
    ggml_set_name(tokens, "inp_tokens");
    ggml_set_name(pos, "inp_pos");
    ggml_set_name(kv_idx, "inp_kv_idx");
    ggml_set_name(mask, "inp_kq_mask");
}

size_t graph_max_nodes(const Model & m) { return size_t(64) * m.hp.n_layer + 256; }

ggml_tensor * rms_norm_w(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, float eps) {
    return ggml_mul(ctx, ggml_rms_norm(ctx, x, eps), w);
}

ggml_tensor * linear(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, ggml_tensor * b) {
    ggml_tensor * y = ggml_mul_mat(ctx, w, x);
    return b ? ggml_add(ctx, y, b) : y;
}

// x (any shape with ne0 a multiple of the block) multiplied blockwise by the rotation matrix.
static ggml_tensor * rotate(ggml_context * ctx, ggml_tensor * x, ggml_tensor * rot) {
    const int64_t n = rot->ne[0];
    ggml_tensor * r = ggml_is_contiguous(x) ? ggml_reshape_2d(ctx, x, n, ggml_nelements(x) / n)
                                            : ggml_cont_2d(ctx, x, n, ggml_nelements(x) / n);
    r = ggml_mul_mat(ctx, rot, r);
    ggml_mul_mat_set_hint(r, GGML_HINT_SRC0_IS_HADAMARD);
    return ggml_reshape_4d(ctx, r, x->ne[0], x->ne[1], x->ne[2], x->ne[3]);
}

ggml_tensor * rope(ggml_context * ctx, const Model & m, ggml_tensor * x, ggml_tensor * pos) {
    const HParams & hp = m.hp;
    return ggml_rope_ext(ctx, x, pos, m.rope_freqs, hp.n_rot, hp.rope_type, hp.n_ctx_train, hp.rope_freq_base,
                         hp.rope_freq_scale, /*ext_factor=*/0.0f, /*attn_factor=*/1.0f, /*beta_fast=*/32.0f,
                         /*beta_slow=*/1.0f);
}

// Self-attention of the new tokens over the cache, writing their K/V first. Returns [D·Hq, n].
ggml_tensor * cached_attention(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const ContextState & kv,
                               const ForwardGraph & g, int il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v) {
    const HParams & hp = m.hp;
    const int64_t D = hp.head_dim, Hkv = hp.n_head_kv, n = g.shape.n_tokens, n_kv = g.shape.n_kv;
    if (kv.attn.rot_k) { q = rotate(ctx, q, kv.attn.rot_k); k = rotate(ctx, k, kv.attn.rot_k); }
    if (kv.attn.rot_v) v = rotate(ctx, v, kv.attn.rot_v);
    ggml_build_forward_expand(gf, q);
    ggml_build_forward_expand(gf, v);
    ggml_build_forward_expand(gf, k);

    ggml_tensor * kc = kv.attn.k[size_t(il)], * vc = kv.attn.v[size_t(il)];
    ggml_build_forward_expand(gf, ggml_set_rows(ctx, kc, ggml_reshape_2d(ctx, k, D * Hkv, n), g.kv_idx));
    ggml_build_forward_expand(gf, ggml_set_rows(ctx, vc, ggml_reshape_2d(ctx, v, D * Hkv, n), g.kv_idx));

    ggml_tensor * kview = ggml_view_3d(ctx, kc, D, Hkv, n_kv, ggml_row_size(kc->type, D), ggml_row_size(kc->type, D * Hkv), 0);
    ggml_tensor * vview = ggml_view_3d(ctx, vc, D, Hkv, n_kv, ggml_row_size(vc->type, D), ggml_row_size(vc->type, D * Hkv), 0);
    ggml_tensor * o = ggml_flash_attn_ext(ctx, ggml_permute(ctx, q, 0, 2, 1, 3), ggml_permute(ctx, kview, 0, 2, 1, 3),
                                          ggml_permute(ctx, vview, 0, 2, 1, 3), g.mask, 1.0f / std::sqrt(float(D)), 0.0f, 0.0f);
    ggml_prec_set_acc(o, GGML_PREC_F32);
    o = ggml_reshape_2d(ctx, o, o->ne[0] * o->ne[1], o->ne[2] * o->ne[3]);
    if (kv.attn.rot_v) o = rotate(ctx, o, kv.attn.rot_v);
    return o;
}

ggml_tensor * swiglu_ffn(ggml_context * ctx, const LayerWeights & L, ggml_tensor * x) {
    if (L.ffn_gate_up.w) {   // [gate | up] rows in one weight: silu(first half) · second half
        return linear(ctx, L.ffn_down, ggml_swiglu(ctx, ggml_mul_mat(ctx, L.ffn_gate_up.w, x)), L.ffn_down_b);
    }
    ggml_tensor * gate = linear(ctx, L.ffn_gate, x, L.ffn_gate_b);
    ggml_tensor * up = linear(ctx, L.ffn_up, x, L.ffn_up_b);
    return linear(ctx, L.ffn_down, ggml_swiglu_split(ctx, gate, up), L.ffn_down_b);
}

std::unique_ptr<ForwardGraph> new_forward_graph(const Model & m, GraphShape shape, int n_pos_per_token) {
    auto g = std::make_unique<ForwardGraph>();
    g->shape = shape;
    g->init(graph_max_nodes(m), shape.n_tokens, n_pos_per_token, shape.n_kv);
    return g;
}

void capture_hidden(ggml_context * ctx, ForwardGraph & g, const ContextState & kv, int il, bool stage_output, ggml_tensor * x) {
    const auto & cap = kv.capture;
    if (cap.layers.empty() || cap.output_convention != stage_output) return;
    for (size_t i = 0; i < cap.layers.size(); ++i) {
        if (cap.layers[i] != il) continue;
        if (!g.cap_idx) {
            g.cap_idx = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, g.shape.n_tokens);
            ggml_set_input(g.cap_idx);
            ggml_set_name(g.cap_idx, "inp_capture_idx");
        }
        ggml_build_forward_expand(g.gf, ggml_set_rows(ctx, cap.rings[i], x, g.cap_idx));
    }
}

void finish_logits(ggml_context * ctx, ForwardGraph & g, const Model & m, const ContextState & kv, ggml_tensor * x) {
    const int64_t n = g.shape.n_tokens;
    if (!g.shape.logits_all && n > 1) x = ggml_view_2d(ctx, x, x->ne[0], 1, x->nb[1], size_t(n - 1) * x->nb[1]);
    x = rms_norm_w(ctx, x, m.output_norm, m.hp.rms_eps);
    g.logits = ggml_mul_mat(ctx, m.output, x);
    ggml_set_name(g.logits, "logits");
    ggml_set_output(g.logits);
    ggml_build_forward_expand(g.gf, g.logits);
    const bool on_cpu = device_is_cpu(m.dev);
    g.argmax = greedy_argmax(ctx, g.logits, kv.vocab_ramp, on_cpu);   // on the CPU: -1 for a row not finite
    ggml_set_output(g.argmax);
    ggml_build_forward_expand(g.gf, g.argmax);
    if (!on_cpu) {
        g.logit_sums = ggml_sum_rows(ctx, g.logits);
        ggml_set_output(g.logit_sums);
        ggml_build_forward_expand(g.gf, g.logit_sums);
    }
}

} // namespace luce
