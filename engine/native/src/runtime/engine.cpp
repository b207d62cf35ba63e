#include "engine.h"
#include "device.h"
#include "error.h"
#include "graph_per_length.h"
#include "graph_views.h"
#include "memory_plan.h"
#include "runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace luce {

Engine::Engine(Model & model, const luce_engine_params & params_in) : m_(model) {
    if (!m_.buffer) throw Error(LUCE_ERR_STATE, "this model was opened for planning only (no weights loaded)");
    params_ = normalized_engine_params(m_, params_in);
    logits_.reset(m_.hp.n_vocab);
    plan_ = plan_memory(m_, params_);
    check_plan_fits(m_, params_, plan_);

    // A cancel also stops a CPU graph between its nodes, so a long micro-batch ends promptly.
    // Not for hybrid models: an aborted graph may have updated some layers' recurrent state.
    runner_ = std::make_unique<GraphRunner>(m_.dev, m_.n_threads, graph_max_nodes(m_), kVerifyKind0 + kVerifyGraphs,
                                            /*stop_on_cancel=*/!m_.hp.hybrid());
    for (int i = 0; i < kVerifyGraphs; ++i) verify_[size_t(i)].kind = kVerifyKind0 + i;
    kv_.allocate(m_, params_.n_ctx, cache_ggml_type(params_.type_k), cache_ggml_type(params_.type_v), params_.kv_rotation,
                 params_.n_verify_max, rollback_by_replay(m_, params_));
    if (!runner_->on_cpu() && params_.small_batch_kernels) {
        for (GraphSlot & s : verify_) {
            s.kernels = make_small_batch_runner(runner_->backend(), params_.step_graphs, KernelScope::more_past_mmvq,
                                                params_.small_batch_max_tokens);
        }
        step_.kernels = make_small_batch_runner(runner_->backend(), params_.step_graphs, KernelScope::core_formats);
    }
    if (m_.hp.hybrid() && params_.tree_verify && params_.tree_recurrence == LUCE_TREE_RECURRENCE_NODES && !runner_->on_cpu() &&
        !(verify_[0].kernels && verify_[0].kernels->takes_tree_nodes(m_.hp.ssm_state, 2))) {
        throw Error(LUCE_ERR_INVALID_ARG, "tree_recurrence nodes on " + m_.device_name + " needs luce's small-batch kernels "
                                          "(small_batch_kernels on, a CUDA build) and a recurrent state size of 16, 32, 64 or 128");
    }
    debug_piecewise_ = device_is_cpu(m_.dev) && params_.debug_piecewise;
    reserve_worst_case();
}

Engine::~Engine() {
    reset_graphs();
    replay_graphs_.clear();
    if (replay_alloc_) ggml_gallocr_free(replay_alloc_);
    path_moves_.clear();
    if (path_move_alloc_) ggml_gallocr_free(path_move_alloc_);
    row_moves_.clear();
    if (move_alloc_) ggml_gallocr_free(move_alloc_);
    for (GraphSlot & s : verify_) s.kernels.reset();   // their events and streams belong to the runner's device: gone before it is
    step_.kernels.reset();
    runner_.reset();
}

void Engine::reserve_worst_case() {
    auto g = build_graph(m_, kv_, {params_.n_batch, kv_.n_ctx, false});
    runner_->reserve(g->gf, kBatchKind, "a batch of " + std::to_string(params_.n_batch) + " tokens (lower --max-ctx or the prefill batch)");
    auto step = build_graph(m_, kv_, {1, kv_.n_ctx, false});
    runner_->reserve(step->gf, kStepKind, "a one-token step (lower --max-ctx)");
    const int nv = params_.n_verify_max;
    if (nv > 1) {
        auto verify = build_graph(m_, kv_, {nv, kv_.n_ctx, true, m_.hp.hybrid()});
        for (const GraphSlot & s : verify_) {
            runner_->reserve(verify->gf, s.kind, "a verify of " + std::to_string(nv) + " tokens (lower --max-ctx)");
        }
    }
    uint64_t compute = runner_->compute_bytes();
    if (kv_.rec.replay) {   // the replay graph's scratch, for the longest verify
        replay_alloc_ = ggml_gallocr_new(ggml_backend_dev_buffer_type(m_.dev));
        const ReplayGraph worst(m_, kv_, kv_.rec.n_verify_max);
        if (!replay_alloc_ || !ggml_gallocr_reserve(replay_alloc_, worst.gf)) {
            throw Error(LUCE_ERR_MEMORY, "cannot reserve the rollback replay's scratch on " + m_.device_name);
        }
        compute += ggml_gallocr_get_buffer_size(replay_alloc_, 0);
    }
    if (kv_.rec.replay && params_.tree_verify) {
        // a tree verify of n_verify_max nodes: its paths' recurrence at the widest and the longest
        // bucketed shapes (tree_paths.h), and the commit's move of the longest path
        const int nvm = kv_.rec.n_verify_max, W = 4;
        // (paths are reserved where nodes run too: a graph the runner cannot take falls back to them)
        std::vector<GraphShape> shapes = {GraphShape{nvm, kv_.n_ctx, true, true, tree_paths_max(nvm), W},
                                          GraphShape{nvm, kv_.n_ctx, true, true, 1, tree_path_rows_max(nvm)}};
        if (tree_by_nodes(verify_[0], nvm)) shapes.push_back(GraphShape{nvm, kv_.n_ctx, true, true, 0, 0, true});
        for (const GraphShape & s : shapes) {
            auto g = build_graph(m_, kv_, s);
            for (const GraphSlot & slot : verify_) {
                runner_->reserve(g->gf, slot.kind, "a tree verify of " + std::to_string(nvm) + " nodes");
            }
        }
        compute = runner_->compute_bytes() + ggml_gallocr_get_buffer_size(replay_alloc_, 0);
        path_move_alloc_ = ggml_gallocr_new(ggml_backend_dev_buffer_type(m_.dev));
        const PathMoveGraph worst_move(m_, kv_, nvm);
        if (!path_move_alloc_ || !ggml_gallocr_reserve(path_move_alloc_, worst_move.gf)) {
            throw Error(LUCE_ERR_MEMORY, "cannot reserve the tree commit's scratch on " + m_.device_name);
        }
        compute += ggml_gallocr_get_buffer_size(path_move_alloc_, 0);
    }
    // measured now, plus what the small-batch kernels may hold
    const bool kernels_take = verify_[0].kernels && small_batch_kernels_may_take_any(m_.ctx, KernelScope::more_past_mmvq);
    const uint64_t runners = 1 + kVerifyGraphs;   // the step slot's and each verify slot's
    plan_.compute = compute + (kernels_take ? runners * small_batch_scratch_bound(matmul_width(m_.hp), params_.small_batch_max_tokens) : 0);
    if (kv_.rec.replay && params_.tree_verify && tree_by_nodes(verify_[0], kv_.rec.n_verify_max) && !runner_->on_cpu()) {
        plan_.compute += kVerifyGraphs * tree_nodes_stacks_bound(kv_.rec.n_verify_max, m_.hp.ssm_state, m_.hp.ssm_heads);
    }
    update_plan_totals(plan_, runner_->on_cpu());
}

ggml_status Engine::compute_in_pieces(ggml_cgraph * gf, int kind) {
    if (ggml_backend_sched_get_n_splits(runner_->sched(kind)) != 1) return runner_->compute_status(gf, kind);
    std::vector<std::pair<int, int>> ranges;   // every matmul alone, the nodes between them together
    const int n = ggml_graph_n_nodes(gf);
    for (int i = 0; i < n; ++i) {
        const bool alone = ggml_graph_node(gf, i)->op == GGML_OP_MUL_MAT;
        if (alone || ranges.empty() || ggml_graph_node(gf, ranges.back().first)->op == GGML_OP_MUL_MAT) {
            ranges.push_back({i, i + 1});
        } else {
            ranges.back().second = i + 1;
        }
    }
    GraphViews pieces;
    if (!pieces.build(gf, ranges, /*keyed=*/false)) return GGML_STATUS_ALLOC_FAILED;
    for (size_t i = 0; i < pieces.size(); ++i) {
        const ggml_status st = ggml_backend_graph_compute(runner_->backend(), pieces.view(i));
        if (st != GGML_STATUS_SUCCESS) return st;
    }
    return GGML_STATUS_SUCCESS;
}

void Engine::check_cancel() {
    runner_->throw_if_cancelled();
}

void Engine::eval(const int32_t * toks, int32_t n, bool logits_all, bool verify, bool decode, const int32_t * parents) {
    const int32_t n_past = this->n_past();
    if (n_past + n > kv_.n_ctx) {
        throw Error(LUCE_ERR_CONTEXT, "context full: " + std::to_string(n_past) + " + " + std::to_string(n) +
                                          " tokens exceed the capacity of " + std::to_string(kv_.n_ctx));
    }
    // the step and verify slots' graphs attend in steps of step_kv_pad cells, prompts' in kCtxPad
    const int pad = n == 1 || verify ? params_.step_kv_pad : kCtxPad;
    GraphShape shape{n, std::min(kv_.n_ctx, round_up(n_past + n, pad)), logits_all && n > 1, verify && m_.hp.hybrid()};
    // a verify graph leaves the recurrent state untouched, so a failure needs no replay
    const bool replay_on_failure = m_.hp.hybrid() && !replaying_ && !shape.verify;
    logits_.invalidate();   // the logits tensor is rewritten (or freed) below: unread rows are lost
    // Decode steps and verifications run on the small-batch kernels; a short prompt stays on ggml's,
    // so it fills the cache exactly as llama.cpp would.
    GraphSlot & slot = slot_for(n, verify);
    const bool on_kernels = (verify || decode) && slot.kernels;
    ForwardGraph * g = nullptr;
    if (parents && m_.hp.hybrid() && tree_by_nodes(slot, n)) {   // the recurrent layers run the tree's nodes
        tree_nodes_ = tree_nodes(parents, n, m_.hp.ssm_conv);
        shape.tree_nodes = true;
        g = &select_graph(slot, shape, on_kernels);
        // On a GPU only the small-batch runner computes the node recurrence (ggml would run a chain):
        // where it cannot take this graph, the paths run instead.
        if (!runner_->on_cpu() && !slot.piecewise) {
            shape.tree_nodes = false, tree_nodes_refused_ = true;
            g = nullptr;
        }
    }
    if (parents && m_.hp.hybrid() && !shape.tree_nodes) {   // the recurrent layers run the tree's paths
        tree_paths_ = tree_paths(parents, n);
        shape.tree_paths = tree_paths_.n_paths;
        shape.tree_depth = tree_paths_.depth;
    }
    if (!g) g = &select_graph(slot, shape, on_kernels && slot.kernels->wants(n));
    set_inputs(*g, toks, n, parents);

    const ggml_status status = slot.piecewise ? slot.kernels->compute(g->gf)
                             : debug_piecewise_ ? compute_in_pieces(g->gf, slot.kind)
                                                : runner_->compute_status(g->gf, slot.kind);
    if (slot.piecewise) {
        stats_.n_small_batch_evals++;
        if (slot.kernels->last_ran() == SmallBatchRunner::Ran::replayed) stats_.n_step_graph_replays++;
    }
    if (status != GGML_STATUS_SUCCESS && replay_on_failure) replay_context();
    // Cancelled: nothing is committed; cells written past the context stay hidden by the mask.
    runner_->throw_on(status, "graph computation");

    read_outputs(*g, logits_all, verify, replay_on_failure);
    tokens_.insert(tokens_.end(), toks, toks + n);
}

Engine::GraphSlot & Engine::slot_for(int n_tokens, bool verify) {
    if (n_tokens == 1) return step_;
    if (!verify) return batch_;
    size_t pick = 0;   // the slot that ran this width last, else the least recently used
    for (size_t i = 0; i < verify_.size(); ++i) {
        const GraphSlot & s = verify_[i];
        if (s.graph.graph && s.graph.key.shape.n_tokens == n_tokens) {
            pick = i;
            break;
        }
        if (verify_used_[i] < verify_used_[pick]) pick = i;
    }
    verify_used_[pick] = ++verify_uses_;
    return verify_[pick];
}

bool Engine::tree_by_nodes(const GraphSlot & slot, int32_t n) const {
    if (params_.tree_recurrence == LUCE_TREE_RECURRENCE_PATHS || tree_nodes_refused_) return false;
    // the CPU's op by nodes is luce's own arithmetic, not ggml's gated_delta_net: paths unless asked
    if (runner_->on_cpu()) return params_.tree_recurrence == LUCE_TREE_RECURRENCE_NODES;
    return slot.kernels && slot.kernels->takes_tree_nodes(m_.hp.ssm_state, n);
}

ForwardGraph & Engine::select_graph(GraphSlot & slot, const GraphShape & shape, bool piecewise) {
    const bool built = runner_->use(slot.graph, GraphKey{shape, piecewise}, slot.kind,
                                    [&] { return "a batch of " + std::to_string(shape.n_tokens) + " tokens"; },
                                    [&] {
                                        slot.piecewise = false;
                                        return build_graph(m_, kv_, shape);
                                    },
                                    [&](ForwardGraph & g) {
                                        if (!piecewise) return;
                                        for (ggml_tensor * t : {g.tokens, g.pos, g.kv_idx, g.cap_idx, g.mask, g.path_rows, g.node_slot, g.tree_visits,
                                                               g.tree_windows}) {
                                            slot.kernels->place_input(runner_->sched(slot.kind), t);
                                        }
                                    });
    if (built) slot.piecewise = piecewise && slot.kernels->prepare(runner_->sched(slot.kind), slot.graph.graph->gf, shape.n_tokens > 1);
    (built ? stats_.n_graph_builds : stats_.n_graph_reuses)++;
    return *slot.graph.graph;
}

// Tokens, positions (one per token, or M-RoPE's four blocks t, h, w = position, e = 0 for text),
// cache and capture-ring rows, and the mask: token i sees cells 0..n_past+i (causal), or with
// parents (a tree verify) the context, its ancestors and itself at position n_past + depth(i).
void Engine::set_inputs(ForwardGraph & g, const int32_t * toks, int32_t n, const int32_t * parents) {
    const int32_t n_past = this->n_past();
    const size_t n_pos_blocks = size_t(ggml_nelements(g.pos) / n);
    std::vector<int32_t> pos(static_cast<size_t>(n) * n_pos_blocks, 0);
    std::vector<int64_t> rows(static_cast<size_t>(n));
    std::vector<int32_t> depth(parents ? size_t(n) : 0, 0);
    for (int32_t i = 0; i < n; ++i) {
        if (parents && i > 0) depth[size_t(i)] = depth[size_t(parents[i])] + 1;
        rows[size_t(i)] = n_past + i;
        const int32_t p = n_past + (parents ? depth[size_t(i)] : i);
        for (size_t b = 0; b < std::min<size_t>(n_pos_blocks, 3); ++b) pos[b * size_t(n) + size_t(i)] = p;
    }
    ggml_backend_tensor_set(g.tokens, toks, 0, size_t(n) * sizeof(int32_t));
    ggml_backend_tensor_set(g.pos, pos.data(), 0, pos.size() * sizeof(int32_t));
    ggml_backend_tensor_set(g.kv_idx, rows.data(), 0, rows.size() * sizeof(int64_t));
    if (g.cap_idx) {
        for (auto & r : rows) r %= kv_.capture.ring;
        ggml_backend_tensor_set(g.cap_idx, rows.data(), 0, rows.size() * sizeof(int64_t));
    }
    if (g.path_rows) {
        ggml_backend_tensor_set(g.path_rows, tree_paths_.path_rows.data(), 0, tree_paths_.path_rows.size() * sizeof(int32_t));
        ggml_backend_tensor_set(g.node_slot, tree_paths_.node_slot.data(), 0, tree_paths_.node_slot.size() * sizeof(int32_t));
    }
    if (g.tree_visits) {
        ggml_backend_tensor_set(g.tree_visits, tree_nodes_.visits.data(), 0, tree_nodes_.visits.size() * sizeof(int32_t));
        ggml_backend_tensor_set(g.tree_windows, tree_nodes_.window_rows.data(), 0, tree_nodes_.window_rows.size() * sizeof(int32_t));
    }
    if (parents) {
        tree_mask(mask_buf_, g.shape.n_kv, n, n_past, parents);
    } else {
        causal_mask(mask_buf_, g.shape.n_kv, n, n_past + 1);
    }
    ggml_backend_tensor_set(g.mask, mask_buf_.data(), 0, mask_buf_.size() * sizeof(uint16_t));
}

// Per row only the argmax and the sum come back (a sum is finite iff every logit is; on the CPU the
// argmax is -1 for such a row instead); whole rows are downloaded when read.
void Engine::read_outputs(ForwardGraph & g, bool logits_all, bool verify, bool replay_on_failure) {
    const int32_t n_out = int32_t(g.logits->ne[1]);
    argmax_buf_.resize(size_t(n_out));
    sums_buf_.resize(size_t(n_out));
    ggml_backend_tensor_get(g.argmax, argmax_buf_.data(), 0, size_t(n_out) * sizeof(int32_t));
    if (g.logit_sums) ggml_backend_tensor_get(g.logit_sums, sums_buf_.data(), 0, size_t(n_out) * sizeof(float));
    for (int32_t i = 0; i < n_out; ++i) {
        const bool finite = g.logit_sums ? std::isfinite(sums_buf_[size_t(i)]) : argmax_buf_[size_t(i)] >= 0;
        if (!finite) {
            if (!logits_all || verify) logits_.clear();
            if (replay_on_failure) replay_context();   // undo the recurrent states' advance
            throw Error(LUCE_ERR_COMPUTE, "the model produced non-finite logits (NaN/Inf) at position " +
                                              std::to_string(n_past() + i) + "; the weights or the KV cache type may be unsuitable");
        }
    }
    // A prompt kept row by row spans several evaluations: its rows are downloaded as they come.
    const bool append = logits_all && !verify;
    logits_.add_device_rows(g.logits, argmax_buf_.data(), n_out, append, /*fetch_now=*/append);
}

void Engine::prefill(const int32_t * toks, int32_t n, bool logits_all, luce_progress_cb cb, void * ud) {
    check_no_pending();
    if (n <= 0 || !toks) throw Error(LUCE_ERR_INVALID_ARG, "prefill needs at least one token");
    for (int32_t i = 0; i < n; ++i) {
        if (toks[i] < 0 || toks[i] >= m_.hp.n_vocab) {
            throw Error(LUCE_ERR_INVALID_ARG, "token id " + std::to_string(toks[i]) + " at index " + std::to_string(i) +
                                                  " is outside the vocabulary (" + std::to_string(m_.hp.n_vocab) + ")");
        }
    }
    if (n_past() + n > kv_.n_ctx) {
        throw Error(LUCE_ERR_CONTEXT, "prompt of " + std::to_string(n) + " tokens does not fit: the context holds " +
                                          std::to_string(n_past()) + " of " + std::to_string(kv_.n_ctx) +
                                          " tokens (raise --max-ctx or start a new conversation)");
    }
    logits_.clear();
    const auto t0 = clock_type::now();
    int32_t done = 0;
    try {
        while (done < n) {
            check_cancel();
            const int32_t nb = std::min(params_.n_batch, n - done);
            eval(toks + done, nb, logits_all);
            done += nb;
            if (cb && !cb(done, n, ud)) throw Error(LUCE_ERR_CANCELLED, "cancelled by the progress callback");
        }
    } catch (...) {
        stats_.n_prefill_tokens += done;
        stats_.prefill_ms += ms_since(t0);
        if (done < n) logits_.clear();   // partial prompt: no valid logits
        throw;
    }
    stats_.n_prefill_tokens += n;
    stats_.prefill_ms += ms_since(t0);
}

int32_t Engine::argmax_row(int32_t i) const {
    if (i < 0) i += n_logits();
    if (i < 0 || i >= n_logits()) throw Error(LUCE_ERR_INVALID_ARG, "no logits row " + std::to_string(i));
    return logits_.argmax(i);
}

void Engine::copy_logits(int32_t first, int32_t n, float * out) {
    if (first < 0 || n < 0 || first + n > n_logits()) {
        throw Error(LUCE_ERR_INVALID_ARG, "logits rows " + std::to_string(first) + ".." + std::to_string(first + n - 1) +
                                              " are not among the " + std::to_string(n_logits()) + " kept");
    }
    const size_t n_vocab = size_t(m_.hp.n_vocab);
    for (int32_t i = 0; i < n; ++i) {
        const float * r = logits_.row(first + i);
        if (!r) throw Error(LUCE_ERR_STATE, "logits row " + std::to_string(first + i) + " is no longer available");
        std::copy(r, r + n_vocab, out + size_t(i) * n_vocab);
    }
}

// Plain greedy needs only the argmax the device already computed.
static bool is_plain_greedy(const luce_sampling_params & sp) {
    return sp.temperature <= 0.0f && (sp.repeat_penalty == 1.0f || sp.penalty_last_n == 0) &&
           (sp.presence_penalty == 0.0f || sp.penalty_last_n == 0);
}

int32_t Engine::sample(const luce_sampling_params & sp, int32_t row) {
    if (n_logits() == 0) throw Error(LUCE_ERR_STATE, "no logits to sample from: prefill or step first");
    if (is_plain_greedy(sp)) return argmax_row(row);
    const float * l = logits_row(row);
    if (!l && n_logits() == 1 && (row == -1 || row == 0) && n_past() > 0) {
        // the row was dropped by an evaluation that failed or was cancelled: recompute it
        truncate(n_past());
        l = logits_row(-1);
    }
    if (!l) throw Error(LUCE_ERR_STATE, "no logits row " + std::to_string(row) + " to sample from");
    // Penalties look at the tokens before the predicted one: for row i of a pending verify, the
    // context and provisional tokens 0..i (not the provisional tokens after it).
    int32_t history = n_past();
    if (pending_ > 0) history = n_past() - pending_ + (row < 0 ? row + n_logits() : row) + 1;
    if (!tree_parents_.empty()) {   // a tree node's history: the context, then its root path
        const std::vector<int32_t> h = tree_history(row < 0 ? row + n_logits() : row, sp.penalty_last_n);
        return sample_token(l, m_.hp.n_vocab, sp, h.data(), int32_t(h.size()), rng_);
    }
    return sample_token(l, m_.hp.n_vocab, sp, tokens_.data(), history, rng_);
}

void Engine::step(const luce_sampling_params & sp, luce_step_result & out) {
    out = {};
    check_no_pending();
    if (n_logits() == 0) throw Error(LUCE_ERR_STATE, "no logits to sample from: prefill or step first");
    if (n_past() + 1 > kv_.n_ctx) {
        throw Error(LUCE_ERR_CONTEXT, "context full (" + std::to_string(kv_.n_ctx) + " tokens); raise --max-ctx");
    }
    check_cancel();
    auto t0 = clock_type::now();
    const int32_t token = sample(sp, -1);
    out.sample_ms = ms_since(t0);
    stats_.sample_ms += out.sample_ms;
    t0 = clock_type::now();
    eval(&token, 1, false, /*verify=*/false, /*decode=*/true);
    out.decode_ms = ms_since(t0);
    stats_.decode_ms += out.decode_ms;
    stats_.n_decode_tokens += 1;
    out.n_tokens = 1;
    out.tokens[0] = token;
    out.provenance[0] = LUCE_FROM_TARGET;
}

void Engine::truncate(int32_t n) {
    check_no_pending();
    if (n < 0 || n > n_past()) {
        throw Error(LUCE_ERR_INVALID_ARG, "cannot truncate to " + std::to_string(n) + " tokens: the context has " +
                                              std::to_string(n_past()));
    }
    // Cells past n stay in memory but the mask hides them; the next writes overwrite them.
    tokens_.resize(size_t(n));
    logits_.clear();
    if (m_.hp.hybrid()) {
        // Recurrent state cannot be rewound: resume from the nearest checkpoint at or before n
        // (or the start) and recompute the tokens after it.
        checkpoints_.drop_after(n);
        std::vector<int32_t> keep(tokens_);
        const TurnCheckpoints::Checkpoint * last = checkpoints_.last();
        if (!last) {
            replay_context();
            return;
        }
        const TurnCheckpoints::Checkpoint & cp = *last;
        tokens_.resize(size_t(cp.n_past));
        kv_.rec.load(cp.state);
        if (cp.n_past == n) {
            if (!cp.logits.values.empty()) {
                logits_.restore(LogitRows::Saved(cp.logits));
            } else {   // saved without logits: the last token's logits need the state before it
                tokens_ = keep;
                replay_context();
            }
            return;
        }
        replay_tokens(keep.data() + cp.n_past, size_t(n - cp.n_past));
        return;
    }
    if (n > 0) {
        const int32_t last = tokens_.back();
        tokens_.pop_back();
        try {
            eval(&last, 1, false);
        } catch (...) {
            tokens_.push_back(last);   // keep the context whole; only the logits are missing
            throw;
        }
    }
}

void Engine::check_no_pending() const {
    if (pending_ > 0) throw Error(LUCE_ERR_STATE, "a verification is pending: commit it first");
}

void Engine::begin_verify(const int32_t * toks, int32_t n, bool keep_pre_logits) {
    check_no_pending();
    if (n < 1 || n > kv_.rec.n_verify_max) {
        throw Error(LUCE_ERR_INVALID_ARG, "verify takes 1.." + std::to_string(kv_.rec.n_verify_max) + " tokens, not " + std::to_string(n));
    }
    for (int32_t i = 0; i < n; ++i) {
        if (toks[i] < 0 || toks[i] >= m_.hp.n_vocab) throw Error(LUCE_ERR_INVALID_ARG, "token id outside the vocabulary");
    }
    check_cancel();
    pre_verify_logits_ = {};
    if (n_logits() > 0) {
        if (keep_pre_logits) {
            pre_verify_logits_ = logits_.save_last();
        } else {
            pre_verify_logits_.argmax = logits_.argmax(n_logits() - 1);
        }
    }
}

void Engine::verify(const int32_t * toks, int32_t n, bool keep_pre_logits) {
    begin_verify(toks, n, keep_pre_logits);
    try {
        eval(toks, n, /*logits_all=*/true, /*verify=*/true);
    } catch (...) {
        logits_.restore(LogitRows::Saved(pre_verify_logits_));
        throw;
    }
    pending_ = n;
}

void Engine::commit(int32_t k) {
    if (pending_ == 0) throw Error(LUCE_ERR_STATE, "no verification to commit");
    if (k < 0 || k > pending_) {
        throw Error(LUCE_ERR_INVALID_ARG, "commit keeps 0.." + std::to_string(pending_) + " tokens, not " + std::to_string(k));
    }
    if (!tree_parents_.empty() && k > 0) {
        throw Error(LUCE_ERR_STATE, "a tree verify is pending: keep a path of it with commit_path (commit keeps only 0)");
    }
    tree_parents_.clear();
    const size_t n0 = tokens_.size() - size_t(pending_);
    const HParams & hp = m_.hp;
    if (hp.hybrid() && k > 0) {
        if (kv_.rec.replay) {
            replay_recurrent(k);
        } else {
            restore_recurrent_after(k);
        }
    }
    tokens_.resize(n0 + size_t(k));   // KV cells past this are hidden by the mask
    if (k > 0) {
        logits_.keep_only(k - 1);
    } else {
        logits_.restore(std::move(pre_verify_logits_));
    }
    pending_ = 0;
}

// Recurrent state after provisional token k-1 of the pending verify, copied on the device by a
// small graph: the state from snapshot slot pending-k, the conv window from the Kc-1 inputs that
// end at token k-1.
void Engine::restore_recurrent_after(int32_t k) {
    const HParams & hp = m_.hp;
    const int64_t C = hp.conv_channels(), W = hp.ssm_conv - 1;
    ggml_init_params ip = {ggml_tensor_overhead() * size_t(8 * hp.n_layer + 16) + ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    if (!ctx) throw Error(LUCE_ERR_MEMORY, "cannot create the rollback graph");
    ggml_cgraph * gf = ggml_new_graph(ctx);
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!hp.is_recurrent(il)) continue;
        ggml_tensor * state = kv_.rec.ssm[size_t(il)];
        ggml_tensor * snap = kv_.rec.ssm_snap[size_t(il)];
        ggml_tensor * slot = ggml_view_1d(ctx, snap, ggml_nelements(state), size_t(pending_ - k) * ggml_nbytes(state));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, slot, ggml_view_1d(ctx, state, ggml_nelements(state), 0)));
        ggml_tensor * hist = kv_.rec.conv_hist[size_t(il)];
        ggml_tensor * win = ggml_view_2d(ctx, hist, W, C, hist->nb[1], size_t(k) * ggml_element_size(hist));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, win, kv_.rec.conv[size_t(il)]));
    }
    // every tensor of this graph is a view of cache memory: bind them to its buffer
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * t = ggml_graph_node(gf, i);
        for (int j = -1; j < GGML_MAX_SRC; ++j) {
            ggml_tensor * v = j < 0 ? t : t->src[j];
            if (v && v->view_src && !v->buffer) ggml_backend_view_init(v);
        }
    }
    const ggml_status st = ggml_backend_graph_compute(runner_->backend(), gf);
    ggml_free(ctx);
    if (st != GGML_STATUS_SUCCESS) throw Error(LUCE_ERR_COMPUTE, "restoring the recurrent state failed on " + m_.device_name);
}

// Recurrent state after provisional token k-1 of the pending verify, recomputed from the state
// before it: the replay graph of k tokens (add_qwen35_replay) on its own scratch, reserved at start
// for the longest verify, one graph per k (graph_per_length.h).
void Engine::replay_recurrent(int32_t k) {
    ReplayGraph & rg = graph_per_length(replay_graphs_, replay_alloc_, k,
                                        [&] { return std::make_unique<ReplayGraph>(m_, kv_, k); },
                                        "the rollback replay's scratch", m_.device_name);
    const ggml_status st = ggml_backend_graph_compute(runner_->backend(), rg.gf);
    if (st != GGML_STATUS_SUCCESS) throw Error(LUCE_ERR_COMPUTE, "replaying the recurrent state failed on " + m_.device_name);
}

void Engine::set_capture(const int32_t * layers, int32_t n, bool output_convention, int32_t ring) {
    check_no_pending();
    logits_.invalidate();
    reset_graphs();   // graphs change shape with the capture set
    row_moves_.clear();   // their ring aliases too
    kv_.capture.set(m_, layers, n, output_convention, ring);
}

void Engine::check_captured(int32_t pos, int32_t n) const {
    const auto & cap = kv_.capture;
    if (cap.layers.empty()) throw Error(LUCE_ERR_STATE, "hidden-state capture is off");
    const int32_t committed = n_past() - pending_;
    if (n < 1 || pos < 0 || int64_t(pos) + n > committed || pos < committed - cap.ring) {
        throw Error(LUCE_ERR_INVALID_ARG, "positions " + std::to_string(pos) + ".." + std::to_string(int64_t(pos) + n - 1) +
                                              " are not in the capture ring");
    }
}

ggml_tensor * Engine::capture_ring(int layer) const { return kv_.capture.of_layer(layer); }

void Engine::captured(int32_t pos, float * out) const {
    check_captured(pos, 1);
    kv_.capture.read(pos, m_.hp.n_embd, out);
}

void Engine::checkpoint() {
    check_no_pending();
    if (!m_.hp.hybrid()) return;
    TurnCheckpoints::Checkpoint cp;
    cp.n_past = n_past();
    kv_.rec.save(cp.state);
    cp.logits = logits_.save_last();
    checkpoints_.add(std::move(cp));
}

// Evaluates tokens on top of the current state in micro-batches (the last one leaves logits).
void Engine::replay_tokens(const int32_t * toks, size_t n) {
    replaying_ = true;
    try {
        for (size_t done = 0; done < n;) {
            const int32_t nb = int32_t(std::min<size_t>(size_t(params_.n_batch), n - done));
            eval(toks + done, nb, false);
            done += size_t(nb);
            stats_.n_replayed_tokens += nb;
        }
    } catch (...) {
        replaying_ = false;
        tokens_.clear();   // the state cannot be trusted: start over with an empty context
        checkpoints_.clear();
        kv_.rec.clear();
        throw;
    }
    replaying_ = false;
}

void Engine::replay_context() {
    std::vector<int32_t> context;
    context.swap(tokens_);
    kv_.rec.clear();
    logits_.clear();
    replay_tokens(context.data(), context.size());
}

void Engine::adopt_state(std::vector<int32_t> tokens, LogitRows::Saved last) {
    tokens_ = std::move(tokens);
    checkpoints_.clear();   // states of another context
    pending_ = 0;
    if (last.argmax >= 0) {
        logits_.restore(std::move(last));
    } else {
        logits_.clear();
    }
}

void Engine::drop_context() {
    tokens_.clear();
    logits_.clear();
    checkpoints_.clear();
    pending_ = 0;
    kv_.rec.clear();
}

luce_stats Engine::stats() const {
    luce_stats s = stats_;
    s.compute_buffer_bytes = plan_.compute;
    return s;
}

} // namespace luce
