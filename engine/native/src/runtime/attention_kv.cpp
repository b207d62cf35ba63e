// attention_kv.cpp — see attention_kv.h.
#include "attention_kv.h"
#include "error.h"

#include "ggml-backend.h"

#include <cmath>
#include <string>

namespace luce {

ggml_type cache_ggml_type(luce_cache_type t) {
    switch (t) {
        case LUCE_CACHE_F16:  return GGML_TYPE_F16;
        case LUCE_CACHE_Q8_0: return GGML_TYPE_Q8_0;
        case LUCE_CACHE_Q4_0: return GGML_TYPE_Q4_0;
    }
    throw Error(LUCE_ERR_INVALID_ARG, "unknown KV cache type " + std::to_string(int(t)));
}

const char * cache_type_name(luce_cache_type t) {
    switch (t) {
        case LUCE_CACHE_F16:  return "f16";
        case LUCE_CACHE_Q8_0: return "q8_0";
        case LUCE_CACHE_Q4_0: return "q4_0";
    }
    return "?";
}

int hadamard_block(int head_dim) {
    if (head_dim % 64 != 0) return 0;
    int n = 64;
    while (head_dim % (n * 2) == 0) n *= 2;
    return n;
}

// Sylvester construction scaled by 1/sqrt(n): orthonormal and symmetric, so H·H = I.
static std::vector<float> hadamard_matrix(int n) {
    std::vector<float> h(size_t(n) * n);
    h[0] = 1.0f / std::sqrt(float(n));
    for (int s = 1; s < n; s *= 2) {
        for (int i = 0; i < s; ++i) {
            for (int j = 0; j < s; ++j) {
                const float v = h[size_t(i) * n + j];
                h[size_t(i + s) * n + j] = v;
                h[size_t(i) * n + j + s] = v;
                h[size_t(i + s) * n + j + s] = -v;
            }
        }
    }
    return h;
}

uint64_t AttentionKv::bytes(const HParams & hp, int n_ctx, ggml_type tk, ggml_type tv) {
    const int64_t row = int64_t(hp.head_dim) * hp.n_head_kv;
    uint64_t total = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!hp.is_recurrent(il)) total += uint64_t(n_ctx) * (ggml_row_size(tk, row) + ggml_row_size(tv, row));
    }
    return total;
}

void AttentionKv::declare(ggml_context * ctx, const HParams & hp, int n_ctx, ggml_type tk, ggml_type tv, bool rotate) {
    type_k = tk;
    type_v = tv;
    // Attention reads the cache per head, so a quantization block must not straddle two heads.
    for (ggml_type t : {tk, tv}) {
        if (hp.head_dim % ggml_blck_size(t) != 0) {
            throw Error(LUCE_ERR_UNSUPPORTED, std::string("KV cache type ") + ggml_type_name(t) + " needs a head size that is a multiple of " +
                                                  std::to_string(ggml_blck_size(t)) + " (this model's is " +
                                                  std::to_string(hp.head_dim) + "); use --cache-type f16");
        }
    }
    const int64_t row = int64_t(hp.head_dim) * hp.n_head_kv;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (hp.is_recurrent(il)) {
            k.push_back(nullptr);
            v.push_back(nullptr);
            continue;
        }
        k.push_back(ggml_new_tensor_2d(ctx, tk, row, n_ctx));
        v.push_back(ggml_new_tensor_2d(ctx, tv, row, n_ctx));
        ggml_format_name(k.back(), "cache_k_l%d", il);
        ggml_format_name(v.back(), "cache_v_l%d", il);
    }
    const int nrot = hadamard_block(hp.head_dim);
    if (rotate && nrot > 0 && ggml_is_quantized(tk)) rot_k = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, nrot, nrot);
    if (rotate && nrot > 0 && ggml_is_quantized(tv)) rot_v = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, 64);
}

void AttentionKv::upload_constants() const {
    if (rot_k) { auto h = hadamard_matrix(int(rot_k->ne[0])); ggml_backend_tensor_set(rot_k, h.data(), 0, h.size() * 4); }
    if (rot_v) { auto h = hadamard_matrix(64); ggml_backend_tensor_set(rot_v, h.data(), 0, h.size() * 4); }
}

} // namespace luce
