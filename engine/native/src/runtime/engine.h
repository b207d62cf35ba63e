// engine.h — a model plus its KV cache, graphs, sampler state and statistics.
#pragma once

#include "graph.h"
#include "graph_runner.h"
#include "context_state.h"
#include "logit_rows.h"
#include "model.h"
#include "sampler.h"
#include "small_batch_runner.h"
#include "path_move_graph.h"
#include "tree_nodes.h"
#include "tree_paths.h"

#include <array>

#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <atomic>
#include <memory>
#include <vector>

namespace luce {

// engine_plan.cpp: the parameters as the engine runs them (defaults filled in, rounded, clamped),
// what they decide, and the memory plan.
luce_engine_params normalized_engine_params(const Model & m, luce_engine_params p);
int64_t matmul_width(const HParams & hp);   // the widest matmul input (sizes the small-batch scratch)
bool rollback_by_replay(const Model & m, const luce_engine_params & p);
luce_memory_plan plan_memory(const Model & m, const luce_engine_params & p);   // estimates; no allocation
// The one "does it fit" check of luce_engine_plan and of an engine being made: what the engine needs
// on top of the (resident) weights against the device's free memory; LUCE_ERR_MEMORY says what to change.
void check_plan_fits(const Model & m, const luce_engine_params & p, const luce_memory_plan & plan);

class Engine {
public:
    Engine(Model & model, const luce_engine_params & params);   // throws
    ~Engine();

    // Evaluates tokens appended to the context in micro-batches (see luce_engine_prefill).
    void prefill(const int32_t * tokens, int32_t n, bool logits_all, luce_progress_cb cb, void * ud);
    void step(const luce_sampling_params & sp, luce_step_result & out);
    int32_t sample(const luce_sampling_params & sp, int32_t row);
    void truncate(int32_t n);
    // see luce_engine_verify; keep_pre_logits false: commit(0) restores only the greedy token of
    // the logits before the verify (saves a row download when the caller never commits 0)
    void verify(const int32_t * tokens, int32_t n, bool keep_pre_logits = true);
    void commit(int32_t k);
    // Tree verify (dense models; engine_tree.cpp, see luce_engine_verify_tree) and the commit of
    // one root-to-node path of it.
    void verify_tree(const int32_t * tokens, const int32_t * parents, int32_t n, bool keep_pre_logits = true);
    void commit_path(const int32_t * nodes, int32_t k);
    void checkpoint();
    void set_capture(const int32_t * layers, int32_t n, bool output_convention, int32_t ring);
    void captured(int32_t pos, float * out) const;
    // The capture ring of internal layer `layer` ([n_embd, ring] on the model's device), or null
    // when that layer is not captured; positions p live in row p % capture_ring_size().
    ggml_tensor * capture_ring(int layer) const;
    int32_t capture_ring_size() const { return kv_.capture.ring; }
    uint64_t capture_generation() const { return kv_.capture.generation; }   // changes with every set_capture
    bool capture_output_convention() const { return kv_.capture.output_convention; }
    // Throws unless positions [pos, pos + n) are committed and still in the ring.
    void check_captured(int32_t pos, int32_t n) const;

    const float * logits_row(int32_t i) { return logits_.row(i); }   // fetched on first read
    int32_t argmax_row(int32_t i) const;                                // greedy token of row i, no download
    void copy_logits(int32_t first, int32_t n, float * out);
    int32_t n_logits() const { return logits_.n_rows(); }
    int32_t n_past() const { return int32_t(tokens_.size()); }
    int32_t n_ctx() const { return kv_.n_ctx; }
    const int32_t * tokens() const { return tokens_.data(); }
    const Model & model() const { return m_; }

    void cancel() { runner_->cancel(); }
    void clear_cancel() { runner_->clear_cancel(); }
    void set_seed(uint64_t seed) { rng_.reseed(seed); }
    luce_stats stats() const;
    void reset_stats() { stats_ = {}; }
    luce_memory_plan memory_plan() const { return plan_; }

    // What state_file.cpp reads when it saves this context and replaces when it loads one.
    ContextState & context_state() { return kv_; }
    const luce_engine_params & params() const { return params_; }
    bool has_pending() const { return pending_ > 0; }
    LogitRows::Saved last_logits() { return logits_.save_last(); }
    // A state file was read into the stores: the context is `tokens`, `last` the logits after them.
    void adopt_state(std::vector<int32_t> tokens, LogitRows::Saved last);
    // The stores no longer hold what tokens_ says (a read failed half-way): an empty context.
    void drop_context();

private:
    // One graph launch over tokens [0, n) appended at the current end of the context: the graph
    // for its shape, its inputs, the computation, its outputs.
    // decode: a step's one token (prompts stay on the scheduler; see eval)
    // parents: a tree verify's parent ids (null: a causal batch)
    void eval(const int32_t * tokens, int32_t n, bool logits_all, bool verify = false, bool decode = false,
              const int32_t * parents = nullptr);
    struct GraphSlot;
    ForwardGraph & select_graph(GraphSlot & slot, const GraphShape & shape, bool piecewise);
    // Whether a hybrid tree verify of n nodes runs its recurrence by nodes (params.tree_recurrence).
    bool tree_by_nodes(const GraphSlot & slot, int32_t n) const;
    void set_inputs(ForwardGraph & g, const int32_t * tokens, int32_t n, const int32_t * parents);
    void begin_verify(const int32_t * tokens, int32_t n, bool keep_pre_logits);   // checks shared by both verifies
    void move_path_rows(const int32_t * nodes, int32_t k);   // engine_tree.cpp: KV and capture rows
    void move_recurrent_path_inputs(const int32_t * nodes, int32_t k);   // engine_tree_hybrid.cpp
    void move_rows_via_host(ggml_tensor * t, const int32_t * nodes, int32_t first, int32_t k);
    // The tokens a penalty at tree node `node` looks at: the last `last_n` (all when < 0) of the
    // committed context followed by the node's root path.
    std::vector<int32_t> tree_history(int32_t node, int32_t last_n) const;
    void read_outputs(ForwardGraph & g, bool logits_all, bool verify, bool replay_on_failure);
    void check_no_pending() const;
    int32_t pending_ = 0;                      // provisional tokens of an uncommitted verify
    std::vector<int32_t> tree_parents_;        // of a pending tree verify (empty: a chain verify)
    TreePaths tree_paths_;                     // of the last hybrid tree verify by paths (its graph's path inputs)
    TreeNodes tree_nodes_;                     // ... by nodes (its graph's visits and conv windows)
    bool tree_nodes_refused_ = false;          // the runner could not take a graph by nodes: paths from then on
    TurnCheckpoints checkpoints_;
    void restore_recurrent_after(int32_t k);   // from the snapshots
    void replay_recurrent(int32_t k);          // by replay (kv_.rec.replay)
    void replay_tokens(const int32_t * toks, size_t n);
    LogitRows::Saved pre_verify_logits_;       // restored by commit(0)
    void check_cancel();
    void reserve_worst_case();
    // Hybrid models: recompute the recurrent state of the committed tokens from scratch.
    void replay_context();
    bool replaying_ = false;

    Model & m_;
    luce_engine_params params_;
    ContextState kv_;                        // attention K/V, recurrent state, capture ring
    std::unique_ptr<GraphRunner> runner_;    // the model's device (+ CPU fallback), one scheduler
    ggml_gallocr_t replay_alloc_ = nullptr;   // the replay graph's scratch (kv_.rec.replay), reserved for n_verify_max
    ggml_gallocr_t move_alloc_ = nullptr;     // commit_path's row-move graphs: their index inputs and gathered rows
    std::vector<std::unique_ptr<RowMoveGraph>> row_moves_;   // per number of rows moved (move_path_rows)
    std::vector<std::unique_ptr<ReplayGraph>> replay_graphs_;   // per k, allocated once (replay_recurrent)
    ggml_gallocr_t path_move_alloc_ = nullptr;   // the tree commit's scratch (hybrid, replay), reserved for n_verify_max
    std::vector<std::unique_ptr<PathMoveGraph>> path_moves_;    // per path length (move_recurrent_path_inputs)
    // A graph replayed while its shape (and where it runs) repeats, in slots with a scheduler
    // (runner kind) and small-batch runner each: one-token steps (decodes, a pending token's 1-row
    // verify), prompts' batches, and verifies, kVerifyGraphs slots by width (the least recently
    // used one taken over by a new width). A speculative decoder alternates them, and with one slot
    // every switch rebuilt the graph (and on a GPU recaptured it): a plain step between speculative
    // ones cost 3.5 against 1.1 ms on the H100 (bench/RESULTS.md).
    struct GraphKey {
        GraphShape shape;
        bool pieces = false;                 // built for the slot's kernels (a verify they want)
        bool operator==(const GraphKey & o) const { return shape == o.shape && pieces == o.pieces; }
    };
    struct GraphSlot {
        int kind = 0;                        // the runner's scheduler
        GraphRunner::Cached<ForwardGraph, GraphKey> graph;
        std::unique_ptr<SmallBatchRunner> kernels;   // CUDA: few-token graphs with our matmul kernels
        bool piecewise = false;              // graph runs on kernels (else on the scheduler)
    };
    static constexpr int kBatchKind = 0, kStepKind = 1, kVerifyKind0 = 2;
    GraphSlot batch_{kBatchKind}, step_{kStepKind};
    std::array<GraphSlot, kVerifyGraphs> verify_;   // kinds kVerifyKind0 + i (set in the constructor)
    std::array<uint64_t, kVerifyGraphs> verify_used_{};   // each slot's last use (0: never)
    uint64_t verify_uses_ = 0;
    GraphSlot & slot_for(int n_tokens, bool verify);
    void reset_graphs() {
        batch_.graph.reset();
        step_.graph.reset();
        for (GraphSlot & s : verify_) s.graph.reset();
    }
    // params.debug_piecewise on a CPU: every graph computes in pieces cut around its matmuls
    // (graph_views.h), which must give the scheduler's results bit for bit (tests/test_graph_pieces.py)
    bool debug_piecewise_ = false;
    ggml_status compute_in_pieces(ggml_cgraph * gf, int kind);

    std::vector<int32_t> tokens_;            // the context
    LogitRows logits_;                       // rows of the last evaluation (lazily downloaded)
    std::vector<uint16_t> mask_buf_;         // host staging for the mask
    std::vector<int32_t> argmax_buf_;        // per-row argmax and sum of the last evaluation
    std::vector<float> sums_buf_;
    Rng rng_;
    luce_stats stats_{};
    luce_memory_plan plan_{};
};

} // namespace luce

struct luce_engine {
    std::unique_ptr<luce::Engine> impl;
};
