// kv_cache.h — K and V for every attention layer, [head_dim·n_head_kv, n_ctx] in f16/q8_0/q4_0,
// plus the constant Walsh–Hadamard matrices used to rotate K/V when the cache is quantized
// (what llama.cpp does by default, so quantized results stay comparable; docs/algorithms.md §5).
#pragma once

#include "luce.h"
#include "model.h"

#include "ggml-backend.h"

#include <vector>

namespace luce {

ggml_type cache_ggml_type(luce_cache_type t);
const char * cache_type_name(luce_cache_type t);

// Rotation block size for a head size: the largest power of two >= 64 dividing it (0 = none).
int hadamard_block(int head_dim);

struct KvCache {
    int n_ctx = 0;
    ggml_type type_k = GGML_TYPE_F16, type_v = GGML_TYPE_F16;
    std::vector<ggml_tensor *> k, v;          // per layer; null for recurrent layers
    std::vector<ggml_tensor *> conv, ssm;     // per layer; F32 DeltaNet state, null for attention layers
    // Rollback buffers for verification (DeltaNet layers): the conv input window of the batch
    // [Kc-1+n_verify_max, C], and either the state after each token [S, S, Hv, n_verify_max] (slot
    // s = s tokens before the last), or, when rolling back by replay (luce_engine_params.rollback,
    // docs/algorithms.md §1.6), the batch's decay and beta [Hv, n_verify_max] from which commit(k)
    // recomputes the state of k tokens: 1/S² of the snapshots' memory, a recurrence per commit.
    std::vector<ggml_tensor *> conv_hist, ssm_snap, replay_g, replay_beta;
    int n_verify_max = 0;
    bool replay = false;

    // Hidden-state capture ring: one [n_embd, ring] tensor per captured layer.
    struct Capture {
        std::vector<int> layers;
        bool output_convention = false;
        int ring = 0;
        std::vector<ggml_tensor *> rings;
        ggml_context * ctx = nullptr;
        ggml_backend_buffer_t buffer = nullptr;
        void reset();
        ~Capture() { reset(); }
    } capture;
    ggml_tensor * rot_k = nullptr;   // [nrot, nrot] when K is quantized and rotation is on
    ggml_tensor * rot_v = nullptr;   // [64, 64] when V is quantized and rotation is on
    ggml_tensor * vocab_ramp = nullptr;   // [n_vocab] = n_vocab - i: ranks tied logits (greedy_argmax, runtime.h)
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buffer = nullptr;

    static uint64_t bytes_needed(const HParams & hp, int n_ctx, ggml_type tk, ggml_type tv, int n_verify_max = 0,
                                 bool replay = false);
    static uint64_t attention_bytes(const HParams & hp, int n_ctx, ggml_type tk, ggml_type tv);
    static uint64_t recurrent_bytes(const HParams & hp, int n_verify_max, bool replay);   // states + rollback buffers
    void clear_recurrent_state();   // zero the DeltaNet states (start of a context)
    void allocate(const Model & m, int n_ctx, ggml_type tk, ggml_type tv, bool rotate, int n_verify_max, bool replay);   // throws
    ~KvCache();
};

} // namespace luce
