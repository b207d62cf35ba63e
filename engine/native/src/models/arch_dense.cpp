// arch_dense.cpp — hyperparameters and weights of the dense decoder-only archs: llama and qwen3.
// Both are pre-norm transformers with GQA attention and a SwiGLU FFN; qwen3 adds per-head q/k RMS
// norms and uses NEOX rope, llama uses NORMAL (adjacent-pair) rope. Spec: docs/gguf-formats.md §1.3–1.4.
#include "model.h"
#include "error.h"

namespace luce {

TransformerShape read_transformer_shape(const GgufFile & f, const std::string & arch, int ctx_fallback) {
    const std::string a = arch + ".";
    TransformerShape s;
    s.n_ctx_train = int(ctx_fallback < 0 ? f.u32(a + "context_length") : f.u32_opt(a + "context_length", uint32_t(ctx_fallback)));
    s.n_embd      = int(f.u32(a + "embedding_length"));
    s.n_layer     = int(f.u32(a + "block_count"));
    s.n_ff        = int(f.u32(a + "feed_forward_length"));
    s.n_head      = int(f.u32(a + "attention.head_count"));
    s.n_head_kv   = int(f.u32_opt(a + "attention.head_count_kv", uint32_t(s.n_head)));
    if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0) {
        f.fail(LUCE_ERR_MODEL, "embedding_length, block_count, feed_forward_length and head counts must be positive");
    }
    if (s.n_head % s.n_head_kv != 0) {
        f.fail(LUCE_ERR_MODEL, a + "attention.head_count (" + std::to_string(s.n_head) +
                                   ") is not a multiple of attention.head_count_kv (" + std::to_string(s.n_head_kv) + ")");
    }
    s.head_dim = int(f.u32_opt(a + "attention.key_length", uint32_t(s.n_embd / s.n_head)));
    const int v_dim = int(f.u32_opt(a + "attention.value_length", uint32_t(s.head_dim)));
    if (v_dim != s.head_dim) f.fail(LUCE_ERR_UNSUPPORTED, a + "attention.value_length differs from key_length");
    return s;
}

static void load_common(const GgufFile & f, HParams & hp, bool partial_rope = false) {
    const std::string a = hp.arch + ".";
    assign_shape(hp, read_transformer_shape(f, hp.arch));
    hp.n_rot = int(f.u32_opt(a + "rope.dimension_count", uint32_t(hp.head_dim)));
    if (partial_rope ? (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2) : hp.n_rot != hp.head_dim) {
        f.fail(LUCE_ERR_UNSUPPORTED, "rope.dimension_count (" + std::to_string(hp.n_rot) + ") must equal the head size (" +
                                         std::to_string(hp.head_dim) + ") for " + hp.arch);
    }
    hp.rope_freq_base = f.f32_opt(a + "rope.freq_base", 10000.0f);
    std::string scaling = f.str_opt(a + "rope.scaling.type", "linear");
    float factor = f.has(a + "rope.scaling.factor") ? f.f32(a + "rope.scaling.factor") : f.f32_opt(a + "rope.scale_linear", 0.0f);
    if (scaling != "linear" && scaling != "none" && factor != 0.0f && factor != 1.0f) {
        f.fail(LUCE_ERR_UNSUPPORTED, "rope scaling '" + scaling + "' is not supported yet");
    }
    hp.rope_freq_scale = (factor == 0.0f || scaling == "none") ? 1.0f : 1.0f / factor;
    hp.rms_eps = f.f32(a + "attention.layer_norm_rms_epsilon");
}

void load_dense_common(const GgufFile & f, HParams & hp, bool partial_rope) { load_common(f, hp, partial_rope); }

void llama_load_hparams(const GgufFile & f, HParams & hp) {
    load_common(f, hp);
    hp.rope_type = GGML_ROPE_TYPE_NORMAL;
    hp.qk_norm = false;
}

void qwen3_load_hparams(const GgufFile & f, HParams & hp) {
    load_common(f, hp);
    hp.rope_type = GGML_ROPE_TYPE_NEOX;
    hp.qk_norm = true;
}

void declare_embeddings(TensorLoader & tl, Model & m) {
    HParams & hp = m.hp;
    const int64_t E = hp.n_embd;
    // The vocabulary size is whatever token_embd says.
    const GgufFile & f = *m.file;
    ggml_tensor * te = f.tensor_meta("token_embd.weight");
    if (!te) f.fail(LUCE_ERR_MODEL, "missing tensor token_embd.weight");
    hp.n_vocab = int(te->ne[1]);
    m.tok_embd = tl.require("token_embd.weight", {E, hp.n_vocab});
    m.output_norm = tl.require("output_norm.weight", {E});
    m.output = tl.optional("output.weight", {E, hp.n_vocab});
    if (!m.output) m.output = m.tok_embd;   // tied LM head
}

void dense_declare_tensors(TensorLoader & tl, Model & m) {
    HParams & hp = m.hp;
    const int64_t E = hp.n_embd, D = hp.head_dim, Q = int64_t(hp.n_head) * D, KV = int64_t(hp.n_head_kv) * D, F = hp.n_ff;

    declare_embeddings(tl, m);
    if (hp.arch == "llama") m.rope_freqs = tl.optional("rope_freqs.weight", {D / 2});

    m.layers.resize(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        auto & L = m.layers[size_t(il)];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = tl.require(p + "attn_norm.weight", {E});
        if (m.file->tensor_meta(p + "attn_qkv.weight")) {
            m.file->fail(LUCE_ERR_UNSUPPORTED, "tensor " + p + "attn_qkv.weight: fused Q/K/V (llama.cpp's convert_hf_to_gguf.py "
                                               "--fuse-qkv) is not supported; convert without --fuse-qkv");
        }
        L.wq = tl.require(p + "attn_q.weight", {E, Q});
        L.wk = tl.require(p + "attn_k.weight", {E, KV});
        L.wv = tl.require(p + "attn_v.weight", {E, KV});
        L.wo = tl.require(p + "attn_output.weight", {Q, E});
        L.bq = tl.optional(p + "attn_q.bias", {Q});
        L.bk = tl.optional(p + "attn_k.bias", {KV});
        L.bv = tl.optional(p + "attn_v.bias", {KV});
        L.bo = tl.optional(p + "attn_output.bias", {E});
        if (hp.qk_norm) {
            L.q_norm = tl.require(p + "attn_q_norm.weight", {D});
            L.k_norm = tl.require(p + "attn_k_norm.weight", {D});
        }
        L.ffn_norm = tl.require(p + "ffn_norm.weight", {E});
        L.ffn_gate = tl.require(p + "ffn_gate.weight", {E, F});
        L.ffn_up = tl.require(p + "ffn_up.weight", {E, F});
        L.ffn_down = tl.require(p + "ffn_down.weight", {F, E});
        L.ffn_gate_b = tl.optional(p + "ffn_gate.bias", {F});
        L.ffn_up_b = tl.optional(p + "ffn_up.bias", {F});
        L.ffn_down_b = tl.optional(p + "ffn_down.bias", {E});
    }
}

} // namespace luce
