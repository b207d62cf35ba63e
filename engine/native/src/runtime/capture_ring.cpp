// capture_ring.cpp — see capture_ring.h.
#include "capture_ring.h"
#include "error.h"

#include <atomic>
#include <string>

namespace luce {

void CaptureRing::reset() {
    if (buffer) ggml_backend_buffer_free(buffer);
    if (ctx) ggml_free(ctx);
    buffer = nullptr;
    ctx = nullptr;
    rings.clear();
    layers.clear();
    ring = 0;
    generation = 0;
}

void CaptureRing::set(const Model & m, const int32_t * ids, int32_t n, bool output, int32_t ring_rows) {
    reset();
    if (n <= 0) return;
    if (ring_rows <= 0) throw Error(LUCE_ERR_INVALID_ARG, "capture ring size must be positive");
    for (int32_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= m.hp.n_layer) {
            throw Error(LUCE_ERR_INVALID_ARG, "capture layer " + std::to_string(ids[i]) + " is outside 0.." +
                                                  std::to_string(m.hp.n_layer - 1));
        }
    }
    ggml_init_params ip = {ggml_tensor_overhead() * size_t(n), nullptr, true};
    ctx = ggml_init(ip);
    for (int32_t i = 0; i < n; ++i) {
        layers.push_back(ids[i]);
        rings.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, m.hp.n_embd, ring_rows));
    }
    output_convention = output;
    ring = ring_rows;
    static std::atomic<uint64_t> allocations{0};
    generation = ++allocations;
    buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_dev_buffer_type(m.dev));
    if (!buffer) {
        reset();
        throw Error(LUCE_ERR_MEMORY, "cannot allocate the hidden-state capture ring");
    }
    ggml_backend_buffer_clear(buffer, 0);
}

ggml_tensor * CaptureRing::of_layer(int layer) const {
    for (size_t i = 0; i < layers.size(); ++i) {
        if (layers[i] == layer) return rings[i];
    }
    return nullptr;
}

void CaptureRing::read(int32_t pos, int n_embd, float * out) const {
    const size_t row = size_t(n_embd) * sizeof(float);
    for (size_t i = 0; i < rings.size(); ++i) {
        ggml_backend_tensor_get(rings[i], out + i * size_t(n_embd), size_t(pos % ring) * row, row);
    }
}

} // namespace luce
