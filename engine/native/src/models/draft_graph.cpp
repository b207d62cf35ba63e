// draft_graph.cpp — the DFlash draft context of design (A) (docs/algorithms.md §1.4, docs/gguf-formats.md §3.2):
//
//   inject  (features F [Nf·E, n] of positions p):  g = rmsnorm(fc·F)·hidden_norm; per layer
//           K = rope(rmsnorm(W_k g)·k_norm, p), V = W_v g  -> cache rows B + (p mod W)
//   draft   (block [x0, M × (B-1)] at pos0..pos0+B-1): per layer hn = rmsnorm(h)·attn_norm, Q/K/V,
//           q/k norms, rope, block K/V -> cache rows 0..B-1, attention of the block over the
//           injected context in [pos0 - W, pos0) ∪ the block (non-causal; SWA layers: key p_k
//           visible to query p_q iff p_q - p_k < window, block keys included), W_o, residual,
//           SwiGLU FFN; rmsnorm·output_norm; LM head -> logits [V, B]; greedy argmax per row.
//
// The cache is F32 and attention is computed with plain matmuls + softmax in F32, so the logits
// track the float64 reference (tests/dflash_reference.py) to ~1e-6 relative. The features come
// from the host here; a device source (the target's capture ring) only needs another way to fill
// the `feats` input of the inject graph (e.g. get_rows over the rings instead of an input tensor).
#include "draft_model.h"
#include "engine.h"
#include "device.h"
#include "error.h"
#include "runtime.h"

#include <algorithm>
#include <cmath>

namespace luce {

static constexpr int kInjectChunk = 512;

static size_t draft_max_nodes(const DraftHParams & hp) { return size_t(64) * hp.n_layer + 256; }

DraftContext::DraftContext(DraftModel & d, int n_ctx_draft, bool small_batch_kernels, bool step_graphs, int kv_pad)
    : d_(d), runner_(d.dev, d.target->n_threads, draft_max_nodes(d.hp), kKinds, /*stop_on_cancel=*/false) {
    kv_pad_ = kv_pad > 0 ? kv_pad : kCtxPad;
    if (kv_pad_ % kCtxPad != 0) {
        throw Error(LUCE_ERR_INVALID_ARG, "the draft's kv_pad must be a multiple of " + std::to_string(kCtxPad) + ", not " +
                                              std::to_string(kv_pad));
    }
    if (small_batch_kernels && !runner_.on_cpu()) {
        block_kernels_.runner = make_small_batch_runner(runner_.backend(), step_graphs, KernelScope::all_formats);
        inject_kernels_.runner = make_small_batch_runner(runner_.backend(), step_graphs, KernelScope::all_formats);
    }
    const DraftHParams & hp = d_.hp;
    B_ = hp.block_size;
    W_ = n_ctx_draft > 0 ? n_ctx_draft : 4096;
    chunk_ = std::min(kInjectChunk, W_);

    // KV cache: rows [0, B) block scratch, [B, B + W) the ring. Zeroed: masked rows are still
    // multiplied (by a zero weight), so they must hold finite values.
    ggml_init_params ip = {ggml_tensor_overhead() * size_t(2 * hp.n_layer + 2), nullptr, true};
    cache_ctx_ = ggml_init(ip);
    const int64_t row = int64_t(hp.head_dim) * hp.n_head_kv;
    for (int il = 0; il < hp.n_layer; ++il) {
        k_.push_back(ggml_new_tensor_2d(cache_ctx_, GGML_TYPE_F32, row, B_ + W_));
        v_.push_back(ggml_new_tensor_2d(cache_ctx_, GGML_TYPE_F32, row, B_ + W_));
        kv_bytes_ += ggml_nbytes(k_.back()) + ggml_nbytes(v_.back());
    }
    const int V = d_.n_vocab();
    ramp_ = ggml_new_tensor_1d(cache_ctx_, GGML_TYPE_F32, V);
    size_t free_b = 0, total_b = 0;
    ggml_backend_dev_memory(d_.dev, &free_b, &total_b);
    if (!device_is_cpu(d_.dev) && free_b > 0 && kv_bytes_ > free_b) {
        throw Error(LUCE_ERR_MEMORY, "the draft KV cache for " + std::to_string(W_) + " positions needs " +
                                         format_bytes(kv_bytes_) + " but only " + format_bytes(free_b) +
                                         " is free; lower n_ctx_draft");
    }
    cache_buf_ = ggml_backend_alloc_ctx_tensors_from_buft(cache_ctx_, ggml_backend_dev_buffer_type(d_.dev));
    if (!cache_buf_) throw Error(LUCE_ERR_MEMORY, "cannot allocate " + format_bytes(kv_bytes_) + " for the draft KV cache");
    ggml_backend_buffer_clear(cache_buf_, 0);
    std::vector<float> ramp(static_cast<size_t>(V));
    for (int i = 0; i < V; ++i) ramp[size_t(i)] = float(V - i);
    ggml_backend_tensor_set(ramp_, ramp.data(), 0, ramp.size() * sizeof(float));

    slot_pos_.assign(size_t(W_), -1);
    reserve();
}

DraftContext::~DraftContext() {
    top_k_.reset();
    inject_.reset();
    draft_.reset();
    inject_ring_.reset();
    inject_wide_.reset();
    block_kernels_.runner.reset();   // before the runner's device goes
    inject_kernels_.runner.reset();
    if (cache_buf_) ggml_backend_buffer_free(cache_buf_);
    if (cache_ctx_) ggml_free(cache_ctx_);
}

// Compute buffers for the largest graphs of each kind, measured.
void DraftContext::reserve() {
    Graph gi, gd;
    build_inject(gi, std::max(chunk_, B_));
    build_draft(gd, W_);
    runner_.reserve(gi.gf, kInject, "the draft's injection (lower n_ctx_draft)");
    runner_.reserve(gd.gf, kDraft, "the draft block (lower n_ctx_draft)");
    update_compute_bytes();
}

void DraftContext::update_compute_bytes() {
    compute_bytes_ = runner_.compute_bytes();
    for (const Kernels * k : {&block_kernels_, &inject_kernels_}) {
        if (k->runner) compute_bytes_ += k->runner->scratch_bytes();
    }
}

DraftContext::Kernels * DraftContext::kernels_for(Kind kind) {
    Kernels * k = kind == kDraft ? &block_kernels_ : kind == kInjectRing ? &inject_kernels_ : nullptr;
    return k && k->runner ? k : nullptr;
}

// Between building and allocating a graph of n_rows: its inputs stay on the device when the
// small-batch kernels will run it (one split, no input copies).
void DraftContext::place_inputs(Kind kind, int n_rows, std::initializer_list<ggml_tensor *> inputs) {
    Kernels * k = kernels_for(kind);
    if (!k || !k->runner->wants(n_rows)) return;
    for (ggml_tensor * t : inputs) k->runner->place_input(runner_.sched(kind), t);
}

void DraftContext::prepare_kernels(Kind kind, int n_rows, ggml_cgraph * gf) {
    Kernels * k = kernels_for(kind);
    if (!k) return;
    k->prepared = k->runner->wants(n_rows) && k->runner->prepare(runner_.sched(kind), gf);
    update_compute_bytes();   // the runner's scratch may have grown
}

void DraftContext::compute(ggml_cgraph * gf, Kind kind, const char * what) {
    Kernels * k = kernels_for(kind);
    if (!k || !k->prepared) {
        runner_.compute(gf, kind, what);
        return;
    }
    const ggml_status st = k->runner->compute(gf);
    n_small_batch_evals_++;
    if (k->runner->last_ran() == SmallBatchRunner::Ran::replayed) n_step_graph_replays_++;
    runner_.throw_on(st, what);
}

void DraftContext::reset() {
    std::fill(slot_pos_.begin(), slot_pos_.end(), -1);
    hi_slot_ = 0;
    have_logits_ = false;
}

ggml_tensor * DraftContext::rope(ggml_context * ctx, ggml_tensor * x, ggml_tensor * pos) const {
    const DraftHParams & hp = d_.hp;
    if (hp.mrope()) {
        int sections[4] = {hp.rope_sections[0], hp.rope_sections[1], hp.rope_sections[2], hp.rope_sections[3]};
        return ggml_rope_multi(ctx, x, pos, d_.rope_freqs, hp.head_dim, sections, GGML_ROPE_TYPE_MROPE, hp.n_ctx_train,
                               hp.rope_freq_base, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    }
    return ggml_rope_ext(ctx, x, pos, d_.rope_freqs, hp.head_dim, GGML_ROPE_TYPE_NEOX, hp.n_ctx_train, hp.rope_freq_base,
                         1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
}

// Positions first..first+n-1 into an I32 input of `rows` tokens (M-RoPE: blocks t, h, w = p; e = 0).
void DraftContext::set_positions(ggml_tensor * t, int32_t first, int32_t n) const {
    const int64_t blocks = d_.hp.mrope() ? 4 : 1;
    const int64_t rows = ggml_nelements(t) / blocks;
    std::vector<int32_t> pos(size_t(ggml_nelements(t)), 0);
    for (int64_t b = 0; b < std::min<int64_t>(blocks, 3); ++b) {
        for (int32_t i = 0; i < n; ++i) pos[size_t(b * rows + i)] = first + i;
    }
    ggml_backend_tensor_set(t, pos.data(), 0, pos.size() * sizeof(int32_t));
}

static ggml_context * new_graph_ctx(const DraftHParams & hp, ggml_cgraph ** gf) {
    const size_t max_nodes = draft_max_nodes(hp);
    ggml_init_params ip = {ggml_tensor_overhead() * max_nodes + ggml_graph_overhead_custom(max_nodes, false), nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    if (!ctx) throw Error(LUCE_ERR_MEMORY, "cannot create a draft graph context");
    *gf = ggml_new_graph_custom(ctx, max_nodes, false);
    return ctx;
}

static ggml_tensor * input(ggml_tensor * t, const char * name) {
    ggml_set_input(t);
    ggml_set_name(t, name);
    return t;
}

// Without rings the features are an input uploaded from the host; with them they are gathered
// on the device from the target's capture rings (one [E, ring] tensor per captured layer, in
// the draft's capture order) by ring row, so a speculative step copies nothing through the host.
void DraftContext::build_inject(Graph & g, int n, const std::vector<ggml_tensor *> * rings) const {
    const DraftHParams & hp = d_.hp;
    const int64_t D = hp.head_dim, Hkv = hp.n_head_kv, NfE = d_.fc->ne[0];
    g.ctx = new_graph_ctx(hp, &g.gf);
    ggml_context * ctx = g.ctx;
    ggml_tensor * feats = nullptr;
    if (rings) {
        g.ring_rows = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n), "draft_inp_ring_rows");
        for (ggml_tensor * r : *rings) {
            ggml_tensor * f = ggml_get_rows(ctx, r, g.ring_rows);   // [E, n]
            feats = feats ? ggml_concat(ctx, feats, f, 0) : f;
        }
    } else {
        feats = g.feats = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, NfE, n), "draft_inp_feats");
    }
    g.pos = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n * (hp.mrope() ? 4 : 1)), "draft_inp_pos");
    g.idx = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I64, n), "draft_inp_rows");

    ggml_tensor * x = rms_norm_w(ctx, ggml_mul_mat(ctx, d_.fc, feats), d_.hidden_norm, hp.rms_eps);   // [E, n]
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights & L = d_.layers[size_t(il)];
        ggml_tensor * k = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wk, x), D, Hkv, n);
        k = rope(ctx, rms_norm_w(ctx, k, L.k_norm, hp.rms_eps), g.pos);
        ggml_tensor * v = ggml_mul_mat(ctx, L.wv, x);
        ggml_build_forward_expand(g.gf, ggml_set_rows(ctx, k_[size_t(il)], ggml_reshape_2d(ctx, k, D * Hkv, n), g.idx));
        ggml_build_forward_expand(g.gf, ggml_set_rows(ctx, v_[size_t(il)], v, g.idx));
    }
}

void DraftContext::build_draft(Graph & g, int n_kv_ctx) const {
    const DraftHParams & hp = d_.hp;
    const int64_t D = hp.head_dim, Hq = hp.n_head, Hkv = hp.n_head_kv, B = B_, n_kv = B_ + n_kv_ctx;
    g.ctx = new_graph_ctx(hp, &g.gf);
    ggml_context * ctx = g.ctx;
    g.tokens = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, B), "draft_inp_tokens");
    g.pos = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I32, B * (hp.mrope() ? 4 : 1)), "draft_inp_pos");
    g.idx = input(ggml_new_tensor_1d(ctx, GGML_TYPE_I64, B), "draft_inp_rows");
    // one mask per attention kind present (an input no node reads would get no buffer)
    if (std::find(hp.swa.begin(), hp.swa.end(), false) != hp.swa.end()) {
        g.mask = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_kv, B), "draft_inp_mask");
    }
    if (hp.any_swa()) g.mask_swa = input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_kv, B), "draft_inp_mask_swa");
    const float kq_scale = 1.0f / std::sqrt(float(D));

    ggml_tensor * x = ggml_get_rows(ctx, d_.tok_embd, g.tokens);   // [E, B]
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights & L = d_.layers[size_t(il)];
        ggml_tensor * h = rms_norm_w(ctx, x, L.attn_norm, hp.rms_eps);
        ggml_tensor * q = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wq, h), D, Hq, B);
        q = rope(ctx, rms_norm_w(ctx, q, L.q_norm, hp.rms_eps), g.pos);
        ggml_tensor * k = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wk, h), D, Hkv, B);
        k = rope(ctx, rms_norm_w(ctx, k, L.k_norm, hp.rms_eps), g.pos);
        ggml_tensor * v = ggml_mul_mat(ctx, L.wv, h);   // [D·Hkv, B]

        // Block K/V into the scratch rows; the views below depend on these writes.
        ggml_tensor * kc = ggml_set_rows(ctx, k_[size_t(il)], ggml_reshape_2d(ctx, k, D * Hkv, B), g.idx);
        ggml_tensor * vc = ggml_set_rows(ctx, v_[size_t(il)], v, g.idx);
        const size_t nb1 = ggml_row_size(GGML_TYPE_F32, D), nb2 = ggml_row_size(GGML_TYPE_F32, D * Hkv);
        ggml_tensor * kv = ggml_view_3d(ctx, kc, D, Hkv, n_kv, nb1, nb2, 0);
        ggml_tensor * vv = ggml_view_3d(ctx, vc, D, Hkv, n_kv, nb1, nb2, 0);

        // GQA by broadcasting: q head h reads kv head h / (Hq / Hkv).
        ggml_tensor * kq = ggml_mul_mat(ctx, ggml_permute(ctx, kv, 0, 2, 1, 3), ggml_permute(ctx, q, 0, 2, 1, 3));   // [n_kv, B, Hq]
        ggml_prec_set_acc(kq, GGML_PREC_F32);
        kq = ggml_soft_max_ext(ctx, kq, hp.swa[size_t(il)] ? g.mask_swa : g.mask, kq_scale, 0.0f);
        ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, vv, 1, 2, 0, 3));   // [n_kv, D, Hkv]
        ggml_tensor * o = ggml_mul_mat(ctx, vt, kq);                             // [D, B, Hq]
        o = ggml_cont_2d(ctx, ggml_permute(ctx, o, 0, 2, 1, 3), D * Hq, B);      // [D·Hq, B]
        o = ggml_mul_mat(ctx, L.wo, o);
        if (ggml_tensor * pn = d_.post_attn_norm[size_t(il)]) o = rms_norm_w(ctx, o, pn, hp.rms_eps);
        x = ggml_add(ctx, o, x);
        x = ggml_add(ctx, swiglu_ffn(ctx, L, rms_norm_w(ctx, x, L.ffn_norm, hp.rms_eps)), x);
    }
    x = rms_norm_w(ctx, x, d_.output_norm, hp.rms_eps);
    g.logits = ggml_mul_mat(ctx, d_.output, x);   // [V, B]
    ggml_set_name(g.logits, "draft_logits");
    ggml_set_output(g.logits);
    ggml_build_forward_expand(g.gf, g.logits);
    g.argmax = greedy_argmax(ctx, g.logits, ramp_, runner_.on_cpu());
    ggml_set_output(g.argmax);
    ggml_build_forward_expand(g.gf, g.argmax);
}

DraftContext::Graph & DraftContext::inject_graph(int n) {
    runner_.use(inject_, n, kInject, [&] { return "a draft injection of " + std::to_string(n) + " rows"; }, [&] {
        auto g = std::make_unique<Graph>();
        build_inject(*g, n);
        return g;
    });
    return *inject_.graph;
}

DraftContext::Graph & DraftContext::draft_graph(int n_kv_ctx) {
    const bool built = runner_.use(
        draft_, n_kv_ctx, kDraft, [] { return std::string("the draft block"); },
        [&] {
            auto g = std::make_unique<Graph>();
            build_draft(*g, n_kv_ctx);
            return g;
        },
        [&](Graph & g) { place_inputs(kDraft, B_, {g.tokens, g.pos, g.idx, g.mask, g.mask_swa}); });
    if (built) {
        prepare_kernels(kDraft, B_, draft_.graph->gf);
        draft_builds_++;
    }
    return *draft_.graph;
}

DraftContext::Graph & DraftContext::inject_ring_graph(Kind kind, int n, const std::vector<ggml_tensor *> & rings,
                                                      uint64_t generation) {
    auto & slot = kind == kInjectWide ? inject_wide_ : inject_ring_;
    const std::pair<int, uint64_t> key{n, generation};
    const auto describe = [&] { return "a draft injection of " + std::to_string(n) + " rows"; };
    const bool built = runner_.use(
        slot, key, kind, describe,
        [&] {
            auto g = std::make_unique<Graph>();
            build_inject(*g, n, &rings);
            return g;
        },
        [&](Graph & g) { place_inputs(kind, n, {g.ring_rows, g.pos, g.idx}); });
    if (built) {
        prepare_kernels(kind, n, slot.graph->gf);
        update_compute_bytes();   // its scheduler is not reserved up front
    }
    return *slot.graph;
}

// Rows of an injection past B positions. On a GPU the wide graph only grows: a catch-up of fewer
// rows pads into the one built (padding costs next to nothing there; a rebuild costs a graph build
// and an uncaptured run, ~a step), so probes after plain stretches of any length reuse it. On a
// CPU padding costs its rows, so the graph fits each injection (rebuilt when the size changes).
int32_t DraftContext::wide_rows(int32_t nc) const {
    const int32_t rows = inject_rows(nc);
    if (runner_.on_cpu() || !inject_wide_.graph) return rows;
    return std::max(rows, inject_wide_.key.first);
}

// Shapes are bucketed so that graphs repeat: up to B rows (a speculative step) -> B, else a
// multiple of 64. Padding rows go to block scratch row 0, which every draft run overwrites.
int32_t DraftContext::inject_rows(int32_t nc) const {
    return nc <= B_ ? B_ : std::min(round_up(nc, 64), std::max(chunk_, B_));
}

void DraftContext::finish_inject(Graph & g, Kind kind, int32_t start, int32_t nc, int32_t rows) {
    set_positions(g.pos, start, nc);
    std::vector<int64_t> idx(size_t(rows), 0);
    for (int32_t i = 0; i < nc; ++i) idx[size_t(i)] = B_ + (start + i) % W_;
    ggml_backend_tensor_set(g.idx, idx.data(), 0, idx.size() * sizeof(int64_t));
    compute(g.gf, kind, "draft injection");
    for (int32_t i = 0; i < nc; ++i) {
        const int32_t p = start + i, s = p % W_;
        slot_pos_[size_t(s)] = p;
        hi_slot_ = std::max(hi_slot_, s + 1);
    }
}

void DraftContext::inject(const float * feats, int32_t n, int32_t start) {
    if (n <= 0 || !feats) throw Error(LUCE_ERR_INVALID_ARG, "inject needs at least one feature row");
    if (start < 0 || int64_t(start) + n > INT32_MAX) {
        throw Error(LUCE_ERR_INVALID_ARG, "inject: start position " + std::to_string(start) + " is out of range");
    }
    const size_t row = size_t(d_.fc->ne[0]);
    if (n > W_) {   // only the last W positions can be kept
        feats += size_t(n - W_) * row;
        start += n - W_;
        n = W_;
    }
    for (int32_t done = 0; done < n;) {
        const int32_t nc = std::min(chunk_, n - done), rows = inject_rows(nc);
        Graph & g = inject_graph(rows);
        ggml_backend_tensor_set(g.feats, feats + size_t(done) * row, 0, size_t(nc) * row * sizeof(float));
        if (rows > nc) {
            std::vector<float> zeros(size_t(rows - nc) * row, 0.0f);
            ggml_backend_tensor_set(g.feats, zeros.data(), size_t(nc) * row * sizeof(float), zeros.size() * sizeof(float));
        }
        finish_inject(g, kInject, start + done, nc, rows);
        done += nc;
    }
}

void DraftContext::inject_captured(const Engine & eng, int32_t start, int32_t n) {
    const DraftHParams & hp = d_.hp;
    if (n <= 0) throw Error(LUCE_ERR_INVALID_ARG, "inject needs at least one position");
    if (&eng.model() != d_.target) throw Error(LUCE_ERR_INVALID_ARG, "the engine runs another model than this draft's target");
    if (!eng.capture_output_convention()) {
        throw Error(LUCE_ERR_STATE, "the engine captures layer inputs; the draft reads layer outputs (capture with output=true)");
    }
    std::vector<ggml_tensor *> rings;
    for (int layer : hp.capture) {
        ggml_tensor * r = eng.capture_ring(layer);
        if (!r) throw Error(LUCE_ERR_STATE, "the engine does not capture target layer " + std::to_string(layer) + ", which the draft reads");
        rings.push_back(r);
    }
    eng.check_captured(start, n);
    if (n > W_) {
        start += n - W_;
        n = W_;
    }
    const int32_t ring = eng.capture_ring_size();
    for (int32_t done = 0; done < n;) {
        const int32_t nc = std::min(chunk_, n - done);
        const Kind kind = nc <= B_ ? kInjectRing : kInjectWide;
        const int32_t rows = kind == kInjectRing ? inject_rows(nc) : wide_rows(nc);
        Graph & g = inject_ring_graph(kind, rows, rings, eng.capture_generation());
        std::vector<int32_t> ring_rows(size_t(rows), 0);
        for (int32_t i = 0; i < nc; ++i) ring_rows[size_t(i)] = (start + done + i) % ring;
        ggml_backend_tensor_set(g.ring_rows, ring_rows.data(), 0, ring_rows.size() * sizeof(int32_t));
        finish_inject(g, kind, start + done, nc, rows);
        done += nc;
    }
}

void DraftContext::run(int32_t x0, int32_t pos0, int32_t * out) {
    const DraftHParams & hp = d_.hp;
    const int V = d_.n_vocab();
    if (x0 < 0 || x0 >= V) {
        throw Error(LUCE_ERR_INVALID_ARG, "token id " + std::to_string(x0) + " is outside the vocabulary (" + std::to_string(V) + ")");
    }
    if (pos0 < 0 || int64_t(pos0) + B_ > INT32_MAX) throw Error(LUCE_ERR_INVALID_ARG, "draft position " + std::to_string(pos0) + " is out of range");
    have_logits_ = false;
    const int n_kv_ctx = hi_slot_ == 0 ? 0 : std::min(W_, round_up(hi_slot_, kv_pad_));
    Graph & g = draft_graph(n_kv_ctx);
    const int n_kv = B_ + n_kv_ctx;

    std::vector<int32_t> toks(size_t(B_), hp.mask_token_id);
    toks[0] = x0;
    ggml_backend_tensor_set(g.tokens, toks.data(), 0, toks.size() * sizeof(int32_t));
    set_positions(g.pos, pos0, B_);
    std::vector<int64_t> rows(static_cast<size_t>(B_));
    for (int i = 0; i < B_; ++i) rows[size_t(i)] = i;
    ggml_backend_tensor_set(g.idx, rows.data(), 0, rows.size() * sizeof(int64_t));

    // Masks: key row r < B is block token r (position pos0 + r); row B + s is ring slot s.
    const float ninf = -INFINITY;
    mask_buf_.assign(size_t(n_kv) * B_, ninf);
    if (g.mask_swa) mask_swa_buf_.assign(size_t(n_kv) * B_, ninf);
    const int64_t lo = int64_t(pos0) - W_;
    for (int i = 0; i < B_; ++i) {
        const int64_t pq = int64_t(pos0) + i;
        float * m = mask_buf_.data() + size_t(i) * n_kv;
        float * ms = g.mask_swa ? mask_swa_buf_.data() + size_t(i) * n_kv : nullptr;
        for (int r = 0; r < n_kv; ++r) {
            const int64_t pk = r < B_ ? int64_t(pos0) + r : int64_t(slot_pos_[size_t(r - B_)]);
            if (r >= B_ && (pk < 0 || pk >= pos0 || pk < lo)) continue;   // not injected, stale or outside the window
            if (hp.causal && pk > pq) continue;
            m[r] = 0.0f;
            if (ms && pq - pk < hp.sliding_window) ms[r] = 0.0f;
        }
    }
    if (g.mask) ggml_backend_tensor_set(g.mask, mask_buf_.data(), 0, mask_buf_.size() * sizeof(float));
    if (g.mask_swa) ggml_backend_tensor_set(g.mask_swa, mask_swa_buf_.data(), 0, mask_swa_buf_.size() * sizeof(float));

    compute(g.gf, kDraft, "draft computation");
    std::vector<int32_t> am(static_cast<size_t>(B_));
    ggml_backend_tensor_get(g.argmax, am.data(), 0, am.size() * sizeof(int32_t));
    // a row that is not finite (-1 on the CPU) proposes token 0, which verification rejects
    for (int i = 1; i < B_; ++i) out[i - 1] = std::max(am[size_t(i)], 0);
    have_logits_ = true;
}

void DraftContext::copy_logits(int32_t first, int32_t n, float * out) const {
    if (!have_logits_) throw Error(LUCE_ERR_STATE, "no draft logits: run a draft block first");
    if (first < 0 || n < 0 || first + n > B_) {
        throw Error(LUCE_ERR_INVALID_ARG, "draft logits rows " + std::to_string(first) + ".." + std::to_string(first + n - 1) +
                                              " are not among the " + std::to_string(B_) + " of the block");
    }
    const size_t rb = size_t(d_.n_vocab()) * sizeof(float);
    ggml_backend_tensor_get(draft_.graph->logits, out, size_t(first) * rb, size_t(n) * rb);
}

// Top-k of logits rows first..first+n-1 over x = logits / T, with the log-probabilities as
// (x_i - m) - log(sum_j exp(x_j - m)) for m the row maximum (no underflow of small probabilities,
// as a log of the softmax would have). ggml_top_k returns its k indices in no particular order;
// the host sorts those few. Dividing (not multiplying by 1/T) matches ddtree.top_candidates.
void DraftContext::build_top_k(TopKGraph & g, const TopKKey & key) const {
    const ggml_tensor * logits = draft_.graph->logits;   // [V, B], allocated by the draft's scheduler
    const int64_t V = logits->ne[0], n = key.n;
    ggml_init_params ip = {ggml_tensor_overhead() * 32 + ggml_graph_overhead_custom(32, false), nullptr, true};
    g.ctx = ggml_init(ip);
    if (!g.ctx) throw Error(LUCE_ERR_MEMORY, "cannot create the draft's top-k graph");
    ggml_context * ctx = g.ctx;
    g.gf = ggml_new_graph_custom(ctx, 32, false);
    g.temperature = input(ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1), "draft_topk_temperature");
    // The rows as a tensor of this graph over the logits' memory: a view would pull the whole draft
    // graph in as its sources.
    ggml_tensor * rows = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, V, n);
    if (ggml_backend_tensor_alloc(logits->buffer, rows, static_cast<char *>(logits->data) + size_t(key.first) * logits->nb[1]) !=
        GGML_STATUS_SUCCESS) {
        throw Error(LUCE_ERR_COMPUTE, "cannot read the draft's logits for its top-k");
    }
    ggml_tensor * x = ggml_div(ctx, rows, g.temperature);                        // [V, n]
    ggml_tensor * x3 = ggml_reshape_3d(ctx, x, 1, V, n);                         // for per-row gathers
    ggml_tensor * at_max = ggml_reshape_2d(ctx, ggml_argmax(ctx, x), 1, n);      // [1, n]
    ggml_tensor * m = ggml_reshape_2d(ctx, ggml_get_rows(ctx, x3, at_max), 1, n);
    ggml_tensor * log_sum = ggml_log(ctx, ggml_sum_rows(ctx, ggml_exp(ctx, ggml_sub(ctx, x, m))));   // [1, n]
    g.tokens = ggml_top_k(ctx, x, key.k);                                        // [k, n] I32
    ggml_tensor * vals = ggml_reshape_2d(ctx, ggml_get_rows(ctx, x3, g.tokens), key.k, n);
    g.logprobs = ggml_sub(ctx, ggml_sub(ctx, vals, m), log_sum);                 // [k, n]
    for (ggml_tensor * t : {g.tokens, g.logprobs}) {
        ggml_set_output(t);
        ggml_build_forward_expand(g.gf, t);
    }
}

void DraftContext::top_candidates(int32_t first, int32_t n, int32_t k, float temperature, int32_t * tokens,
                                  float * logprobs) {
    if (!have_logits_) throw Error(LUCE_ERR_STATE, "no draft logits: run a draft block first");
    const int V = d_.n_vocab();
    if (first < 0 || n < 1 || first + n > B_) {
        throw Error(LUCE_ERR_INVALID_ARG, "draft logits rows " + std::to_string(first) + ".." + std::to_string(first + n - 1) +
                                              " are not among the " + std::to_string(B_) + " of the block");
    }
    if (k < 1 || k > V) throw Error(LUCE_ERR_INVALID_ARG, "top-k needs k in 1.." + std::to_string(V) + ", not " + std::to_string(k));
    if (!(temperature > 0.0f) || !std::isfinite(temperature)) {
        throw Error(LUCE_ERR_INVALID_ARG, "the top-k temperature must be finite and > 0, not " + std::to_string(temperature));
    }
    const TopKKey key{first, n, k, draft_builds_, draft_.graph->logits->data};
    const bool built = runner_.use(top_k_, key, kTopK, [] { return std::string("the draft's top-k"); }, [&] {
        auto g = std::make_unique<TopKGraph>();
        build_top_k(*g, key);
        return g;
    });
    if (built) update_compute_bytes();   // its scheduler is not reserved up front
    TopKGraph & g = *top_k_.graph;
    ggml_backend_tensor_set(g.temperature, &temperature, 0, sizeof(float));
    runner_.compute(g.gf, kTopK, "the draft's top-k");
    const size_t kn = size_t(k) * size_t(n);
    std::vector<int32_t> toks(kn);
    std::vector<float> lp(kn);
    ggml_backend_tensor_get(g.tokens, toks.data(), 0, kn * sizeof(int32_t));
    ggml_backend_tensor_get(g.logprobs, lp.data(), 0, kn * sizeof(float));
    std::vector<int32_t> order(static_cast<size_t>(k));
    for (int32_t r = 0; r < n; ++r) {
        const int32_t * t = toks.data() + size_t(r) * k;
        const float * l = lp.data() + size_t(r) * k;
        for (int32_t i = 0; i < k; ++i) order[size_t(i)] = i;
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] != l[b] ? l[a] > l[b] : t[a] < t[b]; });
        for (int32_t i = 0; i < k; ++i) {
            tokens[size_t(r) * k + i] = t[order[size_t(i)]];
            logprobs[size_t(r) * k + i] = l[order[size_t(i)]];
        }
    }
}

} // namespace luce
