// arch_qwen35.cpp — hyperparameters and weights of the Qwen3.5/3.6 hybrid (docs/gguf-formats.md §1.2):
// Gated DeltaNet layers (O(1) recurrent state) and gated full-attention layers (every
// full_attention_interval-th layer, or as `attention.recurrent_layers` says). MTP layers appended
// after the trunk are not loaded.
#include "model.h"
#include "error.h"

namespace luce {

void load_dense_common(const GgufFile & f, HParams & hp, bool partial_rope);

void qwen35_load_hparams(const GgufFile & f, HParams & hp) {
    load_dense_common(f, hp, /*partial_rope=*/true);
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

void qwen35_declare_tensors(TensorLoader & tl, Model & m) {
    HParams & hp = m.hp;
    const int64_t E = hp.n_embd, D = hp.head_dim, F = hp.n_ff;
    const int64_t Q = int64_t(hp.n_head) * D, KV = int64_t(hp.n_head_kv) * D;
    const int64_t S = hp.ssm_state, Hv = hp.ssm_heads, Di = Hv * S, C = hp.conv_channels();

    const GgufFile & f = *m.file;
    declare_embeddings(tl, m);

    m.layers.resize(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        auto & L = m.layers[size_t(il)];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = tl.require(p + "attn_norm.weight", {E});
        L.ffn_norm = tl.require(p + "post_attention_norm.weight", {E});
        L.ffn_gate = tl.require(p + "ffn_gate.weight", {E, F});
        L.ffn_up = tl.require(p + "ffn_up.weight", {E, F});
        L.ffn_down = tl.require(p + "ffn_down.weight", {F, E});
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
            if (f.tensor_meta(p + "attn_qkv.weight")) {
                f.fail(LUCE_ERR_UNSUPPORTED, "tensor " + p + "attn_qkv.weight: fused Q/K/V in an attention layer (llama.cpp's "
                                             "convert_hf_to_gguf.py --fuse-qkv) is not supported; convert without --fuse-qkv");
            }
            L.wq = tl.require(p + "attn_q.weight", {E, 2 * Q});
            L.wk = tl.require(p + "attn_k.weight", {E, KV});
            L.wv = tl.require(p + "attn_v.weight", {E, KV});
            L.wo = tl.require(p + "attn_output.weight", {Q, E});
            L.q_norm = tl.require(p + "attn_q_norm.weight", {D});
            L.k_norm = tl.require(p + "attn_k_norm.weight", {D});
        }
    }
}

} // namespace luce
