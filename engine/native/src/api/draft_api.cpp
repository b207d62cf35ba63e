// draft_api.cpp — the C API of the DFlash draft model (luce.h, "DFlash draft model").
#include "luce.h"
#include "draft_model.h"
#include "engine.h"
#include "api_guard.h"
#include "error.h"

#include <cstring>
#include <new>

using luce::Error;

using luce::guarded;

extern "C" {

luce_draft_params luce_draft_default_params(void) {
    luce_draft_params p{};
    p.n_ctx_draft = 4096;
    p.use_mmap = true;
    p.small_batch_kernels = true;
    p.step_graphs = true;
    p.kv_pad = 256;
    return p;
}

luce_status luce_draft_load(const char * path, const luce_model * target, luce_draft_params params, luce_draft ** out) {
    if (out) *out = nullptr;
    return guarded([&] {
        REQUIRE(path && target && out, "luce_draft_load: path, target and out are required");
        auto d = std::make_unique<luce_draft>();
        d->model = luce::load_draft_model(path, *target->impl, params.use_mmap);
        d->ctx = std::make_unique<luce::DraftContext>(*d->model, params.n_ctx_draft, params.small_batch_kernels, params.step_graphs,
                                                      params.kv_pad);
        *out = d.release();
    });
}

void luce_draft_free(luce_draft * d) { delete d; }

// Fields that come from the file and the target (shared by get_info and plan).
static void fill_model_info(const luce::DraftModel & m, luce_draft_info * out) {
    const luce::DraftHParams & hp = m.hp;
    *out = {};
    std::strncpy(out->arch, hp.arch.c_str(), sizeof(out->arch) - 1);
    out->dialect = hp.lucebox ? LUCE_DRAFT_LUCEBOX : LUCE_DRAFT_LLAMA;
    out->block_size = hp.block_size;
    out->mask_token_id = hp.mask_token_id;
    out->n_capture = int32_t(hp.capture.size());
    for (size_t i = 0; i < hp.capture.size(); ++i) out->capture[i] = hp.capture[i];
    out->n_layer = hp.n_layer;
    out->n_embd = hp.n_embd;
    out->n_vocab = m.n_vocab();
    out->sliding_window = hp.any_swa() ? hp.sliding_window : 0;
    for (bool b : hp.swa) out->n_swa_layers += b ? 1 : 0;
    out->own_embedding = m.own_embd;
    out->own_lm_head = m.own_output;
    out->weight_bytes = m.weight_bytes;
}

luce_status luce_draft_get_info(const luce_draft * d, luce_draft_info * out) {
    return guarded([&] {
        REQUIRE(d && out, "draft and out are required");
        fill_model_info(*d->model, out);
        out->n_ctx_draft = d->ctx->n_ctx_draft();
        out->kv_bytes = d->ctx->kv_bytes();
        out->compute_bytes = d->ctx->compute_bytes();
        out->n_graph_builds = d->ctx->n_graph_builds();
        out->n_graph_reuses = d->ctx->n_graph_reuses();
        out->n_small_batch_evals = d->ctx->n_small_batch_evals();
        out->n_step_graph_replays = d->ctx->n_step_graph_replays();
    });
}

luce_status luce_draft_plan(const char * path, const luce_model * target, int32_t n_ctx_draft, int32_t capture_ring,
                            luce_draft_plan_info * out) {
    if (out) *out = {};
    return guarded([&] {
        REQUIRE(path && target && out, "luce_draft_plan: path, target and out are required");
        auto m = luce::load_draft_model(path, *target->impl, /*use_mmap=*/true, /*load_weights=*/false);
        const luce::DraftPlan p = luce::plan_draft(*m, n_ctx_draft, capture_ring);
        fill_model_info(*m, &out->info);
        out->info.n_ctx_draft = p.n_ctx_draft;
        out->info.kv_bytes = p.kv;
        out->info.compute_bytes = p.compute;
        out->capture_ring = p.capture_ring;
        out->weight_bytes = p.weights;
        out->kv_bytes = p.kv;
        out->compute_bytes = p.compute;
        out->capture_ring_bytes = p.capture_ring_bytes;
        out->total = p.total();
    });
}

luce_status luce_draft_reset(luce_draft * d) {
    return guarded([&] {
        REQUIRE(d, "draft is NULL");
        d->ctx->reset();
    });
}

luce_status luce_draft_inject(luce_draft * d, const float * features, int32_t n, int32_t start_pos) {
    return guarded([&] {
        REQUIRE(d && features, "draft and features are required");
        d->ctx->inject(features, n, start_pos);
    });
}

luce_status luce_draft_inject_captured(luce_draft * d, const luce_engine * e, int32_t start_pos, int32_t n) {
    return guarded([&] {
        REQUIRE(d && e, "draft and engine are required");
        d->ctx->inject_captured(*e->impl, start_pos, n);
    });
}

luce_status luce_draft_run(luce_draft * d, int32_t x0, int32_t pos0, int32_t * out_tokens) {
    return guarded([&] {
        REQUIRE(d && out_tokens, "draft and out_tokens are required");
        d->ctx->run(x0, pos0, out_tokens);
    });
}

luce_status luce_draft_logits(const luce_draft * d, int32_t first, int32_t n, float * out) {
    return guarded([&] {
        REQUIRE(d && out, "draft and out are required");
        d->ctx->copy_logits(first, n, out);
    });
}

luce_status luce_draft_top_candidates(luce_draft * d, int32_t first, int32_t n, int32_t k, float temperature,
                                      int32_t * out_tokens, float * out_logprobs) {
    return guarded([&] {
        REQUIRE(d && out_tokens && out_logprobs, "draft, out_tokens and out_logprobs are required");
        d->ctx->top_candidates(first, n, k, temperature, out_tokens, out_logprobs);
    });
}

} // extern "C"
