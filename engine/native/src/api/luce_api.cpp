// luce_api.cpp — the C API: argument checks, exception-to-status translation, defaults.
#include "luce.h"
#include "engine.h"
#include "api_guard.h"
#include "error.h"

#include <new>

using luce::Error;

using luce::guarded;

extern "C" {

luce_model_params luce_model_default_params(void) {
    luce_model_params p{};
    p.device = "auto";
    p.use_mmap = true;
    p.n_threads = 0;
    p.plan_only = false;
    p.fuse_weights = true;
    p.repack_weights = true;
    return p;
}

luce_status luce_model_load(const char * path, luce_model_params params, luce_model ** out) {
    if (out) *out = nullptr;
    return guarded([&] {
        REQUIRE(path && out, "luce_model_load: path and out are required");
        auto m = luce::load_model(path, params);
        *out = new luce_model{std::move(m)};
    });
}

void luce_model_free(luce_model * model) { delete model; }

const char * luce_model_arch(const luce_model * m) { return m->impl->hp.arch.c_str(); }
const char * luce_model_name(const luce_model * m) { return m->impl->name.c_str(); }
const char * luce_model_device(const luce_model * m) { return m->impl->device_name.c_str(); }
int32_t luce_model_n_vocab(const luce_model * m) { return m->impl->hp.n_vocab; }
int32_t luce_model_n_embd(const luce_model * m) { return m->impl->hp.n_embd; }
int32_t luce_model_n_layer(const luce_model * m) { return m->impl->hp.n_layer; }
int32_t luce_model_n_ctx_train(const luce_model * m) { return m->impl->hp.n_ctx_train; }
uint64_t luce_model_n_params(const luce_model * m) { return m->impl->n_params; }
uint64_t luce_model_weight_bytes(const luce_model * m) { return m->impl->weight_bytes; }
const char * luce_model_type_summary(const luce_model * m) { return m->impl->type_summary.c_str(); }
int32_t luce_model_n_repacked(const luce_model * m) { return m->impl->n_repacked; }
int32_t luce_model_n_fused(const luce_model * m) {
    int32_t n = 0;
    for (const auto & L : m->impl->layers) n += (L.ffn_gate_up.w != nullptr) + (L.ssm_in.w != nullptr);
    return n;
}

luce_engine_params luce_engine_default_params(void) {
    luce_engine_params p{};
    p.n_ctx = 0;
    p.n_batch = 512;
    p.type_k = LUCE_CACHE_F16;
    p.type_v = LUCE_CACHE_F16;
    p.kv_rotation = true;
    p.n_verify_max = 16;
    p.rollback = LUCE_ROLLBACK_REPLAY;
    p.small_batch_kernels = true;
    p.step_graphs = true;
    p.tree_verify = false;
    p.small_batch_max_tokens = 16;
    p.tree_recurrence = LUCE_TREE_RECURRENCE_AUTO;
    p.step_kv_pad = 256;
    p.debug_piecewise = false;
    p.debug_staged_state_io = false;
    return p;
}

luce_status luce_engine_plan(const luce_model * model, luce_engine_params params, luce_memory_plan * plan) {
    return guarded([&] {
        REQUIRE(model && plan, "luce_engine_plan: model and plan are required");
        *plan = luce::plan_memory(*model->impl, params);
        luce::check_plan_fits(*model->impl, params, *plan);
    });
}

luce_status luce_engine_create(luce_model * model, luce_engine_params params, luce_engine ** out) {
    if (out) *out = nullptr;
    return guarded([&] {
        REQUIRE(model && out, "luce_engine_create: model and out are required");
        REQUIRE(params.n_ctx >= 0 && params.n_batch >= 0, "n_ctx and n_batch must not be negative");
        *out = new luce_engine{std::make_unique<luce::Engine>(*model->impl, params)};
    });
}

void luce_engine_free(luce_engine * e) { delete e; }

luce_status luce_engine_prefill(luce_engine * e, const int32_t * tokens, int32_t n, bool logits_all,
                                luce_progress_cb progress, void * ud) {
    return guarded([&] {
        REQUIRE(e, "engine is NULL");
        e->impl->prefill(tokens, n, logits_all, progress, ud);
    });
}

const float * luce_engine_logits(luce_engine * e, int32_t i) { return e ? e->impl->logits_row(i) : nullptr; }
int32_t luce_engine_n_logits(const luce_engine * e) { return e ? e->impl->n_logits() : 0; }

luce_status luce_engine_copy_logits(luce_engine * e, int32_t first, int32_t n, float * out) {
    return guarded([&] {
        REQUIRE(e && out, "engine or output buffer is NULL");
        e->impl->copy_logits(first, n, out);
    });
}

luce_status luce_engine_argmax(const luce_engine * e, int32_t i, int32_t * token) {
    return guarded([&] {
        REQUIRE(e && token, "engine or token is NULL");
        *token = e->impl->argmax_row(i);
    });
}

luce_sampling_params luce_sampling_default_params(void) {
    luce_sampling_params p{};
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = 0;
    return p;
}

static void check_sampling(const luce_sampling_params * p) {
    REQUIRE(p, "sampling params are NULL");
    REQUIRE(p->temperature >= 0.0f, "temperature must be >= 0");
    REQUIRE(p->top_p > 0.0f && p->top_p <= 1.0f, "top_p must be in (0, 1]");
    REQUIRE(p->min_p >= 0.0f && p->min_p <= 1.0f, "min_p must be in [0, 1]");
    REQUIRE(p->repeat_penalty > 0.0f, "repeat_penalty must be > 0");
}

luce_status luce_engine_sample(luce_engine * e, const luce_sampling_params * p, int32_t i, int32_t * token) {
    return guarded([&] {
        REQUIRE(e && token, "engine and token are required");
        check_sampling(p);
        *token = e->impl->sample(*p, i);
    });
}

void luce_engine_set_seed(luce_engine * e, uint64_t seed) { e->impl->set_seed(seed); }

luce_status luce_engine_step(luce_engine * e, const luce_sampling_params * p, luce_step_result * out) {
    return guarded([&] {
        REQUIRE(e && out, "engine and out are required");
        check_sampling(p);
        e->impl->step(*p, *out);
    });
}

luce_status luce_engine_verify(luce_engine * e, const int32_t * tokens, int32_t n, bool keep_pre_logits) {
    return guarded([&] {
        REQUIRE(e && tokens, "engine and tokens are required");
        e->impl->verify(tokens, n, keep_pre_logits);
    });
}

luce_status luce_engine_commit(luce_engine * e, int32_t k) {
    return guarded([&] {
        REQUIRE(e, "engine is NULL");
        e->impl->commit(k);
    });
}

luce_status luce_engine_verify_tree(luce_engine * e, const int32_t * tokens, const int32_t * parents, int32_t n,
                                    bool keep_pre_logits) {
    return guarded([&] {
        REQUIRE(e && tokens && parents, "engine, tokens and parents are required");
        e->impl->verify_tree(tokens, parents, n, keep_pre_logits);
    });
}

luce_status luce_engine_commit_path(luce_engine * e, const int32_t * nodes, int32_t k) {
    return guarded([&] {
        REQUIRE(e, "engine is NULL");
        e->impl->commit_path(nodes, k);
    });
}

luce_status luce_engine_set_capture(luce_engine * e, const int32_t * layers, int32_t n, bool output_convention,
                                    int32_t ring) {
    return guarded([&] {
        REQUIRE(e && (n <= 0 || layers), "engine and layers are required");
        e->impl->set_capture(layers, n, output_convention, ring);
    });
}

luce_status luce_engine_captured(const luce_engine * e, int32_t pos, float * out) {
    return guarded([&] {
        REQUIRE(e && out, "engine and out are required");
        e->impl->captured(pos, out);
    });
}

luce_status luce_engine_checkpoint(luce_engine * e) {
    return guarded([&] {
        REQUIRE(e, "engine is NULL");
        e->impl->checkpoint();
    });
}

luce_status luce_engine_truncate(luce_engine * e, int32_t n) {
    return guarded([&] {
        REQUIRE(e, "engine is NULL");
        e->impl->truncate(n);
    });
}

void luce_engine_cancel(luce_engine * e) { if (e) e->impl->cancel(); }
void luce_engine_clear_cancel(luce_engine * e) { if (e) e->impl->clear_cancel(); }
int32_t luce_engine_n_past(const luce_engine * e) { return e->impl->n_past(); }
int32_t luce_engine_n_ctx(const luce_engine * e) { return e->impl->n_ctx(); }
const int32_t * luce_engine_tokens(const luce_engine * e) { return e->impl->tokens(); }
void luce_engine_stats(const luce_engine * e, luce_stats * out) { *out = e->impl->stats(); }
void luce_engine_reset_stats(luce_engine * e) { e->impl->reset_stats(); }

luce_status luce_engine_memory_plan(const luce_engine * e, luce_memory_plan * plan) {
    return guarded([&] {
        REQUIRE(e && plan, "engine and plan are required");
        *plan = e->impl->memory_plan();
    });
}

} // extern "C"
