#include "model.h"
#include "cpu_repack.h"
#include "arch.h"
#include "device.h"
#include "error.h"
#include "weight_placement.h"

#include "ggml-alloc.h"

#include <algorithm>
#include <map>

namespace luce {

// Types a weight matrix may have: anything ggml can multiply (float or block-quantized).
static bool is_matrix_type(ggml_type t) {
    switch (t) {
        case GGML_TYPE_I8: case GGML_TYPE_I16: case GGML_TYPE_I32: case GGML_TYPE_I64: case GGML_TYPE_F64:
            return false;
        default:
            return t < GGML_TYPE_COUNT && ggml_get_type_traits(t)->blck_size > 0 && ggml_type_size(t) > 0;
    }
}

static std::string shape_str(const int64_t * ne, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

ggml_tensor * TensorLoader::create(const std::string & name, const std::vector<int64_t> & ne, bool required) {
    ggml_tensor * meta = file_.tensor_meta(name);
    if (!meta) {
        if (required) file_.fail(LUCE_ERR_MODEL, "missing tensor " + name);
        return nullptr;
    }
    int64_t want[GGML_MAX_DIMS] = {1, 1, 1, 1};
    for (size_t i = 0; i < ne.size(); ++i) want[i] = ne[i];
    for (int i = 0; i < GGML_MAX_DIMS; ++i) {
        if (meta->ne[i] != want[i]) {
            file_.fail(LUCE_ERR_MODEL, "tensor " + name + " has shape " + shape_str(meta->ne, ggml_n_dims(meta)) +
                                           ", expected " + shape_str(want, int(ne.size())));
        }
    }
    const bool vector = ne.size() == 1;
    if (vector ? meta->type != GGML_TYPE_F32 : !is_matrix_type(meta->type)) {
        file_.fail(LUCE_ERR_UNSUPPORTED, "tensor " + name + " has unsupported type " + ggml_type_name(meta->type) +
                                             (vector ? " (expected F32)" : " (expected a float or quantized type)"));
    }
    ggml_tensor * t = ggml_dup_tensor(ctx_, meta);
    ggml_set_name(t, name.c_str());
    entries_.push_back({t, file_.tensor_file_offset(name)});
    return t;
}

static bool ends_with(const std::string & s, const std::string & tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void TensorLoader::refuse_undeclared(const std::string & what, bool (*skipped)(const std::string &, int), int n_layer) const {
    std::vector<std::string> declared;
    for (const Entry & e : entries_) declared.emplace_back(e.tensor->name);
    for (const std::string & name : file_.tensor_names()) {
        if (std::find(declared.begin(), declared.end(), name) != declared.end()) continue;
        if (skipped && skipped(name, n_layer)) continue;
        std::string why = "luce's " + what + " loader does not use it, and a weight left out would give wrong results";
        if (ends_with(name, ".scale") || ends_with(name, "_scale") || ends_with(name, ".scale2")) {
            why = "a quantization scale companion (e.g. NVFP4's): such formats are not supported";
        } else if (ends_with(name, "attn_qkv.weight") || ends_with(name, "attn_qkv.bias")) {
            why = "fused Q/K/V (llama.cpp's convert_hf_to_gguf.py --fuse-qkv) is not supported; convert without --fuse-qkv";
        }
        file_.fail(LUCE_ERR_UNSUPPORTED, "tensor " + name + ": " + why);
    }
}

ggml_tensor * TensorLoader::require(const std::string & name, std::vector<int64_t> ne) { return create(name, ne, true); }
ggml_tensor * TensorLoader::optional(const std::string & name, std::vector<int64_t> ne) { return create(name, ne, false); }

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

void declare_attention(TensorLoader & tl, LayerWeights & L, const std::string & p, const HParams & hp, int64_t q_rows,
                       bool with_biases) {
    const int64_t E = hp.n_embd, D = hp.head_dim, Q = int64_t(hp.n_head) * D, KV = int64_t(hp.n_head_kv) * D;
    if (tl.file().tensor_meta(p + "attn_qkv.weight")) {
        tl.file().fail(LUCE_ERR_UNSUPPORTED, "tensor " + p + "attn_qkv.weight: fused Q/K/V in an attention layer (llama.cpp's "
                                             "convert_hf_to_gguf.py --fuse-qkv) is not supported; convert without --fuse-qkv");
    }
    L.wq = tl.require(p + "attn_q.weight", {E, q_rows});
    L.wk = tl.require(p + "attn_k.weight", {E, KV});
    L.wv = tl.require(p + "attn_v.weight", {E, KV});
    L.wo = tl.require(p + "attn_output.weight", {Q, E});
    if (with_biases) {
        L.bq = tl.optional(p + "attn_q.bias", {q_rows});
        L.bk = tl.optional(p + "attn_k.bias", {KV});
        L.bv = tl.optional(p + "attn_v.bias", {KV});
        L.bo = tl.optional(p + "attn_output.bias", {E});
    }
    if (hp.qk_norm) {
        L.q_norm = tl.require(p + "attn_q_norm.weight", {D});
        L.k_norm = tl.require(p + "attn_k_norm.weight", {D});
    }
}

void declare_swiglu_ffn(TensorLoader & tl, LayerWeights & L, const std::string & p, const char * norm, int64_t E, int64_t F) {
    L.ffn_norm = tl.require(p + norm, {E});
    L.ffn_gate = tl.require(p + "ffn_gate.weight", {E, F});
    L.ffn_up = tl.require(p + "ffn_up.weight", {E, F});
    L.ffn_down = tl.require(p + "ffn_down.weight", {F, E});
}

Model::~Model() {
    if (buffer) ggml_backend_buffer_free(buffer);
    if (repack_buffer) ggml_backend_buffer_free(repack_buffer);
    if (ctx) ggml_free(ctx);
}

static std::string summarize_types(const std::vector<TensorLoader::Entry> & entries) {
    std::map<std::string, int> counts;
    for (auto & e : entries) counts[ggml_type_name(e.tensor->type)]++;
    std::vector<std::pair<int, std::string>> v;
    for (auto & [k, n] : counts) v.push_back({-n, k});
    std::sort(v.begin(), v.end());
    std::string s;
    for (auto & [n, k] : v) s += (s.empty() ? "" : ", ") + k + " (" + std::to_string(-n) + ")";
    return s;
}

std::unique_ptr<Model> load_model(const std::string & path, const luce_model_params & params) {
    const std::string device = params.device ? params.device : "auto";
    const bool use_mmap = params.use_mmap, load_weights = !params.plan_only;
    const int n_threads = params.n_threads;
    auto m = std::make_unique<Model>();
    m->path = path;
    m->file = std::make_unique<GgufFile>(path);
    GgufFile & f = *m->file;

    m->ops = find_arch(f.arch());
    if (!m->ops) f.fail(LUCE_ERR_UNSUPPORTED, "unsupported architecture '" + f.arch() + "' (supported: " + supported_archs() + ")");
    m->hp.arch = f.arch();
    m->ops->load_hparams(f, m->hp);
    std::string base = path.substr(path.find_last_of('/') + 1);
    m->name = f.str_opt("general.name", base);

    m->dev = select_device(device);
    m->device_name = ggml_backend_dev_name(m->dev);
    m->n_threads = n_threads > 0 ? n_threads : default_thread_count();

    // Headers for every weight we use; sizes are known before any data moves.
    const size_t n_tensors_max = 16 + 48 * size_t(m->hp.n_layer);   // file tensors + fused tensors and views
    ggml_init_params ip = {ggml_tensor_overhead() * n_tensors_max, nullptr, /*no_alloc=*/true};
    m->ctx = ggml_init(ip);
    TensorLoader tl(f, m->ctx);
    m->ops->declare_tensors(tl, *m);
    tl.refuse_undeclared(m->hp.arch, m->ops->extra_tensor, m->hp.n_layer);

    count_weights(tl.entries(), m->weight_bytes, m->n_params);
    m->type_summary = summarize_types(tl.entries());
    // A tied LM head's matmul reads token_embd; where ggml repacks, it gets a repacked copy (as
    // llama.cpp's duplicated output tensor), counted in the weights.
    const bool mapped = device_is_cpu(m->dev) && use_mmap;
    const bool repack = mapped && params.repack_weights;
    std::vector<TensorLoader::Entry> copies;
    if (repack && m->output == m->tok_embd) {
        for (const auto & e : tl.entries()) {
            if (e.tensor != m->tok_embd) continue;
            ggml_tensor * head = ggml_dup_tensor(m->ctx, m->tok_embd);
            ggml_set_name(head, "output.weight (repacked token_embd)");
            copies.push_back({head, e.file_offset});
        }
        if (!copies.empty() && repackable(m->dev, copies)[0]) m->weight_bytes += ggml_nbytes(copies[0].tensor);
    }
    if (!load_weights) return m;   // planning: sizes are known, nothing is allocated or read

    // On a CPU the mapped weights stay in the page cache, except those ggml's CPU kernels repack;
    // device copies may fuse projections.
    const WeightLayout layout = mapped ? WeightLayout{} : plan_weight_layout(*m, tl.entries(), params.fuse_weights);
    CpuRepack repacked;
    if (repack) repacked = repack_for_cpu(f, m->dev, tl.entries(), copies);
    else repacked.mapped = tl.entries();
    m->repack_buffer = repacked.buffer;
    m->n_repacked = repacked.n_tensors;
    if (!copies.empty() && repacked.copied[0]) m->output = copies[0].tensor;
    m->buffer = place_weights(f, m->dev, use_mmap, repacked.mapped, layout, m->weight_bytes, "weights",
                              "; use a smaller quantization or another device");
    return m;
}

} // namespace luce
