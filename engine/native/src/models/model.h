// model.h — a loaded GGUF model: hyperparameters, weight tensors in backend buffers, device.
#pragma once

#include "gguf_file.h"

#include "ggml-backend.h"
#include "ggml.h"

#include <memory>
#include <string>
#include <vector>

namespace luce {

struct HParams {
    std::string arch;
    int n_vocab = 0, n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0;
    int head_dim = 0;            // attention.key_length (== value_length for the archs we run)
    int n_ff = 0, n_ctx_train = 0, n_rot = 0;
    float rope_freq_base = 10000.0f, rope_freq_scale = 1.0f, rms_eps = 1e-5f;
    int rope_type = 0;           // GGML_ROPE_TYPE_*
    bool qk_norm = false;        // per-head RMS norms on q and k (qwen3)

    // qwen35 hybrid (docs/gguf-formats.md §1.2): DeltaNet layers carry O(1) state instead of KV
    std::vector<bool> recurrent;  // per trunk layer; empty for dense archs
    int ssm_state = 0, ssm_groups = 0, ssm_heads = 0, ssm_conv = 0;   // S, Hk, Hv, Kc
    int rope_sections[4] = {0, 0, 0, 0};
    bool hybrid() const { return !recurrent.empty(); }
    bool is_recurrent(int il) const { return hybrid() && recurrent[size_t(il)]; }
    int conv_channels() const { return 2 * ssm_groups * ssm_state + ssm_heads * ssm_state; }
};

// Several projections of one input stored back to back in one weight (weight_fusion.h): one matmul
// whose output rows [offset[i], offset[i] + rows of part i) are part i; offset -1: not fused.
struct FusedProjection {
    ggml_tensor * w = nullptr;
    std::vector<int64_t> offset;
    int64_t at(size_t part) const { return w && part < offset.size() ? offset[part] : -1; }
};

struct LayerWeights {
    ggml_tensor *attn_norm = nullptr, *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
    ggml_tensor *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;   // optional biases
    ggml_tensor *q_norm = nullptr, *k_norm = nullptr;
    ggml_tensor *ffn_norm = nullptr, *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;
    ggml_tensor *ffn_gate_b = nullptr, *ffn_up_b = nullptr, *ffn_down_b = nullptr;
    // qwen35 DeltaNet layers (ffn_norm holds post_attention_norm)
    ggml_tensor *ssm_qkv = nullptr, *ssm_gate = nullptr, *ssm_beta = nullptr, *ssm_alpha = nullptr;
    ggml_tensor *ssm_dt_b = nullptr, *ssm_a = nullptr, *ssm_conv1d = nullptr, *ssm_norm = nullptr, *ssm_out = nullptr;
    FusedProjection ffn_gate_up;   // parts: ffn_gate, ffn_up
    FusedProjection ssm_in;        // parts: ssm_qkv, ssm_gate, ssm_beta, ssm_alpha
};

struct Model;

// Declares the weights an architecture needs, checking each against the file.
class TensorLoader {
public:
    TensorLoader(const GgufFile & file, ggml_context * ctx) : file_(file), ctx_(ctx) {}
    // A matrix or vector with exactly this ne; a missing/mis-shaped/mistyped tensor throws.
    ggml_tensor * require(const std::string & name, std::vector<int64_t> ne);
    ggml_tensor * optional(const std::string & name, std::vector<int64_t> ne);
    const GgufFile & file() const { return file_; }
    struct Entry { ggml_tensor * tensor; size_t file_offset; };
    const std::vector<Entry> & entries() const { return entries_; }
    // After every declaration: a file tensor that none declared (and `skipped` does not accept) is
    // refused with LUCE_ERR_UNSUPPORTED naming it, never silently left out of the model.
    void refuse_undeclared(const std::string & what, bool (*skipped)(const std::string & name, int n_layer) = nullptr,
                           int n_layer = 0) const;
private:
    ggml_tensor * create(const std::string & name, const std::vector<int64_t> & ne, bool required);
    const GgufFile & file_;
    ggml_context * ctx_;
    std::vector<Entry> entries_;
};

struct ArchOps;

struct Model {
    std::string path, name, device_name;
    HParams hp;
    const ArchOps * ops = nullptr;              // its row of the architecture table (arch.h)
    ggml_backend_dev_t dev = nullptr;
    int n_threads = 1;

    ggml_tensor *tok_embd = nullptr, *output_norm = nullptr, *output = nullptr, *rope_freqs = nullptr;
    std::vector<LayerWeights> layers;

    ggml_context * ctx = nullptr;               // weight tensor headers
    ggml_backend_buffer_t buffer = nullptr;     // weight data (mmap-backed on CPU)
    ggml_backend_buffer_t repack_buffer = nullptr;   // CPU: the weights ggml's kernels repacked (cpu_repack.h)
    int n_repacked = 0;                         // how many weights live there
    std::unique_ptr<GgufFile> file;             // kept open: the CPU buffer points into its mapping
    uint64_t weight_bytes = 0, n_params = 0;
    std::string type_summary;

    ~Model();
};

// Loads and validates; throws luce::Error.
// params: as luce_model_params (device null = "auto"; plan_only: validate and size, load nothing).
std::unique_ptr<Model> load_model(const std::string & path, const luce_model_params & params);

// The keys every transformer file has (model or draft), checked: context length (ctx_fallback < 0:
// required), hidden size, layers, FFN width, heads, KV heads, head size (= value size).
struct TransformerShape { int n_ctx_train, n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim; };
TransformerShape read_transformer_shape(const GgufFile & f, const std::string & arch, int ctx_fallback = -1);
// Copies the shape into a model's or a draft's hyperparameters (same field names).
template <class H> void assign_shape(H & hp, const TransformerShape & s) {
    hp.n_ctx_train = s.n_ctx_train;
    hp.n_embd = s.n_embd;
    hp.n_layer = s.n_layer;
    hp.n_ff = s.n_ff;
    hp.n_head = s.n_head;
    hp.n_head_kv = s.n_head_kv;
    hp.head_dim = s.head_dim;
}

// Shape, RoPE (partial_rope: rope.dimension_count may be less than the head size) and norm keys of
// a target model (hparams.cpp).
void load_transformer_hparams(const GgufFile & f, HParams & hp, bool partial_rope = false);
void declare_embeddings(TensorLoader & tl, Model & m);   // token_embd, output_norm, output (or tied)
// A layer's attention projections: q with q_rows outputs, k, v, output, the optional biases when
// with_biases, and the q/k norms when hp.qk_norm. A fused attn_qkv is refused by name.
void declare_attention(TensorLoader & tl, LayerWeights & L, const std::string & p, const HParams & hp, int64_t q_rows,
                       bool with_biases);
// A layer's FFN input norm (named `norm`) and SwiGLU weights, blk prefix p ("blk.3.").
void declare_swiglu_ffn(TensorLoader & tl, LayerWeights & L, const std::string & p, const char * norm, int64_t E, int64_t F);

} // namespace luce

struct luce_model {
    std::unique_ptr<luce::Model> impl;
};
