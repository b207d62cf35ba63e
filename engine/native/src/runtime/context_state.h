// context_state.h — what one context holds on the device besides its graphs, by store: the
// attention layers' K/V (attention_kv.h), the DeltaNet layers' state and rollback buffers
// (recurrent_state.h), the hidden-state capture ring (capture_ring.h), and the argmax ramp. The
// K/V and the states share one allocation, made once for n_ctx.
#pragma once

#include "attention_kv.h"
#include "capture_ring.h"
#include "recurrent_state.h"

#include "ggml-backend.h"

namespace luce {

struct ContextState {
    int n_ctx = 0;
    AttentionKv attn;
    RecurrentState rec;
    CaptureRing capture;
    ggml_tensor * vocab_ramp = nullptr;   // [n_vocab] = n_vocab - i: ranks tied logits (greedy_argmax, runtime.h)
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buffer = nullptr;

    // Attention K/V at n_ctx plus the recurrent state and its rollback buffers.
    static uint64_t bytes_needed(const HParams & hp, int n_ctx, ggml_type tk, ggml_type tv, int n_verify_max = 0,
                                 bool replay = false);
    void allocate(const Model & m, int n_ctx, ggml_type tk, ggml_type tv, bool rotate, int n_verify_max, bool replay);   // throws
    ContextState() = default;
    ContextState(const ContextState &) = delete;
    ContextState & operator=(const ContextState &) = delete;
    ~ContextState();
};

} // namespace luce
