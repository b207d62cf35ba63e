// luce.h — C API of the luce inference engine (the native core of luce-chat).
//
// Style follows llama.h: opaque handles, plain parameter structs with *_default_params(),
// integer status codes, and luce_last_error() for a readable message about the last failure
// on the calling thread. Nothing here is Python-specific.
//
// Threading: a luce_engine is used by one thread at a time, except luce_engine_cancel(),
// which may be called from any thread at any time.
#ifndef LUCE_H
#define LUCE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

// Export macro (as llama.h's LLAMA_API): a shared build defines LUCE_SHARED for itself and its
// users and LUCE_BUILD while compiling luce; the static library (what luce-chat links) needs neither.
#ifdef LUCE_SHARED
#    if defined(_WIN32) && !defined(__MINGW32__)
#        ifdef LUCE_BUILD
#            define LUCE_API __declspec(dllexport)
#        else
#            define LUCE_API __declspec(dllimport)
#        endif
#    else
#        define LUCE_API __attribute__((visibility("default")))
#    endif
#else
#    define LUCE_API
#endif

// ---- status codes -------------------------------------------------------------------------
typedef enum luce_status {
    LUCE_OK              = 0,
    LUCE_ERR_INVALID_ARG = 1,   // a parameter is out of range
    LUCE_ERR_IO          = 2,   // file missing or unreadable
    LUCE_ERR_FORMAT      = 3,   // not a GGUF / malformed / truncated
    LUCE_ERR_UNSUPPORTED = 4,   // valid GGUF, but an architecture or tensor type we do not run
    LUCE_ERR_MODEL       = 5,   // key or tensor missing, or wrong shape
    LUCE_ERR_DEVICE      = 6,   // device not found / backend failure
    LUCE_ERR_MEMORY      = 7,   // the memory plan does not fit the device
    LUCE_ERR_CONTEXT     = 8,   // the context window is full
    LUCE_ERR_CANCELLED   = 9,   // luce_engine_cancel() interrupted the call
    LUCE_ERR_STATE       = 10,  // call not valid in the current engine state
    LUCE_ERR_COMPUTE     = 11,  // graph computation failed or produced non-finite logits
    LUCE_ERR_DRAFT_MISMATCH = 12, // a valid draft model that does not fit the target (hidden size, layers, vocabulary)
    LUCE_ERR_STATE_MISMATCH = 13, // a valid state file of another model, KV type or context size
    LUCE_ERR_STATE_DAMAGED  = 14, // not a state file, or a truncated / corrupt one (its checksums disagree)
    LUCE_ERR_STATE_NEWER    = 15, // a state file written by a newer luce (a format version this one cannot read)
    LUCE_ERR_STATE_IO       = 16, // a state file cannot be written or read (disk full, read-only, locked by another writer)
} luce_status;

// Message describing the last error on this thread ("" if none).
LUCE_API const char * luce_last_error(void);

// ---- logging ------------------------------------------------------------------------------
// ggml's log output is captured (the last error line is appended to luce_last_error()).
// With verbose=false (default) nothing is printed to stderr.
LUCE_API void luce_set_verbose(bool verbose);

// ---- devices ------------------------------------------------------------------------------
typedef struct luce_device_info {
    char   name[64];          // "CPU", "CUDA0", ...
    char   description[128];
    char   kind[8];           // "cpu", "gpu", "igpu", "accel"
    size_t memory_free;
    size_t memory_total;
} luce_device_info;

LUCE_API int32_t luce_device_count(void);
LUCE_API luce_status luce_device_get(int32_t index, luce_device_info * out);

// ---- model --------------------------------------------------------------------------------
typedef struct luce_model luce_model;

typedef struct luce_model_params {
    const char * device;   // "auto" (first GPU, else CPU), "cpu", "cuda:N", or a device name ("CUDA0")
    bool plan_only;        // validate and describe the file, allocate and read no weights (for planning)
    bool use_mmap;         // CPU: map the file instead of copying it (default true)
    int32_t n_threads;     // CPU threads; <= 0 picks the number of cores
    bool fuse_weights;     // device copies: store projections with one input and type as one fused weight
                           // (weight_fusion.h; default true; false keeps every file tensor separate)
    bool repack_weights;   // CPU with mmap: copy the matmul weights ggml's CPU kernels repack (Q4_0, Q4_K,
                           // IQ4_NL on x86 with AVX2) into its interleaved layout, as llama.cpp does
                           // (use_extra_bufts; default true); false keeps every weight mapped from the file
} luce_model_params;

LUCE_API luce_model_params luce_model_default_params(void);

// Loads and validates a GGUF file. On failure *out is NULL and luce_last_error() names the
// file and the offending key or tensor.
LUCE_API luce_status luce_model_load(const char * path, luce_model_params params, luce_model ** out);
LUCE_API void        luce_model_free(luce_model * model);

LUCE_API const char * luce_model_arch(const luce_model * model);        // "llama", "qwen3"
LUCE_API const char * luce_model_name(const luce_model * model);        // general.name or file name
LUCE_API const char * luce_model_device(const luce_model * model);      // device name used
LUCE_API int32_t      luce_model_n_vocab(const luce_model * model);
LUCE_API int32_t      luce_model_n_embd(const luce_model * model);
LUCE_API int32_t      luce_model_n_layer(const luce_model * model);
LUCE_API int32_t      luce_model_n_ctx_train(const luce_model * model);
LUCE_API uint64_t     luce_model_n_params(const luce_model * model);
LUCE_API uint64_t     luce_model_weight_bytes(const luce_model * model);
// A one-line summary of the weight types, e.g. "Q4_1 (211), Q8_0 (1), F32 (61)".
LUCE_API const char * luce_model_type_summary(const luce_model * model);
// Projections stored fused in one weight (same input and type; device copies only, see weight_fusion.h).
LUCE_API int32_t      luce_model_n_fused(const luce_model * model);
// Weights stored in ggml's CPU repacked layout (luce_model_params.repack_weights).
LUCE_API int32_t      luce_model_n_repacked(const luce_model * model);

// ---- KV cache types -----------------------------------------------------------------------
typedef enum luce_cache_type {
    LUCE_CACHE_F16  = 0,
    LUCE_CACHE_Q8_0 = 1,
    LUCE_CACHE_Q4_0 = 2,
} luce_cache_type;

// ---- engine -------------------------------------------------------------------------------
typedef struct luce_engine luce_engine;

// How luce_engine_commit() restores a hybrid model's recurrent state after a verify (dense models
// need neither): REPLAY keeps each verified token's decay and beta and recomputes the state of the
// kept tokens from the state before the verify (1/S² of the snapshots' memory: 185 MiB against
// 2.4 GiB on a 27B qwen35 at 16 tokens); SNAPSHOT keeps the state after every verified token and
// copies one back.
typedef enum luce_rollback {
    LUCE_ROLLBACK_SNAPSHOT = 0,
    LUCE_ROLLBACK_REPLAY   = 1,
} luce_rollback;

// How a hybrid model's tree verify runs its recurrent layers (tree_verify).
typedef enum luce_tree_recurrence {
    LUCE_TREE_RECURRENCE_AUTO  = 0,   // nodes where luce's kernel can take them (CUDA with small_batch_kernels), else paths
    LUCE_TREE_RECURRENCE_PATHS = 1,   // each root-to-leaf path as its own sequence from the committed state (stock ggml ops)
    LUCE_TREE_RECURRENCE_NODES = 2,   // each node once from its parent's state (luce's kernel on CUDA, luce's op on the CPU)
} luce_tree_recurrence;

typedef struct luce_engine_params {
    int32_t n_ctx;              // context capacity in tokens (rounded up to 256); 0 = model's n_ctx_train capped at 8192
    int32_t n_batch;            // prefill micro-batch (tokens per graph launch); default 512
    luce_cache_type type_k;
    luce_cache_type type_v;
    bool    kv_rotation;        // Hadamard-rotate K/V for quantized caches (llama.cpp's default); default true
    int32_t n_verify_max;       // most tokens one luce_engine_verify() may hold for rollback; default 16
    luce_rollback rollback;     // how a commit rolls back recurrent state; default LUCE_ROLLBACK_REPLAY
    bool    small_batch_kernels; // CUDA: decode steps and verifies of 1..16 tokens run their quantized matmuls
                                 // on luce's own kernels (cuda/small_batch_gemm.h); default true; no effect elsewhere
    bool    step_graphs;        // CUDA, with small_batch_kernels: each such step is captured once as one CUDA graph
                                // (ggml's nodes and ours) and replayed; default true
    int32_t small_batch_max_tokens; // CUDA, with small_batch_kernels: the widest verify whose matmuls they take
                                // (1..32); default 16
    bool    tree_verify;        // hybrid models: plan and reserve luce_engine_verify_tree's scratch (each
                                // root-to-leaf path's recurrence; dense models need none); default false
    luce_tree_recurrence tree_recurrence; // hybrid tree verify's recurrent layers; default LUCE_TREE_RECURRENCE_AUTO
    int32_t step_kv_pad;        // one-token steps and verifies attend the cache in steps of this many cells (a
                                // multiple of 256): their graphs are rebuilt (on a GPU recaptured: ~7 ms for
                                // SmolLM2 on the H100 against a 1.2 ms step) whenever the attended length crosses
                                // a step, and at every new reply's length; default 256, llama.cpp's
    bool    debug_piecewise;    // debugging, CPU only: compute every graph in pieces cut around its matmuls
                                // (graph_views.h), which must match the scheduler bit for bit; default false
    bool    debug_staged_state_io; // debugging, CPU only: state-file loads copy through the staging ring
                                // (ggml_backend_tensor_set) as they do into a GPU, instead of reading into
                                // the cache in place; default false
} luce_engine_params;

LUCE_API luce_engine_params luce_engine_default_params(void);

// What an engine needs, planned before anything is allocated.
typedef struct luce_memory_plan {
    uint64_t weights;        // model weights (on the device; mmap'd for CPU)
    uint64_t kv_cache;       // K and V of the attention layers at n_ctx
    uint64_t recurrent;      // hybrid models: DeltaNet states + rollback buffers for verification
    uint64_t compute;        // scratch for the largest graph (estimate before creation, measured after)
    uint64_t outputs;        // host logits buffers
    uint64_t total;
    uint64_t device_free;    // what the device reported as free
    // The one "does it fit" rule (luce_engine_plan, engine creation, the scorer, luce-chat --plan):
    // device_need <= device_budget, or device_free unknown (0).
    uint64_t device_need;    // what the device holds: total, less the host-side outputs off the CPU
    uint64_t device_budget;  // device_free, plus the weights when they are already on a GPU (part of the need)
    int32_t  n_ctx;          // capacity after rounding
} luce_memory_plan;

// Plans memory for the given params without allocating. Returns LUCE_ERR_MEMORY (with a message
// that says what to change) when the plan does not fit the device; *plan is filled either way.
LUCE_API luce_status luce_engine_plan(const luce_model * model, luce_engine_params params, luce_memory_plan * plan);

LUCE_API luce_status luce_engine_create(luce_model * model, luce_engine_params params, luce_engine ** out);
LUCE_API void        luce_engine_free(luce_engine * engine);

// Progress of a prefill: tokens done out of total. Return false to cancel.
typedef bool (*luce_progress_cb)(int32_t done, int32_t total, void * user_data);

// Appends tokens to the context and evaluates them in micro-batches of n_batch.
// logits_all: keep logits of every appended position (else only the last one).
// Cancel (or the progress callback returning false) stops between micro-batches with
// LUCE_ERR_CANCELLED; tokens of the completed micro-batches stay in the context.
LUCE_API luce_status luce_engine_prefill(luce_engine * engine, const int32_t * tokens, int32_t n_tokens,
                                         bool logits_all, luce_progress_cb progress, void * user_data);

// Logits of the last evaluation. i indexes the kept rows (0..n-1; -1 = last). NULL if none.
// Rows stay on the device until first read (only each row's argmax comes back with every
// evaluation); the pointer is valid until the next call on this engine.
LUCE_API const float * luce_engine_logits(luce_engine * engine, int32_t i);
LUCE_API int32_t       luce_engine_n_logits(const luce_engine * engine);   // rows kept by the last call
// Copies rows first..first+n-1 into out ([n][n_vocab] floats).
LUCE_API luce_status   luce_engine_copy_logits(luce_engine * engine, int32_t first, int32_t n, float * out);
// The greedy token (argmax, computed on the device) of row i, without downloading the row.
LUCE_API luce_status   luce_engine_argmax(const luce_engine * engine, int32_t i, int32_t * token);

// ---- sampling -----------------------------------------------------------------------------
typedef struct luce_sampling_params {
    float    temperature;      // <= 0: greedy
    int32_t  top_k;            // <= 0: off
    float    top_p;            // >= 1: off
    float    min_p;            // <= 0: off
    float    repeat_penalty;   // 1: off (llama.cpp semantics: divide positive logits, multiply negative)
    float    presence_penalty; // 0: off
    int32_t  penalty_last_n;   // window of recent context tokens the penalties look at; -1 = whole context
    uint64_t seed;
} luce_sampling_params;

LUCE_API luce_sampling_params luce_sampling_default_params(void);

// Samples one token from logits row i of the last evaluation (penalties use the context tokens).
// Advances the engine's random state.
LUCE_API luce_status luce_engine_sample(luce_engine * engine, const luce_sampling_params * params,
                                        int32_t i, int32_t * token);
// Reseeds the sampler's random state.
LUCE_API void luce_engine_set_seed(luce_engine * engine, uint64_t seed);

// ---- stepping -----------------------------------------------------------------------------
#define LUCE_MAX_STEP_TOKENS 64

typedef enum luce_provenance {
    LUCE_FROM_TARGET  = 0,    // produced by the target model
    LUCE_FROM_DRAFT   = 1,    // proposed by a draft and accepted by the target
} luce_provenance;

typedef struct luce_step_result {
    int32_t n_tokens;                                  // tokens committed by this step (>= 1 on success)
    int32_t tokens[LUCE_MAX_STEP_TOKENS];
    uint8_t provenance[LUCE_MAX_STEP_TOKENS];          // luce_provenance per token
    double  sample_ms;
    double  decode_ms;                                 // target evaluation time
} luce_step_result;

// Samples the next token from the current logits, commits it to the context and evaluates it so
// that logits for the following position are ready. Requires logits (after a prefill or step).
LUCE_API luce_status luce_engine_step(luce_engine * engine, const luce_sampling_params * params,
                                      luce_step_result * out);

// Keeps the first n tokens of the context. Logits for position n are recomputed (n > 0) so that
// stepping can continue at once.
LUCE_API luce_status luce_engine_truncate(luce_engine * engine, int32_t n);

// Saves the recurrent state at the current length (host memory; O(1) in context length) so that a
// later truncate to this length is instant and a truncate past it only recomputes from here.
// Dense models need none (their truncate is always instant). At most 8 are kept; the oldest go.
LUCE_API luce_status luce_engine_checkpoint(luce_engine * engine);

// Speculative verification: evaluates n tokens (n <= n_verify_max) appended to the context in one
// batch and keeps logits for every one of them. The tokens stay provisional until
// luce_engine_commit(k) keeps the first k (0..n): the KV length and, for hybrid models, the
// recurrent and conv state are restored to "after token k" without running the model again.
// Any other compute call before the commit is an error. keep_pre_logits false: commit(0) restores
// only the greedy token of the logits before the verify, which saves downloading that row when the
// caller never needs its distribution (a speculative loop commits at least the first token).
LUCE_API luce_status luce_engine_verify(luce_engine * engine, const int32_t * tokens, int32_t n,
                                        bool keep_pre_logits);
LUCE_API luce_status luce_engine_commit(luce_engine * engine, int32_t k);

// Tree verification (DDTree) on dense models: n nodes (n <= n_verify_max) in one batch; node 0 is
// the root (parents[0] = -1), every other node's parent is an earlier node (parents[i] < i). Node i
// is written to cache row n_past + i, sits at position n_past + depth(i) and attends to the context
// plus its ancestors and itself; logits row i is the target's distribution after node i's root
// path. Hybrid models: LUCE_ERR_UNSUPPORTED (use chain verification). Until the commit, sampling
// row i applies penalties to the context followed by node i's root path.
LUCE_API luce_status luce_engine_verify_tree(luce_engine * engine, const int32_t * tokens, const int32_t * parents,
                                             int32_t n, bool keep_pre_logits);
// Keeps the root-to-node path nodes[0..k) (nodes[0] = 0, nodes[d] a child of nodes[d-1]) of a
// pending tree (or chain: its prefixes) verify: its K/V and captured features move to context
// positions n_past..n_past+k-1, the other nodes are dropped, and the logits after nodes[k-1] remain
// as after luce_engine_commit. k = 0 is luce_engine_commit(engine, 0). luce_engine_commit(k > 0)
// is an error while a tree verify is pending.
LUCE_API luce_status luce_engine_commit_path(luce_engine * engine, const int32_t * nodes, int32_t k);

// Hidden-state capture (the features a DFlash draft reads). For each listed layer L the residual
// stream is copied, for every evaluated token, into a ring of ring_size positions:
// output_convention false = the input of layer L (llama.cpp's `dflash.target_layers`), true = the
// output of layer L (`dflash.target_layer_ids`). n_layers = 0 turns capture off.
LUCE_API luce_status luce_engine_set_capture(luce_engine * engine, const int32_t * layers, int32_t n_layers,
                                             bool output_convention, int32_t ring_size);
// Copies the captured features of context position pos ([n_layers][n_embd] floats) into out.
// Fails when pos is not among the last ring_size committed positions.
LUCE_API luce_status luce_engine_captured(const luce_engine * engine, int32_t pos, float * out);

// Sets the cancel flag: a running or next prefill/step returns LUCE_ERR_CANCELLED at the next
// graph boundary (on the CPU backend also between the nodes of a running graph). The flag is
// cleared when that call returns; the context keeps every token committed before it.
LUCE_API void luce_engine_cancel(luce_engine * engine);
// Clears a pending cancel (call before starting new work so a stale request does not stop it).
LUCE_API void luce_engine_clear_cancel(luce_engine * engine);

LUCE_API int32_t         luce_engine_n_past(const luce_engine * engine);   // tokens in the context
LUCE_API int32_t         luce_engine_n_ctx(const luce_engine * engine);    // capacity
LUCE_API const int32_t * luce_engine_tokens(const luce_engine * engine);   // the context's tokens

typedef struct luce_stats {
    int64_t n_prefill_tokens;
    double  prefill_ms;
    int64_t n_decode_tokens;
    double  decode_ms;
    double  sample_ms;
    int64_t n_graph_builds;    // graphs built (a reused graph is not rebuilt)
    int64_t n_graph_reuses;
    int64_t n_replayed_tokens; // tokens recomputed to rebuild recurrent state (truncate, failures)
    uint64_t compute_buffer_bytes;
    int64_t n_small_batch_evals; // evaluations of 1..16 tokens whose quantized matmuls ran on luce's
                                 // CUDA small-batch kernels (the rest of the graph on ggml's)
    int64_t n_step_graph_replays; // of those, the ones replayed from one captured CUDA graph
} luce_stats;

LUCE_API void luce_engine_stats(const luce_engine * engine, luce_stats * out);
LUCE_API void luce_engine_reset_stats(luce_engine * engine);
LUCE_API luce_status luce_engine_memory_plan(const luce_engine * engine, luce_memory_plan * plan);

// ---- engine state files ---------------------------------------------------------------------
// A context saved to a file and read back (state_file.h has the layout): the attention layers'
// K/V rows in use (as stored, any cache type), the recurrent layers' conv and DeltaNet state, the
// token ids, the logits after the last token, and the hidden-state capture rows a DFlash draft is
// fed from (its injected context is rebuilt from them). The header names the model (GGUF file size
// and a checksum of its metadata and tensor table), the cache types and the context size; every
// part has a checksum. A load refuses a file of another model or cache type
// (LUCE_ERR_STATE_MISMATCH), a damaged or truncated one (LUCE_ERR_STATE_DAMAGED) and a newer format
// (LUCE_ERR_STATE_NEWER) before it changes anything, except a payload whose checksum fails only
// once it is read: the engine is then left with an empty context.
typedef struct luce_state_info {
    uint32_t format_version;
    int32_t  n_tokens;          // tokens in the saved context
    int32_t  n_ctx;             // capacity of the engine that saved it
    int32_t  type_k, type_v;    // luce_cache_type
    bool     kv_rotation;
    char     arch[32];
    uint64_t model_file_size;   // the GGUF the state belongs to: its size and metadata checksum
    uint64_t model_hash;
    uint64_t file_bytes;        // the state file's size
    uint64_t live_bytes;        // of which the saved state (the rest: parts replaced by later appends)
    int32_t  n_capture_rows;    // positions of draft features kept (0: capture was off)
} luce_state_info;

typedef struct luce_state_io {   // what a save or load did
    int32_t  n_tokens;           // tokens in the context saved or loaded
    uint64_t bytes;              // bytes written or read
    bool     appended;           // save: only the rows after the file's context were added
    int32_t  n_captured;         // load: positions put back into the engine's capture ring
    double   ms;
} luce_state_io;

// Bytes a full save of the engine's context would write now.
LUCE_API luce_status luce_engine_state_bytes(luce_engine * engine, uint64_t * bytes);
// Saves the context to path. allow_append: when path holds a state of this engine whose tokens are
// a prefix of the context (and not much of the file is superseded data), only the new rows are
// appended and the header is switched to them last (a crash leaves the previous state readable);
// otherwise the whole file is written beside path and renamed over it. Both are fsynced. Another
// process writing the same path at the same time: LUCE_ERR_STATE_IO (a lock file path + ".lock").
LUCE_API luce_status luce_engine_state_save(luce_engine * engine, const char * path, bool allow_append,
                                            luce_state_io * out);
// Replaces the engine's context with the file's (see above for what is refused). The capture rows
// go back into the engine's capture ring when it captures the same layers (set_capture first).
LUCE_API luce_status luce_engine_state_load(luce_engine * engine, const char * path, luce_state_io * out);
// The header of a state file (no engine needed; its checksums are checked, not the payload's).
LUCE_API luce_status luce_state_file_info_read(const char * path, luce_state_info * out);
// The token ids of a state file's context: up to capacity into tokens; *n_tokens = all of them.
LUCE_API luce_status luce_state_file_tokens(const char * path, int32_t * tokens, int32_t capacity, int32_t * n_tokens);

// ---- DFlash draft model -------------------------------------------------------------------
// A DFlash drafter (GGUF arch `dflash` of llama.cpp, or lucebox `dflash-draft` /
// `qwen35-dflash-draft`) bound to its target model: it uses the target's token embedding and LM
// head (unless the draft file ships its own) and runs on the target's device. Its context is a
// per-layer KV cache of injected context positions (ring of n_ctx_draft positions, slot p mod
// n_ctx_draft); a draft pass runs the block [x0, M, ..., M] (M = mask token) at positions
// pos0..pos0+B-1, non-causally, attending to the injected positions in [pos0 - n_ctx_draft, pos0).
// The target model must outlive the draft. One thread at a time per draft.
typedef struct luce_draft luce_draft;

#define LUCE_DRAFT_MAX_CAPTURE 64

typedef struct luce_draft_params {
    int32_t n_ctx_draft;   // context positions kept (ring size); <= 0: 4096
    bool    use_mmap;      // CPU: map the file instead of copying it (default true)
    bool    small_batch_kernels;   // CUDA: the block and a step's injection on luce's small-batch kernels (default true)
    bool    step_graphs;           // ... each captured once as one CUDA graph and replayed (default true)
    int32_t kv_pad;        // the block attends the ring in steps of this many slots (a multiple of 256): its
                           // graph is rebuilt (on a GPU recaptured) at each step crossed (default 256)
} luce_draft_params;

LUCE_API luce_draft_params luce_draft_default_params(void);

typedef enum luce_draft_dialect {
    LUCE_DRAFT_LLAMA   = 0,   // llama.cpp arch `dflash` (`dflash.target_layers` = input of layer L)
    LUCE_DRAFT_LUCEBOX = 1,   // `dflash-draft` / `qwen35-dflash-draft` (`dflash.target_layer_ids`)
} luce_draft_dialect;

typedef struct luce_draft_info {
    char     arch[32];
    int32_t  dialect;                          // luce_draft_dialect
    int32_t  block_size;                       // B: tokens per block, x0 included (B-1 proposals)
    int32_t  mask_token_id;
    int32_t  n_capture;                        // captured target layers, Nf
    int32_t  capture[LUCE_DRAFT_MAX_CAPTURE];  // internal convention: output of target layer i, feature order
    int32_t  n_layer, n_embd, n_vocab;
    int32_t  n_ctx_draft;
    int32_t  sliding_window;                   // 0 = no SWA layer
    int32_t  n_swa_layers;
    bool     own_embedding, own_lm_head;       // the draft ships token_embd / an LM head
    uint64_t weight_bytes;                     // draft weights (the target's embedding/head not counted)
    uint64_t kv_bytes;                         // draft KV cache (ring + block scratch)
    uint64_t compute_bytes;                    // scratch of the draft and inject graphs
    int64_t  n_graph_builds, n_graph_reuses;
    int64_t  n_small_batch_evals;              // graphs run on the small-batch kernels
    int64_t  n_step_graph_replays;             // ... of them replayed as one captured CUDA graph
} luce_draft_info;

// Loads and validates a draft for `target`. Errors name the file and the key or tensor:
// LUCE_ERR_DRAFT_MISMATCH when the draft does not fit this target (hidden size, capture layer
// out of range, fc input width != Nf·E, mask token outside the vocabulary).
LUCE_API luce_status luce_draft_load(const char * path, const luce_model * target, luce_draft_params params,
                                     luce_draft ** out);
LUCE_API void        luce_draft_free(luce_draft * draft);
LUCE_API luce_status luce_draft_get_info(const luce_draft * draft, luce_draft_info * out);
// Forgets every injected position.
LUCE_API luce_status luce_draft_reset(luce_draft * draft);
// Injects target features of context positions start_pos..start_pos+n-1: `features` is
// [n][n_capture * n_embd] floats (per position the captured layers' hidden states, in capture order).
LUCE_API luce_status luce_draft_inject(luce_draft * draft, const float * features, int32_t n, int32_t start_pos);
// Same, with the features of positions start_pos..start_pos+n-1 read on the device from the
// engine's capture rings (luce_engine_set_capture with the draft's layers, output convention).
// The engine must run the draft's target model; the positions must be committed and in the ring.
LUCE_API luce_status luce_draft_inject_captured(luce_draft * draft, const luce_engine * engine, int32_t start_pos,
                                                int32_t n);
// Runs one block with x0 at position pos0 and writes the greedy draft tokens of rows 1..B-1
// (B-1 ids; row i predicts the token at pos0 + i) into out_tokens.
LUCE_API luce_status luce_draft_run(luce_draft * draft, int32_t x0, int32_t pos0, int32_t * out_tokens);
// Copies logits rows first..first+n-1 of the last run ([n][n_vocab] floats; rows 0..B-1).
LUCE_API luce_status luce_draft_logits(const luce_draft * draft, int32_t first, int32_t n, float * out);
// The k most probable tokens of logits rows first..first+n-1 of the last run, computed on the
// draft's device so only these cross to the host: out_tokens and out_logprobs are [n][k], each row
// by descending log-probability, equal log-probabilities by ascending token id (which of the tokens
// tied at the k-th place are kept is unspecified). The log-probabilities are over the full
// vocabulary of logits / temperature (temperature > 0). k is 1..n_vocab.
LUCE_API luce_status luce_draft_top_candidates(luce_draft * draft, int32_t first, int32_t n, int32_t k,
                                               float temperature, int32_t * out_tokens, float * out_logprobs);

// ---- PFlash scorer ------------------------------------------------------------------------
// A small dense model (arch llama or qwen3) that ranks the tokens of a long prompt by the
// attention its last n_tail tokens (the question) pay them (docs/algorithms.md §4.2–4.3):
//   score[j] = mean over tail rows t of ( max over layers and heads of softmax(Q_t·Kᵀ/√d)[j] ),
// with a causal mask among the tail rows and GQA (query head h reads KV head h / (n_head/n_head_kv)).
// The [n_tail, S] running maximum lives on the device; the [S, S] matrix never exists.
// A scorer has its own KV cache (f16, sized to each call's input and freed when the call returns)
// and its own scratch, so it never touches any luce_engine, not even one on the same model.
// Inputs longer than sparse_threshold run the scorer's own forward with block-sparse attention
// (every query sees the first sparse_sink keys and the sparse_window keys before its
// micro-batch, plus its own micro-batch causally); the tail queries always see every key.
typedef struct luce_scorer luce_scorer;

typedef struct luce_scorer_params {
    int32_t n_batch;            // tokens per micro-batch (= the sparse query block); default 512
    int32_t sparse_threshold;   // inputs of more tokens use block-sparse attention; <= 0: always dense; default 32768
    int32_t sparse_sink;        // sparse: keys at the start that every query sees; default 256
    int32_t sparse_window;      // sparse: keys before its micro-batch that a query sees; default 2048
    int32_t n_layers;           // score with the first n_layers layers only (cost ∝ layers); <= 0: all; default 0
} luce_scorer_params;

LUCE_API luce_scorer_params luce_scorer_default_params(void);

// Memory a luce_scorer_score() call of n_tokens with n_tail tail queries needs, planned without
// allocating: KV cache for n_tokens rounded up to 256 at f16, scratch of the largest graph, and
// host staging (outputs). LUCE_ERR_MEMORY (with a message) when it does not fit the model's
// device; *plan is filled either way (n_ctx = the cache's token capacity).
LUCE_API luce_status luce_scorer_plan(const luce_model * model, luce_scorer_params params, int32_t n_tokens,
                                      int32_t n_tail, luce_memory_plan * plan);

// LUCE_ERR_UNSUPPORTED for a model that is not a dense llama/qwen3 transformer.
LUCE_API luce_status luce_scorer_create(luce_model * model, luce_scorer_params params, luce_scorer ** out);
LUCE_API void        luce_scorer_free(luce_scorer * scorer);

// Scores tokens[0..n_tokens-1] (attachment + question; the last n_tail tokens are the tail
// queries, 1 <= n_tail <= min(n_tokens, 256)) into scores[n_tokens]. pre_rope: Q and K after the
// q/k norms but before RoPE (removes RoPE's distance decay; docs/algorithms.md §4.3). Progress is
// reported per micro-batch (return false to cancel); luce_scorer_cancel() stops at the next graph
// boundary. The memory plan is checked first (LUCE_ERR_MEMORY if it does not fit).
LUCE_API luce_status luce_scorer_score(luce_scorer * scorer, const int32_t * tokens, int32_t n_tokens, int32_t n_tail,
                                       bool pre_rope, float * scores, luce_progress_cb progress, void * user_data);
// One body (e.g. an attachment), several questions: the body's forward runs once, then each
// question in turn is evaluated after it (positions n_body.., replacing the previous question) and
// scores the body with its last n_tail tokens. questions: the questions' tokens back to back,
// lens[i] tokens each (n_tail <= lens[i] <= max(n_batch, 256)). scores: [n_questions][n_body].
LUCE_API luce_status luce_scorer_score_questions(luce_scorer * scorer, const int32_t * body, int32_t n_body,
                                                 const int32_t * questions, const int32_t * lens, int32_t n_questions,
                                                 int32_t n_tail, bool pre_rope, float * scores,
                                                 luce_progress_cb progress, void * user_data);
// Any thread, any time: the running (or next) score call returns LUCE_ERR_CANCELLED.
LUCE_API void luce_scorer_cancel(luce_scorer * scorer);
LUCE_API void luce_scorer_clear_cancel(luce_scorer * scorer);

typedef struct luce_scorer_stats {
    int32_t  n_tokens, n_tail;         // of the last call
    int32_t  n_dense_batches;          // micro-batches of the forward with every earlier key
    int32_t  n_sparse_batches;         // micro-batches with sink + window keys only
    int64_t  attended_keys;            // sum over forward query rows of the keys each attended
    int64_t  dense_keys;               // what dense causal attention would have attended
    double   forward_ms, tail_ms, total_ms;
    uint64_t planned_kv_bytes, planned_compute_bytes;   // the plan of the last call
    uint64_t kv_bytes;                 // KV cache buffer actually allocated by the last call
    uint64_t compute_bytes;            // compute buffers after the last call (largest graph, all backends)
    int64_t  n_graph_builds, n_graph_reuses;             // over the scorer's lifetime
} luce_scorer_stats;

LUCE_API luce_status luce_scorer_get_stats(const luce_scorer * scorer, luce_scorer_stats * out);

// ---- DFlash draft memory plan ---------------------------------------------------------------
// What a draft in use costs, before anything is allocated: the file is validated against the
// target exactly as luce_draft_load() does (same status codes and messages), its weights are
// sized from the tensor headers and nothing is read or allocated. The target may be a plan-only
// model (luce_model_params.plan_only).
typedef struct luce_draft_plan_info {
    luce_draft_info info;        // as luce_draft_get_info() reports after a load, except: kv_bytes and
                                 // compute_bytes are the planned values below, graph counters are 0
    int32_t  capture_ring;       // positions of the target engine's capture ring planned for
    uint64_t weight_bytes;       // draft weights (the target's embedding/head not counted)
    uint64_t kv_bytes;           // draft KV cache (ring + block scratch), exact
    uint64_t compute_bytes;      // scratch of the inject, inject-from-rings and draft graphs: an upper
                                 // bound of the measured value (draft_model.cpp states the formula)
    uint64_t capture_ring_bytes; // the target engine's hidden-state capture ring (F32, one per captured layer)
    uint64_t total;              // the four above
} luce_draft_plan_info;

// n_ctx_draft as in luce_draft_params (<= 0: 4096); capture_ring: the ring size the engine's
// luce_engine_set_capture() will get (<= 0: 4096).
LUCE_API luce_status luce_draft_plan(const char * path, const luce_model * target, int32_t n_ctx_draft,
                                     int32_t capture_ring, luce_draft_plan_info * out);

// ---- Diagnostics ---------------------------------------------------------------------------
// y = W x with luce's CUDA small-batch kernel on CUDA device `device`, from host memory: W is
// nrows rows of k values of ggml type `ggml_type` (Q4_K, Q6_K or Q8_0, k a multiple of 256), x is n
// columns (1..32) of k floats, y receives n columns of nrows floats. For tests of the kernel
// against a reference. LUCE_ERR_UNSUPPORTED when luce was built without its CUDA kernels or the device
// cannot run them.
// row_tiles, k_splits, blocks_per_sm: the launch geometry (cuda/small_batch_gemm.h's
// SmallGemmGeometry); 0, 0, 0 picks it from the shape as the engine does. The product runs twice on
// one scratch buffer, as the engine reuses it, and the second result is returned.
LUCE_API luce_status luce_cuda_small_gemm(int32_t device, int32_t ggml_type, const void * w, int64_t nrows, int64_t k,
                                          const float * x, int32_t n, float * y, int32_t row_tiles, int32_t k_splits,
                                          int32_t blocks_per_sm);

#ifdef __cplusplus
}
#endif

#endif // LUCE_H
