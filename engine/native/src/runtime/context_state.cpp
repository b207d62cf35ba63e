// context_state.cpp — see context_state.h.
#include "context_state.h"
#include "error.h"

#include <string>

namespace luce {

uint64_t ContextState::bytes_needed(const HParams & hp, int n_ctx, ggml_type tk, ggml_type tv, int n_verify_max, bool replay) {
    return AttentionKv::bytes(hp, n_ctx, tk, tv) + RecurrentState::bytes(hp, n_verify_max, replay);
}

void ContextState::allocate(const Model & m, int n_ctx_in, ggml_type tk, ggml_type tv, bool rotate, int n_verify_max,
                            bool replay) {
    const HParams & hp = m.hp;
    n_ctx = n_ctx_in;
    ggml_init_params ip = {ggml_tensor_overhead() * size_t(6 * hp.n_layer + 4), nullptr, true};
    ctx = ggml_init(ip);
    if (!ctx) throw Error(LUCE_ERR_MEMORY, "cannot create the context state's tensor headers");
    attn.declare(ctx, hp, n_ctx, tk, tv, rotate);
    rec.declare(ctx, hp, n_verify_max, replay);
    vocab_ramp = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, hp.n_vocab);

    buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_dev_buffer_type(m.dev));
    if (!buffer) {
        throw Error(LUCE_ERR_MEMORY, "cannot allocate " + format_bytes(bytes_needed(hp, n_ctx, tk, tv, n_verify_max, rec.replay)) +
                                         " for the KV cache on " + m.device_name + "; lower --max-ctx or use a smaller --cache-type");
    }
    ggml_backend_buffer_clear(buffer, 0);
    attn.upload_constants();
    std::vector<float> r(size_t(hp.n_vocab));
    for (int32_t i = 0; i < hp.n_vocab; ++i) r[size_t(i)] = float(hp.n_vocab - i);
    ggml_backend_tensor_set(vocab_ramp, r.data(), 0, r.size() * sizeof(float));
}

ContextState::~ContextState() {
    if (buffer) ggml_backend_buffer_free(buffer);
    if (ctx) ggml_free(ctx);
}

} // namespace luce
