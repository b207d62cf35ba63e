// attention_kv.h — K and V of every attention layer, [head_dim·n_head_kv, n_ctx] in f16/q8_0/q4_0,
// plus the constant Walsh–Hadamard matrices that rotate K/V when the cache is quantized (what
// llama.cpp does by default, so quantized results stay comparable; docs/algorithms.md §5).
#pragma once

#include "luce.h"
#include "model.h"

#include <vector>

namespace luce {

ggml_type cache_ggml_type(luce_cache_type t);
const char * cache_type_name(luce_cache_type t);

// Rotation block size for a head size: the largest power of two >= 64 dividing it (0 = none).
int hadamard_block(int head_dim);

struct AttentionKv {
    ggml_type type_k = GGML_TYPE_F16, type_v = GGML_TYPE_F16;
    std::vector<ggml_tensor *> k, v;   // per layer; null for recurrent layers
    ggml_tensor * rot_k = nullptr;     // [nrot, nrot] when K is quantized and rotation is on
    ggml_tensor * rot_v = nullptr;     // [64, 64] when V is quantized and rotation is on

    static uint64_t bytes(const HParams & hp, int n_ctx, ggml_type tk, ggml_type tv);
    // Tensor headers in ctx (allocated by the owner); throws when a type does not suit the heads.
    void declare(ggml_context * ctx, const HParams & hp, int n_ctx, ggml_type tk, ggml_type tv, bool rotate);
    void upload_constants() const;     // the rotations, once allocated
};

} // namespace luce
