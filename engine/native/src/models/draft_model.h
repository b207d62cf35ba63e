// draft_model.h — a DFlash draft model (docs/gguf-formats.md §1.5, §3.2; docs/algorithms.md §1.1–1.5) bound to
// its target: hyperparameters and weights of either GGUF dialect (llama.cpp arch `dflash`,
// lucebox `dflash-draft` / `qwen35-dflash-draft`), validated against the target model, plus the
// draft context of design (A): a per-layer KV ring of injected context K/V and the block forward.
#pragma once

#include "graph.h"
#include "graph_runner.h"
#include "model.h"
#include "small_batch_runner.h"

#include "ggml-backend.h"
#include "ggml.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace luce {

class Engine;

struct DraftHParams {
    std::string arch;
    bool lucebox = false;            // dialect: false = llama.cpp `dflash`, true = lucebox
    int n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_ctx_train = 0;
    float rope_freq_base = 10000.0f, rms_eps = 1e-6f;
    int rope_type = GGML_ROPE_TYPE_NEOX;   // NEOX, or MROPE with non-degenerate sections
    int rope_sections[4] = {0, 0, 0, 0};
    int block_size = 16;
    int mask_token_id = -1;
    std::vector<int> capture;        // internal convention: i = output of target layer i
    std::vector<int> capture_file;   // as stored (llama: L = i + 1; lucebox: id = i), or derived (below)
    int n_target_layers = 0;         // lucebox files with A.dflash.n_target_layers and no ids (else 0)
    int sliding_window = 0;          // 0 = no SWA layer
    std::vector<bool> swa;           // per layer: true = sliding-window attention
    bool causal = false;             // attention.causal (the DFlash drivers use non-causal)
    bool any_swa() const {
        for (bool b : swa) if (b) return true;
        return false;
    }
    bool mrope() const { return rope_type == GGML_ROPE_TYPE_MROPE; }
};

struct DraftModel {
    std::string path;
    DraftHParams hp;
    const Model * target = nullptr;  // must outlive the draft: its embedding / LM head are used
    ggml_backend_dev_t dev = nullptr;

    ggml_tensor *fc = nullptr, *hidden_norm = nullptr, *output_norm = nullptr, *rope_freqs = nullptr;
    ggml_tensor *tok_embd = nullptr, *output = nullptr;   // resolved: the draft's own, else the target's
    bool own_embd = false, own_output = false;
    std::vector<LayerWeights> layers;               // attn_*, q/k norms, ffn_norm (= FFN input norm), ffn_*
    std::vector<ggml_tensor *> post_attn_norm;      // llama dialect only: optional norm of the attention output

    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buffer = nullptr;
    std::unique_ptr<GgufFile> file;
    uint64_t weight_bytes = 0, n_params = 0;

    int n_vocab() const;
    ~DraftModel();
};

// Loads and validates a draft for `target`; throws luce::Error (LUCE_ERR_DRAFT_MISMATCH when the
// file is a valid draft for another target). load_weights=false (planning) runs exactly the same
// validation and sizes every weight but allocates and reads nothing; then `target` may itself be
// a plan-only model, and the result can be planned (plan_draft) but not run.
std::unique_ptr<DraftModel> load_draft_model(const std::string & path, const Model & target, bool use_mmap,
                                             bool load_weights = true);

// The draft's ring size for a requested n_ctx_draft (<= 0: the default 4096).
int draft_ring_size(int n_ctx_draft);

// Memory of a draft in use, before anything is allocated (the weights come from the loaded or
// plan-only DraftModel; the rest from its hyperparameters).
struct DraftPlan {
    int n_ctx_draft = 0, capture_ring = 0;
    uint64_t weights = 0;
    uint64_t kv = 0;            // exactly what DraftContext allocates for its K/V
    uint64_t compute = 0;       // estimate, an upper bound of DraftContext::compute_bytes() (formula in draft_model.cpp)
    uint64_t capture_ring_bytes = 0;   // the target engine's hidden-state capture ring for this draft
    uint64_t total() const { return weights + kv + compute + capture_ring_bytes; }
};
uint64_t draft_kv_bytes(const DraftHParams & hp, int n_ctx_draft);
uint64_t draft_compute_bytes_estimate(const DraftModel & d, int n_ctx_draft);
uint64_t draft_capture_ring_bytes(const DraftHParams & hp, int capture_ring);
DraftPlan plan_draft(const DraftModel & d, int n_ctx_draft, int capture_ring);

// Design (A) draft context: per draft layer a KV cache of rows [0, B) = block scratch and rows
// B + (p mod n_ctx_draft) = injected context position p. Inject and draft graphs are built once
// per shape and replayed (each kind has a scheduler of its own so they do not evict each other).
class DraftContext {
public:
    // small_batch_kernels / step_graphs: on CUDA, the block and a speculative step's injection run on
    // luce's small-batch kernels, each captured once as one CUDA graph (luce_engine_params' flags).
    // kv_pad: the block attends the ring in steps of this many slots (a multiple of kCtxPad; <= 0: kCtxPad)
    DraftContext(DraftModel & d, int n_ctx_draft, bool small_batch_kernels = false, bool step_graphs = false,
                 int kv_pad = 0);   // throws
    ~DraftContext();

    void reset();
    // Features [n][Nf·E] (row-major, host) of context positions start..start+n-1.
    void inject(const float * features, int32_t n, int32_t start);
    // The same from the target engine's capture rings, read on the device (no host round trip).
    void inject_captured(const Engine & eng, int32_t start, int32_t n);
    // Block [x0, M × (B-1)] at positions pos0..pos0+B-1; writes the greedy tokens of rows 1..B-1.
    void run(int32_t x0, int32_t pos0, int32_t * out_tokens);
    void copy_logits(int32_t first, int32_t n, float * out) const;
    // Top-k tokens and full-vocabulary log-probabilities of logits rows first..first+n-1 at a
    // temperature, computed on the device (luce_draft_top_candidates): [n][k] each, rows sorted.
    void top_candidates(int32_t first, int32_t n, int32_t k, float temperature, int32_t * tokens, float * logprobs);
    int32_t n_logits() const { return have_logits_ ? B_ : 0; }

    int n_ctx_draft() const { return W_; }
    uint64_t kv_bytes() const { return kv_bytes_; }
    uint64_t compute_bytes() const { return compute_bytes_; }
    int64_t n_graph_builds() const { return runner_.n_builds(); }
    int64_t n_graph_reuses() const { return runner_.n_reuses(); }
    int64_t n_small_batch_evals() const { return n_small_batch_evals_; }
    int64_t n_step_graph_replays() const { return n_step_graph_replays_; }

private:
    struct Graph {
        ggml_context * ctx = nullptr;
        ggml_cgraph * gf = nullptr;
        ggml_tensor *feats = nullptr, *tokens = nullptr, *pos = nullptr, *idx = nullptr;
        ggml_tensor *ring_rows = nullptr;      // inject from capture rings: ring row of each position
        ggml_tensor *mask = nullptr, *mask_swa = nullptr, *logits = nullptr, *argmax = nullptr;
        ~Graph() { if (ctx) ggml_free(ctx); }
    };
    // Top-k over the draft graph's logits: the temperature is an input, the rest is the key.
    struct TopKGraph {
        ggml_context * ctx = nullptr;
        ggml_cgraph * gf = nullptr;
        ggml_tensor *temperature = nullptr, *tokens = nullptr, *logprobs = nullptr;
        ~TopKGraph() { if (ctx) ggml_free(ctx); }
    };
    struct TopKKey {
        int32_t first = 0, n = 0, k = 0;
        int64_t draft_build = -1;        // the draft graph whose logits it reads (rebuilt: new tensors)
        const void * logits = nullptr;   // and where they are
        bool operator==(const TopKKey & o) const {
            return first == o.first && n == o.n && k == o.k && draft_build == o.draft_build && logits == o.logits;
        }
    };
    // the runner's schedulers; a speculative step's injection (B rows) and a longer one (a prompt's,
    // a probe's catch-up after plain steps) each keep a graph, so neither rebuilds the other's
    enum Kind { kInject, kDraft, kInjectRing, kTopK, kInjectWide, kKinds };
    void build_top_k(TopKGraph & g, const TopKKey & key) const;
    void build_inject(Graph & g, int n, const std::vector<ggml_tensor *> * rings = nullptr) const;
    void build_draft(Graph & g, int n_kv_ctx) const;
    Graph & inject_graph(int n);
    Graph & inject_ring_graph(Kind kind, int n, const std::vector<ggml_tensor *> & rings, uint64_t generation);
    int32_t wide_rows(int32_t nc) const;
    // Positions, block/ring rows, compute, slot bookkeeping of one injected chunk (features set).
    void finish_inject(Graph & g, Kind kind, int32_t start, int32_t nc, int32_t rows);
    int32_t inject_rows(int32_t nc) const;
    void update_compute_bytes();
    Graph & draft_graph(int n_kv_ctx);
    // The small-batch runner of a graph kind (null when it has none), and whether its current graph
    // was prepared for it; compute() runs a graph of that kind either way.
    struct Kernels {
        std::unique_ptr<SmallBatchRunner> runner;
        bool prepared = false;
    };
    Kernels * kernels_for(Kind kind);
    void place_inputs(Kind kind, int n_rows, std::initializer_list<ggml_tensor *> inputs);
    void prepare_kernels(Kind kind, int n_rows, ggml_cgraph * gf);
    void compute(ggml_cgraph * gf, Kind kind, const char * what);
    ggml_tensor * rope(ggml_context * ctx, ggml_tensor * x, ggml_tensor * pos) const;
    void set_positions(ggml_tensor * t, int32_t first, int32_t n) const;
    void reserve();

    DraftModel & d_;
    int W_ = 0, B_ = 0, chunk_ = 0, kv_pad_ = 0;
    GraphRunner runner_;
    ggml_context * cache_ctx_ = nullptr;
    ggml_backend_buffer_t cache_buf_ = nullptr;
    std::vector<ggml_tensor *> k_, v_;    // per layer F32 [D·Hkv, B + W]
    ggml_tensor * ramp_ = nullptr;        // [n_vocab] = n_vocab - i (tie-breaking of the argmax)
    GraphRunner::Cached<Graph, int> inject_;          // key: rows
    GraphRunner::Cached<Graph, int> draft_;           // key: attended context rows
    // key: rows, the generation of the rings read (Engine::capture_generation)
    GraphRunner::Cached<Graph, std::pair<int, uint64_t>> inject_ring_;
    GraphRunner::Cached<Graph, std::pair<int, uint64_t>> inject_wide_;   // the same, past B rows
    GraphRunner::Cached<TopKGraph, TopKKey> top_k_;
    int64_t draft_builds_ = 0;            // draft graphs built so far (top_k_'s key)
    std::vector<int32_t> slot_pos_;       // position held by ring slot s, -1 = none
    int hi_slot_ = 0;                     // slots [0, hi) have been written at least once
    bool have_logits_ = false;
    uint64_t kv_bytes_ = 0, compute_bytes_ = 0;
    std::vector<float> mask_buf_, mask_swa_buf_;
    Kernels block_kernels_, inject_kernels_;   // kDraft's and kInjectRing's
    int64_t n_small_batch_evals_ = 0, n_step_graph_replays_ = 0;
};

} // namespace luce

struct luce_draft {
    std::unique_ptr<luce::DraftModel> model;
    std::unique_ptr<luce::DraftContext> ctx;
    ~luce_draft() { ctx.reset(); model.reset(); }
};
