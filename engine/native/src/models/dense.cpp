// dense.cpp — the dense decoder-only archs, llama and qwen3: hyperparameters, weights, forward graph.
// Both are pre-norm transformers with GQA attention and a SwiGLU FFN; qwen3 adds per-head q/k RMS
// norms and uses NEOX rope, llama uses NORMAL (adjacent-pair) rope. Spec: docs/gguf-formats.md §1.3–1.4.
#include "arch.h"
#include "graph.h"
#include "error.h"

namespace luce {

static void llama_load_hparams(const GgufFile & f, HParams & hp) {
    load_transformer_hparams(f, hp);
    hp.rope_type = GGML_ROPE_TYPE_NORMAL;
    hp.qk_norm = false;
}

static void qwen3_load_hparams(const GgufFile & f, HParams & hp) {
    load_transformer_hparams(f, hp);
    hp.rope_type = GGML_ROPE_TYPE_NEOX;
    hp.qk_norm = true;
}

static void dense_declare_tensors(TensorLoader & tl, Model & m) {
    HParams & hp = m.hp;
    const int64_t E = hp.n_embd, D = hp.head_dim, Q = int64_t(hp.n_head) * D, F = hp.n_ff;

    declare_embeddings(tl, m);
    if (hp.arch == "llama") m.rope_freqs = tl.optional("rope_freqs.weight", {D / 2});

    m.layers.resize(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        auto & L = m.layers[size_t(il)];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = tl.require(p + "attn_norm.weight", {E});
        declare_attention(tl, L, p, hp, /*q_rows=*/Q, /*with_biases=*/true);
        declare_swiglu_ffn(tl, L, p, "ffn_norm.weight", E, F);
        L.ffn_gate_b = tl.optional(p + "ffn_gate.bias", {F});
        L.ffn_up_b = tl.optional(p + "ffn_up.bias", {F});
        L.ffn_down_b = tl.optional(p + "ffn_down.bias", {E});
    }
}

static std::unique_ptr<ForwardGraph> build_dense_graph(const Model & m, const ContextState & kv, GraphShape shape) {
    const HParams & hp = m.hp;
    auto g = new_forward_graph(m, shape, 1);
    ggml_context * ctx = g->ctx;
    ggml_cgraph * gf = g->gf;
    const int64_t n = shape.n_tokens, D = hp.head_dim;

    ggml_tensor * x = ggml_get_rows(ctx, m.tok_embd, g->tokens);
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights & L = m.layers[size_t(il)];
        capture_hidden(ctx, *g, kv, il, false, x);
        ggml_tensor * h = rms_norm_w(ctx, x, L.attn_norm, hp.rms_eps);
        ggml_tensor * q = ggml_reshape_3d(ctx, linear(ctx, L.wq, h, L.bq), D, hp.n_head, n);
        ggml_tensor * k = ggml_reshape_3d(ctx, linear(ctx, L.wk, h, L.bk), D, hp.n_head_kv, n);
        ggml_tensor * v = ggml_reshape_3d(ctx, linear(ctx, L.wv, h, L.bv), D, hp.n_head_kv, n);
        if (hp.qk_norm) q = rms_norm_w(ctx, q, L.q_norm, hp.rms_eps);
        q = rope(ctx, m, q, g->pos);
        if (hp.qk_norm) k = rms_norm_w(ctx, k, L.k_norm, hp.rms_eps);
        k = rope(ctx, m, k, g->pos);

        ggml_tensor * a = cached_attention(ctx, gf, m, kv, *g, il, q, k, v);
        x = ggml_add(ctx, linear(ctx, L.wo, a, L.bo), x);
        x = ggml_add(ctx, swiglu_ffn(ctx, L, rms_norm_w(ctx, x, L.ffn_norm, hp.rms_eps)), x);
        capture_hidden(ctx, *g, kv, il, true, x);
    }
    finish_logits(ctx, *g, m, kv, x);
    return g;
}

const ArchOps k_arch_llama = {"llama", llama_load_hparams, dense_declare_tensors, build_dense_graph, /*hybrid=*/false,
                               /*scorer=*/true, /*extra_tensor=*/nullptr};
const ArchOps k_arch_qwen3 = {"qwen3", qwen3_load_hparams, dense_declare_tensors, build_dense_graph, /*hybrid=*/false,
                              /*scorer=*/true, /*extra_tensor=*/nullptr};

} // namespace luce
