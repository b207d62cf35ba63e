// scorer_api.cpp — the C API of the PFlash scorer (luce.h, "PFlash scorer").
#include "luce.h"
#include "scorer.h"
#include "api_guard.h"
#include "error.h"

using luce::Error;
using luce::guarded;

extern "C" {

luce_scorer_params luce_scorer_default_params(void) {
    luce_scorer_params p{};
    p.n_batch = 512;
    p.sparse_threshold = 32768;
    p.sparse_sink = 256;      // FlashPrefill's 2 sink blocks of 128
    p.sparse_window = 2048;
    p.n_layers = 0;
    return p;
}

static void check_params(const luce_scorer_params & p) {
    REQUIRE(p.n_batch >= 0, "n_batch must not be negative");
    REQUIRE(p.sparse_sink >= 0 && p.sparse_window >= 0, "sparse_sink and sparse_window must not be negative");
}

luce_status luce_scorer_plan(const luce_model * model, luce_scorer_params params, int32_t n_tokens, int32_t n_tail,
                             luce_memory_plan * plan) {
    return guarded([&] {
        REQUIRE(model && plan, "luce_scorer_plan: model and plan are required");
        REQUIRE(n_tokens > 0 && n_tail > 0, "n_tokens and n_tail must be positive");
        check_params(params);
        *plan = luce::plan_scorer(*model->impl, params, n_tokens, n_tail);
        luce::check_scorer_plan(*model->impl, *plan, n_tokens);
    });
}

luce_status luce_scorer_create(luce_model * model, luce_scorer_params params, luce_scorer ** out) {
    if (out) *out = nullptr;
    return guarded([&] {
        REQUIRE(model && out, "luce_scorer_create: model and out are required");
        check_params(params);
        *out = new luce_scorer{std::make_unique<luce::Scorer>(*model->impl, params)};
    });
}

void luce_scorer_free(luce_scorer * s) { delete s; }

luce_status luce_scorer_score(luce_scorer * s, const int32_t * tokens, int32_t n_tokens, int32_t n_tail, bool pre_rope,
                              float * scores, luce_progress_cb progress, void * user_data) {
    return guarded([&] {
        REQUIRE(s && tokens && scores, "scorer, tokens and scores are required");
        s->impl->score(tokens, n_tokens, n_tail, pre_rope, scores, progress, user_data);
    });
}

luce_status luce_scorer_score_questions(luce_scorer * s, const int32_t * body, int32_t n_body, const int32_t * questions,
                                        const int32_t * lens, int32_t n_questions, int32_t n_tail, bool pre_rope,
                                        float * scores, luce_progress_cb progress, void * user_data) {
    return guarded([&] {
        REQUIRE(s && body && questions && lens && scores, "scorer, body, questions, lens and scores are required");
        s->impl->score_questions(body, n_body, questions, lens, n_questions, n_tail, pre_rope, scores, progress, user_data);
    });
}

void luce_scorer_cancel(luce_scorer * s) { if (s) s->impl->cancel(); }
void luce_scorer_clear_cancel(luce_scorer * s) { if (s) s->impl->clear_cancel(); }

luce_status luce_scorer_get_stats(const luce_scorer * s, luce_scorer_stats * out) {
    return guarded([&] {
        REQUIRE(s && out, "scorer and out are required");
        *out = s->impl->stats();
    });
}

} // extern "C"
