// draft_model.cpp — loading and validating a DFlash draft GGUF of either dialect against its target
// (docs/gguf-formats.md §1.5; docs/algorithms.md §1.1 table, §1.2 index conventions).
//
//   item              llama.cpp arch `dflash`              lucebox `dflash-draft` / `qwen35-dflash-draft`
//   capture           dflash.target_layers (L, i = L - 1)   A.dflash.target_layer_ids (i = id), or only
//                                                          A.dflash.n_target_layers N: ids 1 + k·⌊(T−2)/(N−1)⌋
//                                                          for a T-layer target (Lucebox's own converter)
//   block size        dflash.block_size                     A.dflash.block_size           (default 16)
//   mask token        tokenizer.ggml.mask_token_id          A.dflash.mask_token_id        (required)
//   fc / feature norm fc.weight, enc.output_norm.weight     dflash.fc / dflash_fc, dflash.hidden_norm / dflash_hidden_norm
//   FFN input norm    blk.i.ffn_norm                        blk.i.ffn_norm or blk.i.post_attention_norm
//   post_attention_norm  optional norm of the attention output   (the FFN input norm)
//   SWA without pattern  error (as llama.cpp)               no SWA layer (as lucebox)
//   target name       dflash.target_name (optional)          A.dflash.target_name (optional): must equal the
//                                                          target's general.name, else DraftMismatchError
#include "draft_model.h"
#include "device.h"
#include "error.h"
#include "weight_placement.h"

#include <algorithm>

namespace luce {

static const char * const k_lucebox_archs[] = {"dflash-draft", "qwen35-dflash-draft"};

DraftModel::~DraftModel() {
    if (buffer) ggml_backend_buffer_free(buffer);
    if (ctx) ggml_free(ctx);
}

int DraftModel::n_vocab() const { return int(output->ne[1]); }

static std::string join(const std::vector<int> & v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

static void load_hparams(const GgufFile & f, DraftHParams & hp) {
    const std::string a = hp.arch + ".";
    assign_shape(hp, read_transformer_shape(f, hp.arch, /*ctx_fallback=*/4096));
    if (hp.head_dim <= 0 || hp.head_dim % 2) f.fail(LUCE_ERR_MODEL, a + "attention.key_length must be positive and even");
    const int n_rot = int(f.u32_opt(a + "rope.dimension_count", uint32_t(hp.head_dim)));
    if (n_rot != hp.head_dim) {
        f.fail(LUCE_ERR_UNSUPPORTED, a + "rope.dimension_count (" + std::to_string(n_rot) + ") must equal the head size (" +
                                         std::to_string(hp.head_dim) + ")");
    }
    hp.rope_freq_base = f.f32_opt(a + "rope.freq_base", 10000.0f);
    hp.rms_eps = f.f32(a + "attention.layer_norm_rms_epsilon");

    // Rope: NEOX, or M-RoPE when the file carries sections that are not the degenerate [D/2, 0, 0, 0]
    // (which is NEOX on 1-D positions).
    if (f.has(a + "rope.dimension_sections")) {
        auto s = f.int_array(a + "rope.dimension_sections");
        int sum = 0;
        for (size_t i = 0; i < 4 && i < s.size(); ++i) {
            hp.rope_sections[i] = int(s[i]);
            sum += int(s[i]);
        }
        if (sum != 0 && sum != hp.head_dim / 2) {
            f.fail(LUCE_ERR_MODEL, a + "rope.dimension_sections must sum to head_dim/2 = " + std::to_string(hp.head_dim / 2));
        }
        if (hp.rope_sections[1] || hp.rope_sections[2] || hp.rope_sections[3]) hp.rope_type = GGML_ROPE_TYPE_MROPE;
    }

    // Features of the DFlash2 / DSpark variants and of llama.cpp's optional extras are not run.
    for (const char * k : {"hyper_connection.count", "conv_kernel_size", "selector_rank"}) {
        if (f.has(a + k) && f.u32(a + k) > 0) f.fail(LUCE_ERR_UNSUPPORTED, "key " + a + k + ": DFlash variant not supported");
    }
    for (const char * k : {"embedding_scale", "attention.scale", "attention.value_scale"}) {
        if (f.has(a + k) && f.f32(a + k) != 0.0f) f.fail(LUCE_ERR_UNSUPPORTED, "key " + a + k + " is not supported");
    }
    const std::string act = f.str_opt(a + "hidden_activation", "silu");
    if (act != "silu") f.fail(LUCE_ERR_UNSUPPORTED, "key " + a + "hidden_activation = '" + act + "' (only silu is supported)");

    // Dialect keys.
    std::vector<int64_t> cap;
    int64_t block = 0, mask = -1;
    if (!hp.lucebox) {
        if (!f.has(a + "target_layers")) {
            f.fail(LUCE_ERR_MODEL, "missing required key " + a + "target_layers (the target layers whose hidden states the draft reads)");
        }
        cap = f.int_array(a + "target_layers");
        for (int64_t L : cap) {
            hp.capture_file.push_back(int(L));
            hp.capture.push_back(int(L - 1));
        }
        block = f.u32_opt(a + "block_size", 0);
        if (!f.has("tokenizer.ggml.mask_token_id")) {
            f.fail(LUCE_ERR_MODEL, "missing required key tokenizer.ggml.mask_token_id (the draft's mask token)");
        }
        mask = f.u32("tokenizer.ggml.mask_token_id");
    } else {
        if (f.has(a + "dflash.target_layer_ids")) {
            cap = f.int_array(a + "dflash.target_layer_ids");
            for (int64_t id : cap) {
                hp.capture_file.push_back(int(id));
                hp.capture.push_back(int(id));
            }
        } else if (f.has(a + "dflash.n_target_layers")) {
            hp.n_target_layers = int(f.u32(a + "dflash.n_target_layers"));   // ids derived against the target
            if (hp.n_target_layers < 1) f.fail(LUCE_ERR_MODEL, "key " + a + "dflash.n_target_layers must be at least 1");
        } else {
            f.fail(LUCE_ERR_MODEL, "missing required key " + a +
                                       "dflash.target_layer_ids or dflash.n_target_layers (the target layers whose hidden "
                                       "states the draft reads)");
        }
        block = f.u32_opt(a + "dflash.block_size", 0);
        if (!f.has(a + "dflash.mask_token_id")) {
            f.fail(LUCE_ERR_MODEL, "missing required key " + a + "dflash.mask_token_id (the draft's mask token)");
        }
        mask = f.u32(a + "dflash.mask_token_id");
    }
    if (hp.capture.empty() && hp.n_target_layers == 0) f.fail(LUCE_ERR_MODEL, "the draft lists no target layers to capture");
    const size_t n_capture = hp.n_target_layers > 0 ? size_t(hp.n_target_layers) : hp.capture.size();
    if (n_capture > LUCE_DRAFT_MAX_CAPTURE) {
        f.fail(LUCE_ERR_UNSUPPORTED, "the draft captures " + std::to_string(n_capture) + " target layers (at most " +
                                         std::to_string(LUCE_DRAFT_MAX_CAPTURE) + " are supported)");
    }
    hp.block_size = block > 0 ? int(block) : 16;
    if (hp.block_size < 2 || hp.block_size > LUCE_MAX_STEP_TOKENS) {
        f.fail(LUCE_ERR_UNSUPPORTED, "draft block size " + std::to_string(hp.block_size) + " is outside 2.." +
                                         std::to_string(LUCE_MAX_STEP_TOKENS));
    }
    hp.mask_token_id = int(mask);

    // Sliding-window attention.
    hp.swa.assign(size_t(hp.n_layer), false);
    hp.sliding_window = int(f.u32_opt(a + "attention.sliding_window", 0));
    if (hp.sliding_window > 0) {
        const std::string pk = a + "attention.sliding_window_pattern";
        if (f.has(pk)) {
            auto pat = f.bool_array(pk);
            if (int(pat.size()) != hp.n_layer) {
                f.fail(LUCE_ERR_MODEL, "key " + pk + " has " + std::to_string(pat.size()) + " entries, expected " +
                                           std::to_string(hp.n_layer) + " (one per layer)");
            }
            for (int i = 0; i < hp.n_layer; ++i) hp.swa[size_t(i)] = pat[size_t(i)];
        } else if (!hp.lucebox) {   // llama.cpp refuses such a file
            f.fail(LUCE_ERR_MODEL, "key " + a + "attention.sliding_window needs " + pk + " (missing)");
        }   // lucebox: no pattern -> no SWA layer
    }
    hp.causal = f.bool_opt(a + "attention.causal", false);
}

// Lucebox drafts that give only the number N of captured layers: Lucebox's loader spreads them over
// a T-layer target as ids 1 + k·step, step = (T − 2) / (N − 1) in integers (27B, T = 64, N = 5:
// 1, 16, 31, 46, 61), ids in the output convention like A.dflash.target_layer_ids.
static void derive_capture(DraftHParams & hp, int n_target_layer) {
    if (hp.n_target_layers == 0) return;
    const int N = hp.n_target_layers;
    const int step = N > 1 ? (n_target_layer - 2) / (N - 1) : 0;
    for (int k = 0; k < N; ++k) {
        hp.capture_file.push_back(1 + k * step);
        hp.capture.push_back(1 + k * step);
    }
}

static void check_against_target(const GgufFile & f, const DraftHParams & hp, const Model & target) {
    const HParams & t = target.hp;
    auto mismatch = [&](const std::string & what) {
        f.fail(LUCE_ERR_DRAFT_MISMATCH, "draft does not fit the target model " + target.path + ": " + what);
    };
    if (hp.n_embd != t.n_embd) {
        mismatch(hp.arch + ".embedding_length is " + std::to_string(hp.n_embd) + " but the target's hidden size is " +
                 std::to_string(t.n_embd) + " (they must be equal)");
    }
    const std::string key = !hp.lucebox ? hp.arch + ".target_layers"
                            : hp.n_target_layers ? "the ids derived from " + hp.arch + ".dflash.n_target_layers"
                                                 : hp.arch + ".dflash.target_layer_ids";
    for (size_t i = 0; i < hp.capture.size(); ++i) {
        const int c = hp.capture[i];
        if (c < 0 || c > t.n_layer - 2) {
            mismatch(key + " = " + join(hp.capture_file) + ": entry " + std::to_string(hp.capture_file[i]) +
                     " names the output of target layer " + std::to_string(c) + ", outside 0.." +
                     std::to_string(t.n_layer - 2) + " for a " + std::to_string(t.n_layer) + "-layer target");
        }
    }
    // A draft trained for one model says so (luce's drafts; llama.cpp ignores the key): another
    // model of the same shape would load and silently accept nothing.
    const std::string name_key = hp.arch + (hp.lucebox ? ".dflash.target_name" : ".target_name");
    if (f.has(name_key) && f.str_opt(name_key, "") != target.name) {
        mismatch(name_key + " is '" + f.str_opt(name_key, "") + "' but the target model's general.name is '" +
                 target.name + "'");
    }
    if (hp.mask_token_id < 0 || hp.mask_token_id >= t.n_vocab) {
        mismatch((hp.lucebox ? hp.arch + ".dflash.mask_token_id" : std::string("tokenizer.ggml.mask_token_id")) +
                 ": mask token id " + std::to_string(hp.mask_token_id) + " is outside the target vocabulary (" +
                 std::to_string(t.n_vocab) + " tokens)");
    }
}

// The file's dialect and hyperparameters, checked against the target (no tensors yet).
static std::unique_ptr<DraftModel> open_draft(const std::string & path, const Model & target) {
    auto d = std::make_unique<DraftModel>();
    d->path = path;
    d->target = &target;
    d->file = std::make_unique<GgufFile>(path);
    GgufFile & f = *d->file;
    DraftHParams & hp = d->hp;
    hp.arch = f.arch();
    if (hp.arch == "dflash") {
        hp.lucebox = false;
    } else if (std::find(std::begin(k_lucebox_archs), std::end(k_lucebox_archs), hp.arch) != std::end(k_lucebox_archs)) {
        hp.lucebox = true;
    } else {
        f.fail(LUCE_ERR_UNSUPPORTED, "architecture '" + hp.arch +
                                         "' is not a DFlash draft (expected dflash, dflash-draft or qwen35-dflash-draft)");
    }
    load_hparams(f, hp);
    derive_capture(hp, target.hp.n_layer);
    check_against_target(f, hp, target);
    if (f.tensor_meta("d2t")) f.fail(LUCE_ERR_UNSUPPORTED, "tensor d2t: reduced draft vocabularies are not supported");
    if (f.tensor_meta("markov_w1.weight")) f.fail(LUCE_ERR_UNSUPPORTED, "tensor markov_w1.weight: DSpark drafts are not supported");
    if (f.tensor_meta("fc.scale")) f.fail(LUCE_ERR_UNSUPPORTED, "tensor fc.scale is not supported");
    d->dev = target.dev;
    return d;
}

// Headers of every weight, each checked for name, shape and type; sums the weight bytes.
static void declare_draft_tensors(DraftModel & dm, TensorLoader & tl) {
    const GgufFile & f = *dm.file;
    const DraftHParams & hp = dm.hp;
    const Model & target = *dm.target;
    DraftModel * d = &dm;
    const int64_t E = hp.n_embd, D = hp.head_dim, Q = int64_t(hp.n_head) * D, KV = int64_t(hp.n_head_kv) * D, F = hp.n_ff;
    const int64_t Nf = int64_t(hp.capture.size()), V = target.hp.n_vocab;

    auto first_of = [&](std::initializer_list<const char *> names) -> std::string {
        for (const char * n : names) if (f.tensor_meta(n)) return n;
        std::string all;
        for (const char * n : names) all += (all.empty() ? "" : " or ") + std::string(n);
        f.fail(LUCE_ERR_MODEL, "missing tensor " + all);
    };
    const std::string fc_name = hp.lucebox ? first_of({"dflash.fc.weight", "dflash_fc.weight"}) : "fc.weight";
    const std::string hn_name = hp.lucebox ? first_of({"dflash.hidden_norm.weight", "dflash_hidden_norm.weight"})
                                           : "enc.output_norm.weight";
    if (ggml_tensor * fc = f.tensor_meta(fc_name); fc && fc->ne[0] != Nf * E) {
        f.fail(LUCE_ERR_DRAFT_MISMATCH, "draft does not fit the target model " + target.path + ": tensor " + fc_name + " takes " + std::to_string(fc->ne[0]) + " inputs but the " +
                                            std::to_string(Nf) + " captured target layers give " + std::to_string(Nf) +
                                            " x " + std::to_string(E) + " = " + std::to_string(Nf * E) + " features");
    }
    d->fc = tl.require(fc_name, {Nf * E, E});
    d->hidden_norm = tl.require(hn_name, {E});
    d->output_norm = tl.require("output_norm.weight", {E});
    d->rope_freqs = tl.optional("rope_freqs.weight", {D / 2});

    // Embedding / LM head: the draft's own when present (same vocabulary as the target), else the target's.
    for (const char * n : {"token_embd.weight", "output.weight"}) {
        if (ggml_tensor * t = f.tensor_meta(n); t && t->ne[1] != V) {
            f.fail(LUCE_ERR_DRAFT_MISMATCH, std::string("tensor ") + n + " has " + std::to_string(t->ne[1]) +
                                                " rows but the target vocabulary has " + std::to_string(V) + " tokens");
        }
    }
    ggml_tensor * own_embd = tl.optional("token_embd.weight", {E, V});
    ggml_tensor * own_out = tl.optional("output.weight", {E, V});
    d->own_embd = own_embd != nullptr;
    d->own_output = own_out != nullptr || own_embd != nullptr;
    d->tok_embd = own_embd ? own_embd : target.tok_embd;
    d->output = own_out ? own_out : (own_embd ? own_embd : target.output);

    d->layers.resize(size_t(hp.n_layer));
    d->post_attn_norm.assign(size_t(hp.n_layer), nullptr);
    for (int il = 0; il < hp.n_layer; ++il) {
        auto & L = d->layers[size_t(il)];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = tl.require(p + "attn_norm.weight", {E});
        L.wq = tl.require(p + "attn_q.weight", {E, Q});
        L.wk = tl.require(p + "attn_k.weight", {E, KV});
        if (!f.tensor_meta(p + "attn_v.weight")) {
            f.fail(LUCE_ERR_UNSUPPORTED, "missing tensor " + p + "attn_v.weight (shared K/V drafts are not supported)");
        }
        L.wv = tl.require(p + "attn_v.weight", {E, KV});
        L.wo = tl.require(p + "attn_output.weight", {Q, E});
        L.q_norm = tl.require(p + "attn_q_norm.weight", {D});
        L.k_norm = tl.require(p + "attn_k_norm.weight", {D});
        for (const char * extra : {"post_ffw_norm.weight", "layer_output_scale.weight", "attn_sinks.weight"}) {
            if (f.tensor_meta(p + extra)) f.fail(LUCE_ERR_UNSUPPORTED, "tensor " + p + extra + " is not supported");
        }
        if (hp.lucebox) {   // post_attention_norm IS the FFN input norm (either name)
            L.ffn_norm = f.tensor_meta(p + "ffn_norm.weight") ? tl.require(p + "ffn_norm.weight", {E})
                                                              : tl.require(p + "post_attention_norm.weight", {E});
        } else {
            L.ffn_norm = tl.require(p + "ffn_norm.weight", {E});
            d->post_attn_norm[size_t(il)] = tl.optional(p + "post_attention_norm.weight", {E});
        }
        L.ffn_gate = tl.require(p + "ffn_gate.weight", {E, F});
        L.ffn_up = tl.require(p + "ffn_up.weight", {E, F});
        L.ffn_down = tl.require(p + "ffn_down.weight", {F, E});
    }

    count_weights(tl.entries(), d->weight_bytes, d->n_params);
}

// Weights on the target's device: a window onto the mapping on CPU, else a device buffer.
static void upload_draft_weights(DraftModel & d, const TensorLoader & tl, bool use_mmap) {
    d.buffer = place_weights(*d.file, d.dev, use_mmap, tl.entries(), plain_weight_layout(tl.entries()), d.weight_bytes,
                             "draft weights", "");
}

std::unique_ptr<DraftModel> load_draft_model(const std::string & path, const Model & target, bool use_mmap,
                                             bool load_weights) {
    // A plan-only target has tensor headers but no data: it can size a draft, not run one.
    if (load_weights && !target.buffer) {
        throw Error(LUCE_ERR_STATE, "the target model was opened for planning only (no weights loaded)");
    }
    auto d = open_draft(path, target);
    const size_t n_tensors_max = 16 + 16 * size_t(d->hp.n_layer);
    ggml_init_params ip = {ggml_tensor_overhead() * n_tensors_max, nullptr, /*no_alloc=*/true};
    d->ctx = ggml_init(ip);
    TensorLoader tl(*d->file, d->ctx);
    declare_draft_tensors(*d, tl);
    tl.refuse_undeclared(d->hp.arch + " draft");
    if (load_weights) upload_draft_weights(*d, tl, use_mmap);   // planning: sizes known, nothing read
    return d;
}

// ---- memory plan ------------------------------------------------------------------------------
// These mirror DraftContext (draft_graph.cpp): the ring default, the inject chunk and the graphs'
// shapes. tests/test_plan_draft.py compares them with a real DraftContext, so a change there that
// is not made here fails a test.
static constexpr int kDefaultRing = 4096, kPlanInjectChunk = 512;

int draft_ring_size(int n_ctx_draft) { return n_ctx_draft > 0 ? n_ctx_draft : kDefaultRing; }

// Per layer F32 K and V of [head_dim·n_head_kv, B + W]: B block scratch rows + the W-position ring.
uint64_t draft_kv_bytes(const DraftHParams & hp, int n_ctx_draft) {
    const uint64_t row = uint64_t(hp.head_dim) * hp.n_head_kv * sizeof(float);
    return 2 * uint64_t(hp.n_layer) * row * uint64_t(hp.block_size + draft_ring_size(n_ctx_draft));
}

uint64_t draft_capture_ring_bytes(const DraftHParams & hp, int capture_ring) {
    return uint64_t(hp.capture.size()) * hp.n_embd * uint64_t(draft_ring_size(capture_ring)) * sizeof(float);
}

// Compute scratch, as an upper bound of what ggml's allocator reserves for the three schedulers
// (one buffer each, sized by its largest graph). All activations are F32 (4 bytes); the bound
// assumes no memory reuse inside one layer (the allocator does reuse, so it measures less) while
// layers reuse each other's memory (they run one after the other). With E = n_embd, Q/KV = head
// widths, F = n_ff, V = n_vocab, Nf captured layers, B = block, W = ring, n = max(min(512, W), B)
// rows per inject chunk, n_kv = B + W attended rows:
//   inject      4·n·(Nf·E + 3E + 5KV)        features, fc·F, its norm; per layer K (matmul, norm,
//                                             scale, rope) and V
//   inject ring 4·(n + B)·(2Nf·E + 3E + 5KV) features gathered from the rings: get_rows + concat chain;
//                                             two graphs, each on its scheduler: n rows and a step's B
//   draft       4·( B·(8E + 5Q + 5KV + 3F)   per layer: norms, Q/K chains, V, attention out, W_o, FFN
//                 + n_kv·B·(2Hq + 2)         scores and softmax per head, the two masks
//                 + n_kv·KV                  contiguous V^T
//                 + 3·V·B )                  logits (an output: kept) and the tie-breaking argmax's
//                                             [V, B] chain, which the allocator runs in place (1-2 buffers)
//   top-k       4·3·V·B + 16·K·B            a tree's candidates (top_candidates): logits / T, minus
//                                             the row max, its exp; the [k, B] gathers for k <= K =
//                                             LUCE_MAX_STEP_TOKENS (a tree's budget is below it)
//   + 4·V + 52·n + 56·B                      the argmax ramp (allocated beside the KV) and the small
//                                             inputs: per row I32 positions (4 with M-RoPE), I64 cache
//                                             rows, I32 ring rows / tokens
// The bound holds as long as the sum over one layer exceeds the allocator's alignment padding,
// which it does by orders of magnitude for any real draft.
uint64_t draft_compute_bytes_estimate(const DraftModel & d, int n_ctx_draft) {
    const DraftHParams & hp = d.hp;
    const uint64_t E = hp.n_embd, D = hp.head_dim, Q = uint64_t(hp.n_head) * D, KV = uint64_t(hp.n_head_kv) * D;
    const uint64_t F = hp.n_ff, V = uint64_t(d.n_vocab()), Nf = hp.capture.size(), Hq = hp.n_head;
    const uint64_t B = hp.block_size, W = uint64_t(draft_ring_size(n_ctx_draft)), n_kv = B + W;
    const uint64_t n = std::max<uint64_t>(std::min<uint64_t>(kPlanInjectChunk, W), B);
    const uint64_t f32 = sizeof(float);
    const uint64_t pos_row = 4 * sizeof(int32_t), idx_row = sizeof(int64_t), tok_row = sizeof(int32_t);
    const uint64_t small_inputs = n * (2 * (pos_row + idx_row) + tok_row) + 2 * B * (pos_row + idx_row + tok_row);
    const uint64_t inject = f32 * n * (Nf * E + 3 * E + 5 * KV);
    const uint64_t inject_ring = f32 * (n + B) * (2 * Nf * E + 3 * E + 5 * KV);
    const uint64_t draft = f32 * (B * (8 * E + 5 * Q + 5 * KV + 3 * F) + n_kv * B * (2 * Hq + 2) + n_kv * KV + 3 * V * B);
    const uint64_t top_k = f32 * 3 * V * B + 4 * f32 * LUCE_MAX_STEP_TOKENS * B + 4096;   // + the [1, B] rows, padding
    // on a GPU, the small-batch kernels' scratch of the block's and the injection's runner, held only
    // once they take a matmul (the LM head may be the target's)
    const bool takes = small_batch_kernels_may_take(d.output, KernelScope::all_formats) ||
                       small_batch_kernels_may_take_any(d.ctx, KernelScope::all_formats);
    const uint64_t kernels = device_is_cpu(d.dev) || !takes ? 0 : 2 * small_batch_scratch_bound(int64_t(std::max({Nf * E, F, E, Q})));
    return inject + inject_ring + draft + top_k + small_inputs + f32 * V + kernels;
}

DraftPlan plan_draft(const DraftModel & d, int n_ctx_draft, int capture_ring) {
    DraftPlan p;
    p.n_ctx_draft = draft_ring_size(n_ctx_draft);
    p.capture_ring = draft_ring_size(capture_ring);
    p.weights = d.weight_bytes;
    p.kv = draft_kv_bytes(d.hp, n_ctx_draft);
    p.compute = draft_compute_bytes_estimate(d, n_ctx_draft);
    p.capture_ring_bytes = draft_capture_ring_bytes(d.hp, capture_ring);
    return p;
}

} // namespace luce
