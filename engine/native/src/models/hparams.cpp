// hparams.cpp — the hyperparameter keys every transformer file shares (models and DFlash drafts):
// shape, RoPE and its scaling, the norm epsilon (docs/gguf-formats.md §1.1).
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

void load_transformer_hparams(const GgufFile & f, HParams & hp, bool partial_rope) {
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

} // namespace luce
