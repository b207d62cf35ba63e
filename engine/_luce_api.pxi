# Declarations of the C API in native/include/luce.h, textually included by _core.pyx.
from libc.stdint cimport int32_t, uint32_t, uint8_t, uint64_t, int64_t
from libcpp cimport bool as cbool

cdef extern from "luce.h" nogil:
    ctypedef enum luce_status:
        LUCE_OK
        LUCE_ERR_INVALID_ARG
        LUCE_ERR_IO
        LUCE_ERR_FORMAT
        LUCE_ERR_UNSUPPORTED
        LUCE_ERR_MODEL
        LUCE_ERR_DEVICE
        LUCE_ERR_MEMORY
        LUCE_ERR_CONTEXT
        LUCE_ERR_CANCELLED
        LUCE_ERR_STATE
        LUCE_ERR_COMPUTE
        LUCE_ERR_DRAFT_MISMATCH
        LUCE_ERR_STATE_MISMATCH
        LUCE_ERR_STATE_DAMAGED
        LUCE_ERR_STATE_NEWER
        LUCE_ERR_STATE_IO

    const char * luce_last_error()
    void luce_set_verbose(bint verbose)

    ctypedef struct luce_device_info:
        char name[64]
        char description[128]
        char kind[8]
        size_t memory_free
        size_t memory_total
    int32_t luce_device_count()
    luce_status luce_device_get(int32_t index, luce_device_info * out)

    ctypedef struct luce_model:
        pass
    ctypedef struct luce_model_params:
        const char * device
        bint plan_only
        bint use_mmap
        int32_t n_threads
        bint fuse_weights
        bint repack_weights
    luce_model_params luce_model_default_params()
    luce_status luce_model_load(const char * path, luce_model_params params, luce_model ** out)
    void luce_model_free(luce_model * model)
    const char * luce_model_arch(const luce_model * model)
    const char * luce_model_name(const luce_model * model)
    const char * luce_model_device(const luce_model * model)
    int32_t luce_model_n_vocab(const luce_model * model)
    int32_t luce_model_n_embd(const luce_model * model)
    int32_t luce_model_n_layer(const luce_model * model)
    int32_t luce_model_n_ctx_train(const luce_model * model)
    uint64_t luce_model_n_params(const luce_model * model)
    uint64_t luce_model_weight_bytes(const luce_model * model)
    int32_t luce_model_n_fused(const luce_model * model)
    int32_t luce_model_n_repacked(const luce_model * model)
    const char * luce_model_type_summary(const luce_model * model)

    ctypedef enum luce_cache_type:
        LUCE_CACHE_F16
        LUCE_CACHE_Q8_0
        LUCE_CACHE_Q4_0

    ctypedef enum luce_rollback:
        LUCE_ROLLBACK_SNAPSHOT
        LUCE_ROLLBACK_REPLAY

    ctypedef enum luce_tree_recurrence:
        LUCE_TREE_RECURRENCE_AUTO
        LUCE_TREE_RECURRENCE_PATHS
        LUCE_TREE_RECURRENCE_NODES

    ctypedef struct luce_engine:
        pass
    ctypedef struct luce_engine_params:
        int32_t n_ctx
        int32_t n_batch
        luce_cache_type type_k
        luce_cache_type type_v
        bint kv_rotation
        int32_t n_verify_max
        luce_rollback rollback
        bint small_batch_kernels
        bint step_graphs
        int32_t small_batch_max_tokens
        bint tree_verify
        luce_tree_recurrence tree_recurrence
        int32_t step_kv_pad
        bint debug_piecewise
        bint debug_staged_state_io
    luce_engine_params luce_engine_default_params()

    ctypedef struct luce_memory_plan:
        uint64_t weights
        uint64_t kv_cache
        uint64_t recurrent
        uint64_t compute
        uint64_t outputs
        uint64_t total
        uint64_t device_free
        uint64_t device_need
        uint64_t device_budget
        int32_t n_ctx
    luce_status luce_engine_plan(const luce_model * model, luce_engine_params params, luce_memory_plan * plan)
    luce_status luce_engine_create(luce_model * model, luce_engine_params params, luce_engine ** out)
    void luce_engine_free(luce_engine * engine)

    ctypedef cbool (*luce_progress_cb)(int32_t done, int32_t total, void * user_data) noexcept
    luce_status luce_engine_prefill(luce_engine * engine, const int32_t * tokens, int32_t n_tokens,
                                    bint logits_all, luce_progress_cb progress, void * user_data)
    const float * luce_engine_logits(luce_engine * engine, int32_t i)
    int32_t luce_engine_n_logits(const luce_engine * engine)
    luce_status luce_engine_copy_logits(luce_engine * engine, int32_t first, int32_t n, float * out) nogil
    luce_status luce_engine_argmax(const luce_engine * engine, int32_t i, int32_t * token)

    ctypedef struct luce_sampling_params:
        float temperature
        int32_t top_k
        float top_p
        float min_p
        float repeat_penalty
        float presence_penalty
        int32_t penalty_last_n
        uint64_t seed
    luce_sampling_params luce_sampling_default_params()
    luce_status luce_engine_sample(luce_engine * engine, const luce_sampling_params * params, int32_t i, int32_t * token)
    void luce_engine_set_seed(luce_engine * engine, uint64_t seed)

    enum: LUCE_MAX_STEP_TOKENS
    ctypedef struct luce_step_result:
        int32_t n_tokens
        int32_t tokens[64]
        uint8_t provenance[64]
        double sample_ms
        double decode_ms
    luce_status luce_engine_step(luce_engine * engine, const luce_sampling_params * params, luce_step_result * out)
    luce_status luce_engine_truncate(luce_engine * engine, int32_t n)
    luce_status luce_engine_verify(luce_engine * engine, const int32_t * tokens, int32_t n, bint keep_pre_logits)
    luce_status luce_engine_commit(luce_engine * engine, int32_t k)
    luce_status luce_engine_verify_tree(luce_engine * engine, const int32_t * tokens, const int32_t * parents,
                                        int32_t n, bint keep_pre_logits)
    luce_status luce_engine_commit_path(luce_engine * engine, const int32_t * nodes, int32_t k)
    luce_status luce_engine_checkpoint(luce_engine * engine)
    luce_status luce_engine_set_capture(luce_engine * engine, const int32_t * layers, int32_t n_layers,
                                        bint output_convention, int32_t ring_size)
    luce_status luce_engine_captured(const luce_engine * engine, int32_t pos, float * out)
    void luce_engine_cancel(luce_engine * engine)
    void luce_engine_clear_cancel(luce_engine * engine)
    int32_t luce_engine_n_past(const luce_engine * engine)
    int32_t luce_engine_n_ctx(const luce_engine * engine)
    const int32_t * luce_engine_tokens(const luce_engine * engine)

    ctypedef struct luce_stats:
        int64_t n_prefill_tokens
        double prefill_ms
        int64_t n_decode_tokens
        double decode_ms
        double sample_ms
        int64_t n_graph_builds
        int64_t n_graph_reuses
        int64_t n_replayed_tokens
        uint64_t compute_buffer_bytes
        int64_t n_small_batch_evals
        int64_t n_step_graph_replays
    void luce_engine_stats(const luce_engine * engine, luce_stats * out)
    void luce_engine_reset_stats(luce_engine * engine)
    luce_status luce_engine_memory_plan(const luce_engine * engine, luce_memory_plan * plan)

    # ---- engine state files
    ctypedef struct luce_state_info:
        uint32_t format_version
        int32_t n_tokens
        int32_t n_ctx
        int32_t type_k
        int32_t type_v
        cbool kv_rotation
        char arch[32]
        uint64_t model_file_size
        uint64_t model_hash
        uint64_t file_bytes
        uint64_t live_bytes
        int32_t n_capture_rows
    ctypedef struct luce_state_io:
        int32_t n_tokens
        uint64_t bytes
        cbool appended
        int32_t n_captured
        double ms
    luce_status luce_engine_state_bytes(luce_engine * engine, uint64_t * bytes)
    luce_status luce_engine_state_save(luce_engine * engine, const char * path, cbool allow_append, luce_state_io * out)
    luce_status luce_engine_state_load(luce_engine * engine, const char * path, luce_state_io * out)
    luce_status luce_state_file_info_read(const char * path, luce_state_info * out)
    luce_status luce_state_file_tokens(const char * path, int32_t * tokens, int32_t capacity, int32_t * n_tokens)

    # ---- DFlash draft model
    ctypedef struct luce_draft:
        pass
    enum: LUCE_DRAFT_MAX_CAPTURE
    ctypedef struct luce_draft_params:
        int32_t n_ctx_draft
        bint use_mmap
        bint small_batch_kernels
        bint step_graphs
        int32_t kv_pad
    luce_draft_params luce_draft_default_params()
    ctypedef enum luce_draft_dialect:
        LUCE_DRAFT_LLAMA
        LUCE_DRAFT_LUCEBOX
    ctypedef struct luce_draft_info:
        char arch[32]
        int32_t dialect
        int32_t block_size
        int32_t mask_token_id
        int32_t n_capture
        int32_t capture[64]
        int32_t n_layer
        int32_t n_embd
        int32_t n_vocab
        int32_t n_ctx_draft
        int32_t sliding_window
        int32_t n_swa_layers
        bint own_embedding
        bint own_lm_head
        uint64_t weight_bytes
        uint64_t kv_bytes
        uint64_t compute_bytes
        int64_t n_graph_builds
        int64_t n_graph_reuses
        int64_t n_small_batch_evals
        int64_t n_step_graph_replays
    luce_status luce_draft_load(const char * path, const luce_model * target, luce_draft_params params, luce_draft ** out)
    void luce_draft_free(luce_draft * draft)
    luce_status luce_draft_get_info(const luce_draft * draft, luce_draft_info * out)
    luce_status luce_draft_reset(luce_draft * draft)
    luce_status luce_draft_inject(luce_draft * draft, const float * features, int32_t n, int32_t start_pos)
    luce_status luce_draft_inject_captured(luce_draft * draft, const luce_engine * engine, int32_t start_pos, int32_t n)
    luce_status luce_draft_run(luce_draft * draft, int32_t x0, int32_t pos0, int32_t * out_tokens)
    luce_status luce_draft_logits(const luce_draft * draft, int32_t first, int32_t n, float * out)
    luce_status luce_draft_top_candidates(luce_draft * draft, int32_t first, int32_t n, int32_t k, float temperature,
                                          int32_t * out_tokens, float * out_logprobs)

    # ---- PFlash scorer
    ctypedef struct luce_scorer:
        pass
    ctypedef struct luce_scorer_params:
        int32_t n_batch
        int32_t sparse_threshold
        int32_t sparse_sink
        int32_t sparse_window
        int32_t n_layers
    luce_scorer_params luce_scorer_default_params()
    luce_status luce_scorer_plan(const luce_model * model, luce_scorer_params params, int32_t n_tokens, int32_t n_tail,
                                 luce_memory_plan * plan)
    luce_status luce_scorer_create(luce_model * model, luce_scorer_params params, luce_scorer ** out)
    void luce_scorer_free(luce_scorer * scorer)
    luce_status luce_scorer_score(luce_scorer * scorer, const int32_t * tokens, int32_t n_tokens, int32_t n_tail,
                                  bint pre_rope, float * scores, luce_progress_cb progress, void * user_data)
    luce_status luce_scorer_score_questions(luce_scorer * scorer, const int32_t * body, int32_t n_body,
                                            const int32_t * questions, const int32_t * lens, int32_t n_questions,
                                            int32_t n_tail, bint pre_rope, float * scores,
                                            luce_progress_cb progress, void * user_data)
    void luce_scorer_cancel(luce_scorer * scorer)
    void luce_scorer_clear_cancel(luce_scorer * scorer)
    ctypedef struct luce_scorer_stats:
        int32_t n_tokens
        int32_t n_tail
        int32_t n_dense_batches
        int32_t n_sparse_batches
        int64_t attended_keys
        int64_t dense_keys
        double forward_ms
        double tail_ms
        double total_ms
        uint64_t planned_kv_bytes
        uint64_t planned_compute_bytes
        uint64_t kv_bytes
        uint64_t compute_bytes
        int64_t n_graph_builds
        int64_t n_graph_reuses
    luce_status luce_scorer_get_stats(const luce_scorer * scorer, luce_scorer_stats * out)

    # ---- DFlash draft memory plan
    ctypedef struct luce_draft_plan_info:
        luce_draft_info info
        int32_t capture_ring
        uint64_t weight_bytes
        uint64_t kv_bytes
        uint64_t compute_bytes
        uint64_t capture_ring_bytes
        uint64_t total
    luce_status luce_draft_plan(const char * path, const luce_model * target, int32_t n_ctx_draft, int32_t capture_ring,
                                luce_draft_plan_info * out)
    luce_status luce_cuda_small_gemm(int32_t device, int32_t ggml_type, const void * w, int64_t nrows, int64_t k,
                                     const float * x, int32_t n, float * y, int32_t row_tiles, int32_t k_splits,
                                     int32_t blocks_per_sm)
