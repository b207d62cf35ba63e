// qwen35.cpp — the Qwen3.5/3.6 hybrid (docs/gguf-formats.md §1.2, §2.1): hyperparameters, weights,
// forward graph and the rollback replay. Gated DeltaNet layers (O(1) recurrent state, updated in
// place by the graph) and gated full-attention layers with partial IMROPE (every
// full_attention_interval-th layer, or as `attention.recurrent_layers` says). MTP layers appended
// after the trunk are not loaded.
#include "arch.h"
#include "graph.h"
#include "error.h"
#include "weight_fusion.h"
#include "tree_recurrence_op.h"
#include "device.h"

#include <cmath>

namespace luce {

static void qwen35_load_hparams(const GgufFile & f, HParams & hp) {
    load_transformer_hparams(f, hp, /*partial_rope=*/true);
    const int n_all = hp.n_layer;
    const int n_mtp = int(f.u32_opt("qwen35.nextn_predict_layers", 0));
    if (n_mtp < 0 || n_mtp >= n_all) f.fail(LUCE_ERR_MODEL, "qwen35.nextn_predict_layers is out of range");
    hp.n_layer = n_all - n_mtp;   // trunk only
    hp.rope_type = GGML_ROPE_TYPE_IMROPE;
    hp.qk_norm = true;
    hp.ssm_conv = int(f.u32("qwen35.ssm.conv_kernel"));
    hp.ssm_state = int(f.u32("qwen35.ssm.state_size"));
    hp.ssm_heads = int(f.u32("qwen35.ssm.time_step_rank"));
    hp.ssm_groups = int(f.u32("qwen35.ssm.group_count"));
    const int inner = int(f.u32("qwen35.ssm.inner_size"));
    if (hp.ssm_groups <= 0 || hp.ssm_heads % hp.ssm_groups != 0) {
        f.fail(LUCE_ERR_MODEL, "qwen35.ssm.time_step_rank must be a multiple of qwen35.ssm.group_count");
    }
    if (inner != hp.ssm_heads * hp.ssm_state) f.fail(LUCE_ERR_MODEL, "qwen35.ssm.inner_size != time_step_rank * state_size");
    if (hp.ssm_conv < 2) f.fail(LUCE_ERR_MODEL, "qwen35.ssm.conv_kernel must be at least 2");

    auto sections = f.int_array("qwen35.rope.dimension_sections");
    for (size_t i = 0; i < 4 && i < sections.size(); ++i) hp.rope_sections[i] = int(sections[i]);

    hp.recurrent.assign(size_t(hp.n_layer), false);
    if (f.has("qwen35.attention.recurrent_layers")) {
        auto rec = f.bool_array("qwen35.attention.recurrent_layers");
        if (int(rec.size()) < hp.n_layer) f.fail(LUCE_ERR_MODEL, "qwen35.attention.recurrent_layers is shorter than the trunk");
        for (int i = 0; i < hp.n_layer; ++i) hp.recurrent[size_t(i)] = rec[size_t(i)];
    } else {
        const int interval = int(f.u32_opt("qwen35.full_attention_interval", 4));
        if (interval <= 0) f.fail(LUCE_ERR_MODEL, "qwen35.full_attention_interval must be positive");
        for (int i = 0; i < hp.n_layer; ++i) hp.recurrent[size_t(i)] = (i + 1) % interval != 0;
    }
    bool any_attention = false;
    for (int i = 0; i < hp.n_layer; ++i) any_attention |= !hp.recurrent[size_t(i)];
    if (!any_attention) f.fail(LUCE_ERR_UNSUPPORTED, "qwen35 model without a full-attention layer");
}

static void qwen35_declare_tensors(TensorLoader & tl, Model & m) {
    HParams & hp = m.hp;
    const int64_t E = hp.n_embd, D = hp.head_dim, F = hp.n_ff;
    const int64_t Q = int64_t(hp.n_head) * D;
    const int64_t S = hp.ssm_state, Hv = hp.ssm_heads, Di = Hv * S, C = hp.conv_channels();

    declare_embeddings(tl, m);

    m.layers.resize(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        auto & L = m.layers[size_t(il)];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = tl.require(p + "attn_norm.weight", {E});
        declare_swiglu_ffn(tl, L, p, "post_attention_norm.weight", E, F);
        if (hp.is_recurrent(il)) {
            L.ssm_qkv = tl.require(p + "attn_qkv.weight", {E, C});
            L.ssm_gate = tl.require(p + "attn_gate.weight", {E, Di});
            L.ssm_beta = tl.require(p + "ssm_beta.weight", {E, Hv});
            L.ssm_alpha = tl.require(p + "ssm_alpha.weight", {E, Hv});
            L.ssm_dt_b = tl.require(p + "ssm_dt.bias", {Hv});
            L.ssm_a = tl.require(p + "ssm_a", {Hv});
            L.ssm_conv1d = tl.require(p + "ssm_conv1d.weight", {hp.ssm_conv, C});
            L.ssm_norm = tl.require(p + "ssm_norm.weight", {S});
            L.ssm_out = tl.require(p + "ssm_out.weight", {Di, E});
        } else {
            declare_attention(tl, L, p, hp, /*q_rows=*/2 * Q, /*with_biases=*/false);   // q and its output gate
        }
    }
}

// ---- forward graph (B = 1) ----------------------------------------------------------------------

struct DeltaInputs {
    ggml_tensor *q, *k, *v;   // [S, Hk, n], [S, Hk, n], [S, Hv, n]
};

// The recurrence's q, k (L2-normed) and v of n tokens in each of n_seqs sequences, from the conv's
// output c [C, n, n_seqs] (contiguous).
static DeltaInputs split_qkv(ggml_context * ctx, const HParams & hp, ggml_tensor * c, int64_t n, int64_t n_seqs) {
    const int64_t S = hp.ssm_state, Hk = hp.ssm_groups, Hv = hp.ssm_heads, C = hp.conv_channels();
    const size_t f = ggml_element_size(c);
    ggml_tensor * v = ggml_view_4d(ctx, c, S, Hv, n, n_seqs, S * f, C * f, C * n * f, size_t(2 * Hk * S) * f);
    // L2 norm per head: x / sqrt(Σx² + eps), as rms_norm with eps/S scaled back by 1/sqrt(S).
    // q and k heads are adjacent in each row of c, so one norm and one scale serve both.
    const float inv_sqrt_s = 1.0f / std::sqrt(float(S));
    ggml_tensor * qk = ggml_view_4d(ctx, c, S, 2 * Hk, n, n_seqs, S * f, C * f, C * n * f, 0);
    qk = ggml_scale(ctx, ggml_rms_norm(ctx, qk, hp.rms_eps / float(S)), inv_sqrt_s);   // [S, 2·Hk, n]
    ggml_tensor * q = ggml_view_4d(ctx, qk, S, Hk, n, n_seqs, qk->nb[1], qk->nb[2], qk->nb[3], 0);
    ggml_tensor * k = ggml_view_4d(ctx, qk, S, Hk, n, n_seqs, qk->nb[1], qk->nb[2], qk->nb[3], size_t(Hk) * qk->nb[1]);
    return {q, k, v};
}

// The causal depthwise conv and silu over windows xin [Kc-1+n, C, n_seqs] (contiguous): [C, n, n_seqs].
static ggml_tensor * conv_silu(ggml_context * ctx, const HParams & hp, const LayerWeights & L, ggml_tensor * xin, int64_t n,
                               int64_t n_seqs) {
    return ggml_silu(ctx, ggml_ssm_conv(ctx, ggml_reshape_3d(ctx, xin, hp.ssm_conv - 1 + n, hp.conv_channels(), n_seqs), L.ssm_conv1d));
}

// q, k and v of n tokens in each of n_seqs sequences from their causal conv windows: the same nodes
// for a forward pass, a tree's paths or nodes and a rollback's replay, so all round alike.
static DeltaInputs conv_qkv(ggml_context * ctx, const HParams & hp, const LayerWeights & L, ggml_tensor * xin, int64_t n,
                            int64_t n_seqs = 1) {
    return split_qkv(ctx, hp, conv_silu(ctx, hp, L, xin, n, n_seqs), n, n_seqs);
}

// The recurrence over n tokens from the layer's state; the state after the last token is written
// back into it (K = 1), as one node ggml-cuda fuses into the kernel. Returns the outputs [S, Hv, n].
static ggml_tensor * recur_in_place(ggml_context * ctx, ggml_cgraph * gf, ggml_tensor * ssm_state, const DeltaInputs & in,
                                    ggml_tensor * g, ggml_tensor * beta) {
    const int64_t S = in.v->ne[0], Hv = in.v->ne[1], n = in.v->ne[2], D = S * S * Hv;
    ggml_tensor * r = ggml_gated_delta_net(ctx, in.q, in.k, in.v, g, beta, ssm_state, 1);   // [S·Hv, n + S]
    const size_t f = ggml_element_size(r);
    ggml_tensor * state = ggml_view_4d(ctx, r, S, S, Hv, 1, S * f, S * S * f, S * S * Hv * f, size_t(S * Hv * n) * f);
    ggml_build_forward_expand(gf, ggml_cpy(ctx, state, ggml_view_3d(ctx, ssm_state, D, 1, 1, D * f, D * f, 0)));
    return ggml_view_4d(ctx, r, S, Hv, n, 1, S * f, S * Hv * f, S * Hv * n * f, 0);
}

// A hybrid tree verify's recurrence (tree_paths.h): every root-to-leaf path runs as its own sequence
// from the layer's committed conv window and state, on its nodes' projections gathered by
// g.path_rows; each node's output is read back from one sequence through it (g.node_slot). The
// state stays (commit_path replays the kept path, as commit does a chain). Returns [S, Hv, n].
static ggml_tensor * tree_recurrence(ggml_context * ctx, const HParams & hp, const LayerWeights & L, const ForwardGraph & g,
                                     ggml_tensor * conv_state, ggml_tensor * ssm_state, ggml_tensor * qkv,
                                     ggml_tensor * gate_log, ggml_tensor * beta) {
    const int64_t S = hp.ssm_state, Hv = hp.ssm_heads, C = hp.conv_channels(), W = hp.ssm_conv - 1;
    const int64_t P = g.shape.tree_paths, Dm = g.shape.tree_depth, n = g.shape.n_tokens;
    // conv windows [W + Dm, C, P]: the committed W inputs, then the path's own
    ggml_tensor * path_in = ggml_reshape_3d(ctx, ggml_get_rows(ctx, qkv, g.path_rows), C, Dm, P);
    path_in = ggml_cont(ctx, ggml_permute(ctx, path_in, 1, 0, 2, 3));                                 // [Dm, C, P]
    ggml_tensor * windows = ggml_concat(ctx, ggml_repeat_4d(ctx, conv_state, W, C, P, 1), path_in, 0);
    const DeltaInputs in = conv_qkv(ctx, hp, L, windows, Dm, P);
    auto gather = [&](ggml_tensor * t) {   // [1, Hv, n, 1] per node -> [1, Hv, Dm, P] per path step
        return ggml_reshape_4d(ctx, ggml_get_rows(ctx, ggml_reshape_2d(ctx, t, Hv, n), g.path_rows), 1, Hv, Dm, P);
    };
    ggml_tensor * state = ggml_repeat_4d(ctx, ssm_state, S, S, Hv, P);
    ggml_tensor * r = ggml_gated_delta_net(ctx, in.q, in.k, in.v, gather(gate_log), gather(beta), state, 1);
    const size_t f = ggml_element_size(r);
    ggml_tensor * outs = ggml_view_2d(ctx, r, S * Hv, Dm * P, S * Hv * f, 0);   // [S·Hv, Dm·P], before the states
    return ggml_reshape_4d(ctx, ggml_get_rows(ctx, outs, g.node_slot), S, Hv, n, 1);
}

// A hybrid tree verify's recurrence by nodes (tree_nodes.h): each node's conv window gathered from
// [committed inputs | the nodes' inputs] xin [W + n, C] by g.tree_windows, then the recurrence in
// the visits' order (tree_recurrence_op.h). The state stays, as on the paths. Returns [S, Hv, n].
static ggml_tensor * tree_node_recurrence(ggml_context * ctx, const Model & m, const LayerWeights & L, const ForwardGraph & g,
                                          ggml_tensor * xin, ggml_tensor * ssm_state, ggml_tensor * gate_log, ggml_tensor * beta) {
    const HParams & hp = m.hp;
    const int64_t S = hp.ssm_state, Hv = hp.ssm_heads, C = hp.conv_channels(), Kc = hp.ssm_conv, n = g.shape.n_tokens;
    ggml_tensor * by_time = ggml_cont(ctx, ggml_transpose(ctx, xin));                                   // [C, W + n]
    ggml_tensor * rows = ggml_reshape_3d(ctx, ggml_get_rows(ctx, by_time, g.tree_windows), C, Kc, n);   // [C, Kc, n]
    ggml_tensor * windows = ggml_cont(ctx, ggml_permute(ctx, rows, 1, 0, 2, 3));                        // [Kc, C, n]
    // each node a sequence of one token for the conv; then the n outputs as one sequence
    ggml_tensor * c = ggml_reshape_3d(ctx, conv_silu(ctx, hp, L, windows, 1, n), C, n, 1);
    const DeltaInputs in = split_qkv(ctx, hp, c, n, 1);
    ggml_tensor * o = tree_recurrence_node(ctx, in.q, in.k, in.v, gate_log, beta, ssm_state, g.tree_visits, device_is_cpu(m.dev));
    return ggml_reshape_4d(ctx, o, S, Hv, n, 1);
}

// DeltaNet mixer (§2.1.2): returns [E, n] and writes the layer's new conv and recurrent state.
static ggml_tensor * delta_net(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const ContextState & kv,
                               const ForwardGraph & graph, int il, ggml_tensor * h, int64_t n, bool verify) {
    const HParams & hp = m.hp;
    const LayerWeights & L = m.layers[size_t(il)];
    const int64_t S = hp.ssm_state, Hk = hp.ssm_groups, Hv = hp.ssm_heads, C = hp.conv_channels(), Kc = hp.ssm_conv;
    ggml_tensor * conv_state = kv.rec.conv[size_t(il)];   // [Kc-1, C]
    ggml_tensor * ssm_state = kv.rec.ssm[size_t(il)];     // [S, S, Hv, 1]

    // input projections; fused ones are row views of one matmul (weight_fusion.h), not contiguous
    ggml_tensor * fused = L.ssm_in.w ? ggml_mul_mat(ctx, L.ssm_in.w, h) : nullptr;
    auto project = [&](size_t part, ggml_tensor * w) {
        return L.ssm_in.at(part) >= 0 ? fused_rows(ctx, fused, L.ssm_in.at(part), w->ne[1]) : ggml_mul_mat(ctx, w, h);
    };
    ggml_tensor * qkv = project(0, L.ssm_qkv);                                // [C, n]
    ggml_tensor * z = project(1, L.ssm_gate);                                 // [Hv·S, n]
    ggml_tensor * b = project(2, L.ssm_beta);
    if (!ggml_is_contiguous(b)) b = ggml_cont(ctx, b);   // unary ops on CUDA want contiguous input
    ggml_tensor * beta = ggml_sigmoid(ctx, ggml_reshape_4d(ctx, b, 1, Hv, n, 1));
    ggml_tensor * alpha = ggml_add(ctx, project(3, L.ssm_alpha), L.ssm_dt_b);
    ggml_tensor * g = ggml_reshape_4d(ctx, ggml_mul(ctx, ggml_softplus(ctx, alpha), L.ssm_a), 1, Hv, n, 1);   // log decay

    // causal depthwise conv over [previous Kc-1 inputs | this batch], then keep the last Kc-1
    ggml_tensor * xin = ggml_concat(ctx, conv_state, ggml_transpose(ctx, qkv), 0);   // [Kc-1+n, C]
    if (verify) {
        // keep the whole window: commit(k) takes the Kc-1 inputs that end at token k
        ggml_tensor * hist = kv.rec.conv_hist[size_t(il)];
        ggml_build_forward_expand(gf, ggml_cpy(ctx, xin, ggml_view_2d(ctx, hist, Kc - 1 + n, C, hist->nb[1], 0)));
    } else {
        ggml_tensor * last = ggml_view_2d(ctx, xin, Kc - 1, C, xin->nb[1], size_t(n) * ggml_element_size(xin));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, last, conv_state));
    }
    const DeltaInputs in = conv_qkv(ctx, hp, L, xin, n);

    ggml_tensor * o;
    if (!verify) {
        o = recur_in_place(ctx, gf, ssm_state, in, g, beta);
    } else if (kv.rec.replay) {
        // the state stays; commit(k) (or commit_path) replays the recurrence from the kept window,
        // decay and beta
        const size_t f = ggml_element_size(g);
        ggml_build_forward_expand(gf, ggml_cpy(ctx, g, ggml_view_2d(ctx, kv.rec.replay_g[size_t(il)], Hv, n, Hv * f, 0)));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, beta, ggml_view_2d(ctx, kv.rec.replay_beta[size_t(il)], Hv, n, Hv * f, 0)));
        if (graph.shape.tree_nodes) {   // a tree verify (only with replay: Engine::verify_tree)
            o = tree_node_recurrence(ctx, m, L, graph, xin, ssm_state, g, beta);
        } else if (graph.shape.tree_paths > 0) {
            o = tree_recurrence(ctx, hp, L, graph, conv_state, ssm_state, qkv, g, beta);
        } else {
            ggml_tensor * r = ggml_gated_delta_net(ctx, in.q, in.k, in.v, g, beta, ssm_state, 1);   // [S·Hv, n + S]
            o = ggml_view_4d(ctx, r, S, Hv, n, 1, S * f, S * Hv * f, S * Hv * n * f, 0);
        }
    } else {
        // one state slot per token after the outputs: slot s = state after token n-1-s
        ggml_tensor * r = ggml_gated_delta_net(ctx, in.q, in.k, in.v, g, beta, ssm_state, n);   // [S·Hv, n + n·S]
        const size_t f = ggml_element_size(r);
        o = ggml_view_4d(ctx, r, S, Hv, n, 1, S * f, S * Hv * f, S * Hv * n * f, 0);
        ggml_tensor * states = ggml_view_4d(ctx, r, S, S, Hv, n, S * f, S * S * f, S * S * Hv * f, size_t(S * Hv * n) * f);
        // Destination as a [S·S·Hv, 1, n] view: the shape ggml-cuda recognises to have the kernel
        // write the states straight into the snapshots instead of copying them afterwards.
        const int64_t D = S * S * Hv;
        ggml_build_forward_expand(gf, ggml_cpy(ctx, states, ggml_view_3d(ctx, kv.rec.ssm_snap[size_t(il)], D, 1, n, D * f, D * f, 0)));
    }

    ggml_tensor * on = rms_norm_w(ctx, o, L.ssm_norm, hp.rms_eps);   // gated norm: norm(o) · silu(z)
    if (ggml_is_contiguous(z)) {
        on = ggml_reshape_2d(ctx, ggml_mul(ctx, on, ggml_silu(ctx, ggml_reshape_4d(ctx, z, S, Hv, n, 1))), Hv * S, n);
    } else {   // a row view of the fused projection: one GLU kernel reads it in place
        on = ggml_swiglu_split(ctx, z, ggml_reshape_2d(ctx, on, Hv * S, n));
    }
    return ggml_mul_mat(ctx, L.ssm_out, on);
}

// Gated full attention (§2.1.1): Q and a sigmoid output gate come from one projection.
static ggml_tensor * gated_attention(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const ContextState & kv,
                                     const ForwardGraph & g, int il, ggml_tensor * h, int64_t n) {
    const HParams & hp = m.hp;
    const LayerWeights & L = m.layers[size_t(il)];
    const int64_t D = hp.head_dim, Hq = hp.n_head;
    ggml_tensor * qg = ggml_mul_mat(ctx, L.wq, h);   // [2·Hq·D, n], per head [q | gate]
    const size_t f = ggml_element_size(qg);
    ggml_tensor * q = ggml_view_3d(ctx, qg, D, Hq, n, 2 * D * f, 2 * Hq * D * f, 0);
    ggml_tensor * gate = ggml_cont_2d(ctx, ggml_view_3d(ctx, qg, D, Hq, n, 2 * D * f, 2 * Hq * D * f, D * f), D * Hq, n);
    ggml_tensor * k = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wk, h), D, hp.n_head_kv, n);
    ggml_tensor * v = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wv, h), D, hp.n_head_kv, n);
    q = rms_norm_w(ctx, q, L.q_norm, hp.rms_eps);
    k = rms_norm_w(ctx, k, L.k_norm, hp.rms_eps);
    int sections[4] = {hp.rope_sections[0], hp.rope_sections[1], hp.rope_sections[2], hp.rope_sections[3]};
    q = ggml_rope_multi(ctx, q, g.pos, nullptr, hp.n_rot, sections, GGML_ROPE_TYPE_IMROPE, hp.n_ctx_train,
                        hp.rope_freq_base, hp.rope_freq_scale, 0.0f, 1.0f, 32.0f, 1.0f);
    k = ggml_rope_multi(ctx, k, g.pos, nullptr, hp.n_rot, sections, GGML_ROPE_TYPE_IMROPE, hp.n_ctx_train,
                        hp.rope_freq_base, hp.rope_freq_scale, 0.0f, 1.0f, 32.0f, 1.0f);
    ggml_tensor * o = cached_attention(ctx, gf, m, kv, g, il, q, k, v);
    return ggml_mul_mat(ctx, L.wo, ggml_mul(ctx, o, ggml_sigmoid(ctx, gate)));
}

static std::unique_ptr<ForwardGraph> build_qwen35_graph(const Model & m, const ContextState & kv, GraphShape shape) {
    const HParams & hp = m.hp;
    auto g = new_forward_graph(m, shape, 4);   // M-RoPE positions: (t, h, w, e) blocks
    ggml_context * ctx = g->ctx;
    const int64_t n = shape.n_tokens;
    if (shape.tree_paths > 0) {
        g->path_rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, int64_t(shape.tree_paths) * shape.tree_depth);
        g->node_slot = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
        for (ggml_tensor * t : {g->path_rows, g->node_slot}) ggml_set_input(t);
        ggml_set_name(g->path_rows, "inp_tree_path_rows");
        ggml_set_name(g->node_slot, "inp_tree_node_slot");
    }
    if (shape.tree_nodes) {
        g->tree_visits = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 3 * n);
        g->tree_windows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, int64_t(hp.ssm_conv) * n);
        for (ggml_tensor * t : {g->tree_visits, g->tree_windows}) ggml_set_input(t);
        ggml_set_name(g->tree_visits, "inp_tree_visits");
        ggml_set_name(g->tree_windows, "inp_tree_windows");
    }
    ggml_tensor * x = ggml_get_rows(ctx, m.tok_embd, g->tokens);
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights & L = m.layers[size_t(il)];
        capture_hidden(ctx, *g, kv, il, false, x);
        ggml_tensor * h = rms_norm_w(ctx, x, L.attn_norm, hp.rms_eps);
        h = hp.is_recurrent(il) ? delta_net(ctx, g->gf, m, kv, *g, il, h, n, shape.verify) : gated_attention(ctx, g->gf, m, kv, *g, il, h, n);
        x = ggml_add(ctx, h, x);
        x = ggml_add(ctx, swiglu_ffn(ctx, L, rms_norm_w(ctx, x, L.ffn_norm, hp.rms_eps)), x);
        capture_hidden(ctx, *g, kv, il, true, x);
    }
    finish_logits(ctx, *g, m, kv, x);
    return g;
}

ReplayGraph::ReplayGraph(const Model & m, const ContextState & kv, int k) {
    const size_t n_nodes = size_t(32 * m.hp.n_layer + 16);   // about 21 tensors a DeltaNet layer
    ggml_init_params ip = {ggml_tensor_overhead() * n_nodes + ggml_graph_overhead_custom(n_nodes, false), nullptr, true};
    ctx = ggml_init(ip);
    if (!ctx) throw Error(LUCE_ERR_MEMORY, "cannot create the rollback replay graph");
    gf = ggml_new_graph_custom(ctx, n_nodes, false);
    add_qwen35_replay(ctx, gf, m, kv, k);
}

ReplayGraph::~ReplayGraph() { ggml_free(ctx); }

void add_qwen35_replay(ggml_context * ctx, ggml_cgraph * gf, const Model & m, const ContextState & kv, int k) {
    const HParams & hp = m.hp;
    const int64_t C = hp.conv_channels(), W = hp.ssm_conv - 1, Hv = hp.ssm_heads;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!hp.is_recurrent(il)) continue;
        const LayerWeights & L = m.layers[size_t(il)];
        ggml_tensor * hist = kv.rec.conv_hist[size_t(il)];
        const size_t f = ggml_element_size(hist);
        // the window of the first k tokens, contiguous as the forward pass had it
        ggml_tensor * xin = ggml_cont(ctx, ggml_view_2d(ctx, hist, W + k, C, hist->nb[1], 0));
        const DeltaInputs in = conv_qkv(ctx, hp, L, xin, k);
        ggml_tensor * g = ggml_reshape_4d(ctx, ggml_view_2d(ctx, kv.rec.replay_g[size_t(il)], Hv, k, Hv * f, 0), 1, Hv, k, 1);
        ggml_tensor * beta = ggml_reshape_4d(ctx, ggml_view_2d(ctx, kv.rec.replay_beta[size_t(il)], Hv, k, Hv * f, 0), 1, Hv, k, 1);
        recur_in_place(ctx, gf, kv.rec.ssm[size_t(il)], in, g, beta);
        ggml_build_forward_expand(gf, ggml_cpy(ctx, ggml_view_2d(ctx, hist, W, C, hist->nb[1], size_t(k) * f), kv.rec.conv[size_t(il)]));
    }
}

// MTP / nextn blocks after the trunk: in the file, not run.
static bool mtp_layer_tensor(const std::string & name, int n_layer) {
    if (name.rfind("blk.", 0) != 0) return false;
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos || dot == 4) return false;
    for (size_t i = 4; i < dot; ++i) if (name[i] < '0' || name[i] > '9') return false;
    return std::stoi(name.substr(4, dot - 4)) >= n_layer;
}

const ArchOps k_arch_qwen35 = {"qwen35", qwen35_load_hparams, qwen35_declare_tensors, build_qwen35_graph, /*hybrid=*/true,
                               /*scorer=*/false, /*extra_tensor=*/mtp_layer_tensor};

} // namespace luce
