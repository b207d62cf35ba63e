// scorer.h — the PFlash scorer (docs/algorithms.md §4.2, §4.3, §4.7): a dense model run over a long
// prompt only to rank its tokens by the attention that the prompt's last n_tail tokens pay them.
//
// One call = a forward over the body (all tokens but the tail) in micro-batches that fills a KV
// cache and computes nothing else (no LM head; the last layer stops after writing its K/V), then
// one tail graph that runs the tail tokens through the model and, per layer, scores their queries
// against every key, keeping the running maximum over layers and heads on the device.
#pragma once

#include "graph_runner.h"
#include "graph.h"
#include "luce.h"
#include "model.h"

#include "ggml-backend.h"
#include "ggml.h"

#include <atomic>
#include <memory>
#include <vector>

namespace luce {

// K and V of every scored layer for one call, [head_dim·n_head_kv, n_ctx] at f16.
struct ScorerCache {
    int n_ctx = 0;
    int n_layers = 0;   // the first n_layers layers of the model
    std::vector<ggml_tensor *> k, v;
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buffer = nullptr;

    static uint64_t bytes(const HParams & hp, int n_layers, int n_ctx);
    void allocate(const Model & m, int n_layers, int n_ctx);   // throws LUCE_ERR_MEMORY
    ScorerCache() = default;
    ScorerCache(const ScorerCache &) = delete;
    ScorerCache & operator=(const ScorerCache &) = delete;
    ~ScorerCache();
};

// A body micro-batch: n_tokens new tokens attending n_kv keys, which are either the cache cells
// [0, n_kv) (dense) or the cells listed in `sel` (sparse: sink + window + the batch itself).
struct ScorerShape {
    int n_tokens = 0;
    int n_kv = 0;
    bool sparse = false;
    bool operator==(const ScorerShape & o) const {
        return n_tokens == o.n_tokens && n_kv == o.n_kv && sparse == o.sparse;
    }
};

struct ScorerGraph : TokenBatchGraph {
    ScorerShape shape;
    ggml_tensor * sel = nullptr;        // I32 [n_kv]: cache rows gathered (sparse only)
    // tail graph only
    int n_keys = 0;                     // S: keys scored
    ggml_tensor * key_pos = nullptr;    // I32 [S] = 0..S-1 (pre-RoPE: un-rotates the cached K)
    ggml_tensor * score_mask = nullptr; // F16 [S, n_tail]: causal among the tail rows
    ggml_tensor * tail_max = nullptr;   // F32 [S, n_tail]: max over layers and heads (output)
};

size_t scorer_graph_nodes(const Model & m);
std::unique_ptr<ScorerGraph> build_scorer_body(const Model & m, const ScorerCache & c, ScorerShape shape);
// n_question tokens after n_keys - n_question cached ones, scored by the queries of the last
// n_tail of them; their own attention reads n_kv_pad cells.
std::unique_ptr<ScorerGraph> build_scorer_tail(const Model & m, const ScorerCache & c, int n_question, int n_tail,
                                               int n_keys, int n_kv_pad, bool pre_rope);

// Which keys a body micro-batch [q0, q1) attends (graph_scorer.cpp documents the rule).
struct ScorerKeys {
    bool sparse = false;
    int n_kv = 0;                   // keys attended, padded to a multiple of 256
    std::vector<int32_t> rows;      // sparse: the cache rows, in key order (size n_kv; padding repeats row 0)
    int n_real = 0;                 // keys that are real (the rest is padding, masked)
};
ScorerKeys scorer_keys(const luce_scorer_params & p, int n_total, int q0, int q1);

luce_scorer_params normalized_scorer_params(luce_scorer_params p);
int scorer_layers(const HParams & hp, const luce_scorer_params & p);   // layers a call runs
// n_tokens = body + the longest question; n_question: that question's length (default n_tail)
luce_memory_plan plan_scorer(const Model & m, const luce_scorer_params & p, int n_tokens, int n_tail, int n_question = 0);
// Throws LUCE_ERR_MEMORY, saying what to change, when the plan does not fit the device.
void check_scorer_plan(const Model & m, const luce_memory_plan & plan, int n_tokens);

class Scorer {
public:
    Scorer(Model & model, const luce_scorer_params & params);   // throws
    ~Scorer();
    // Single prompt: the last n_tail tokens are the question; out[n] scores every token.
    void score(const int32_t * tokens, int32_t n, int32_t n_tail, bool pre_rope, float * out, luce_progress_cb cb,
               void * ud);
    // One body, several questions after it in turn: out[q][n_body] scores the body for question q.
    void score_questions(const int32_t * body, int32_t n_body, const int32_t * questions, const int32_t * lens,
                         int32_t n_questions, int32_t n_tail, bool pre_rope, float * out, luce_progress_cb cb, void * ud);
    void cancel() { runner_.cancel(); }
    void clear_cancel() { runner_.clear_cancel(); }
    luce_scorer_stats stats() const { return stats_; }

private:
    void check_cancel();
    void run(ScorerGraph & g);                     // computes a graph already allocated
    void eval_body(const ScorerCache & c, const int32_t * toks, int q0, int q1, int n_total);
    struct Question { const int32_t * tokens; int n; };
    // the body's forward once, then each question; sink(q, scores[S], S) receives question q's scores
    template <typename Sink>
    void run_call(const int32_t * body, int n_body, const std::vector<Question> & questions, int n_tail, bool pre_rope,
                  Sink && sink, luce_progress_cb cb, void * ud);
    void eval_tail(const ScorerCache & c, const Question & q, int n_body, int n_tail, bool pre_rope, std::vector<float> & out);
    void check_tokens(const int32_t * toks, int n, const char * what) const;
    void measure_compute();

    Model & m_;
    luce_scorer_params params_;
    // Its scheduler lives for one call: the compute buffers go back when the call ends. A cancel
    // also stops a CPU graph between its nodes (a scorer graph has no state to keep whole).
    GraphRunner runner_;
    GraphRunner::Cached<ScorerGraph, ScorerShape> body_;   // last body graph, replayed while the shape repeats
    std::vector<uint16_t> mask_buf_;
    luce_scorer_stats stats_{};
};

} // namespace luce

struct luce_scorer {
    std::unique_ptr<luce::Scorer> impl;
};
