// capture_ring.h — the target's hidden states of chosen layers for a DFlash draft: one
// [n_embd, ring] tensor per captured layer on the model's device, position p in row p % ring.
#pragma once

#include "model.h"

#include "ggml-backend.h"

#include <vector>

namespace luce {

struct CaptureRing {
    std::vector<int> layers;
    bool output_convention = false;   // true: a layer's output; false: its input
    int ring = 0;
    std::vector<ggml_tensor *> rings;
    // Unique per allocation of the rings, over every engine: a graph that reads them is keyed by it,
    // not by the tensors' addresses, which a new allocation may reuse while the data moved (a kept
    // graph would then read the freed rings: a CUDA graph replays the old addresses).
    uint64_t generation = 0;
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buffer = nullptr;

    // Captures `layers` (checked against the model) in rings of `ring` rows; n = 0 turns it off.
    void set(const Model & m, const int32_t * layers, int32_t n, bool output_convention, int32_t ring);   // throws
    ggml_tensor * of_layer(int layer) const;   // null when that layer is not captured
    // Row of position pos from every ring into out [n_rings][n_embd].
    void read(int32_t pos, int n_embd, float * out) const;
    void reset();
    CaptureRing() = default;
    CaptureRing(const CaptureRing &) = delete;
    CaptureRing & operator=(const CaptureRing &) = delete;
    ~CaptureRing() { reset(); }
};

} // namespace luce
