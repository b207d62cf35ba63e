#include "kv_cache.h"

#include "device.h"
#include "error.h"

#include "ggml-alloc.h"

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

uint64_t KvCache::attention_bytes(const HParams & hp, int n_ctx, ggml_type tk, ggml_type tv) {
    const int64_t row = int64_t(hp.head_dim) * hp.n_head_kv;
    uint64_t total = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!hp.is_recurrent(il)) total += uint64_t(n_ctx) * (ggml_row_size(tk, row) + ggml_row_size(tv, row));
    }
    return total;
}

uint64_t KvCache::recurrent_bytes(const HParams & hp, int n_verify_max, bool replay) {
    return bytes_needed(hp, 0, GGML_TYPE_F16, GGML_TYPE_F16, n_verify_max, replay);
}

uint64_t KvCache::bytes_needed(const HParams & hp, int n_ctx, ggml_type tk, ggml_type tv, int n_verify_max, bool replay) {
    const int64_t row = int64_t(hp.head_dim) * hp.n_head_kv;
    uint64_t total = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (hp.is_recurrent(il)) {
            const uint64_t state = uint64_t(hp.ssm_state) * hp.ssm_state * hp.ssm_heads;
            total += 4ull * (uint64_t(hp.ssm_conv - 1) * hp.conv_channels() + state);
            if (n_verify_max > 0) {
                const uint64_t per_token = replay ? 2ull * hp.ssm_heads : state;   // decay and beta, or a snapshot
                total += 4ull * (uint64_t(hp.ssm_conv - 1 + n_verify_max) * hp.conv_channels() + per_token * n_verify_max);
            }
        } else {
            total += uint64_t(n_ctx) * (ggml_row_size(tk, row) + ggml_row_size(tv, row));
        }
    }
    return total;
}

void KvCache::allocate(const Model & m, int n_ctx_in, ggml_type tk, ggml_type tv, bool rotate, int n_verify_max_in,
                       bool replay_in) {
    n_verify_max = n_verify_max_in;
    replay = replay_in && n_verify_max > 0 && m.hp.hybrid();
    const HParams & hp = m.hp;
    n_ctx = n_ctx_in;
    type_k = tk;
    type_v = tv;
    const int64_t row = int64_t(hp.head_dim) * hp.n_head_kv;
    // Attention reads the cache per head, so a quantization block must not straddle two heads.
    for (ggml_type t : {tk, tv}) {
        if (hp.head_dim % ggml_blck_size(t) != 0) {
            throw Error(LUCE_ERR_UNSUPPORTED, std::string("KV cache type ") + ggml_type_name(t) + " needs a head size that is a multiple of " +
                                                  std::to_string(ggml_blck_size(t)) + " (this model's is " +
                                                  std::to_string(hp.head_dim) + "); use --cache-type f16");
        }
    }
    ggml_init_params ip = {ggml_tensor_overhead() * size_t(6 * hp.n_layer + 4), nullptr, true};
    ctx = ggml_init(ip);
    for (int il = 0; il < hp.n_layer; ++il) {
        if (hp.is_recurrent(il)) {
            k.push_back(nullptr);
            v.push_back(nullptr);
            conv.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm_conv - 1, hp.conv_channels()));
            ssm.push_back(ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hp.ssm_state, hp.ssm_state, hp.ssm_heads, 1));
            ggml_format_name(conv.back(), "conv_state_l%d", il);
            ggml_format_name(ssm.back(), "ssm_state_l%d", il);
            const bool rollback = n_verify_max > 0 && hp.hybrid();
            conv_hist.push_back(rollback ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm_conv - 1 + n_verify_max, hp.conv_channels())
                                         : nullptr);
            ssm_snap.push_back(rollback && !replay
                                   ? ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hp.ssm_state, hp.ssm_state, hp.ssm_heads, n_verify_max)
                                   : nullptr);
            replay_g.push_back(replay ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm_heads, n_verify_max) : nullptr);
            replay_beta.push_back(replay ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm_heads, n_verify_max) : nullptr);
            continue;
        }
        conv.push_back(nullptr);
        ssm.push_back(nullptr);
        conv_hist.push_back(nullptr);
        ssm_snap.push_back(nullptr);
        replay_g.push_back(nullptr);
        replay_beta.push_back(nullptr);
        k.push_back(ggml_new_tensor_2d(ctx, tk, row, n_ctx));
        v.push_back(ggml_new_tensor_2d(ctx, tv, row, n_ctx));
        ggml_format_name(k.back(), "cache_k_l%d", il);
        ggml_format_name(v.back(), "cache_v_l%d", il);
    }
    const int nrot = hadamard_block(hp.head_dim);
    if (rotate && nrot > 0 && ggml_is_quantized(tk)) rot_k = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, nrot, nrot);
    if (rotate && nrot > 0 && ggml_is_quantized(tv)) rot_v = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, 64);
    vocab_ramp = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, hp.n_vocab);

    buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_dev_buffer_type(m.dev));
    if (!buffer) {
        throw Error(LUCE_ERR_MEMORY, "cannot allocate " + format_bytes(bytes_needed(hp, n_ctx, tk, tv, n_verify_max, replay)) +
                                         " for the KV cache on " + m.device_name + "; lower --max-ctx or use a smaller --cache-type");
    }
    ggml_backend_buffer_clear(buffer, 0);
    if (rot_k) { auto h = hadamard_matrix(int(rot_k->ne[0])); ggml_backend_tensor_set(rot_k, h.data(), 0, h.size() * 4); }
    if (rot_v) { auto h = hadamard_matrix(64); ggml_backend_tensor_set(rot_v, h.data(), 0, h.size() * 4); }
    if (vocab_ramp) {
        std::vector<float> r(size_t(hp.n_vocab));
        for (int32_t i = 0; i < hp.n_vocab; ++i) r[size_t(i)] = float(hp.n_vocab - i);
        ggml_backend_tensor_set(vocab_ramp, r.data(), 0, r.size() * sizeof(float));
    }
}

void KvCache::Capture::reset() {
    if (buffer) ggml_backend_buffer_free(buffer);
    if (ctx) ggml_free(ctx);
    buffer = nullptr;
    ctx = nullptr;
    rings.clear();
    layers.clear();
    ring = 0;
}

void KvCache::clear_recurrent_state() {
    for (ggml_tensor * t : conv) if (t) ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));
    for (ggml_tensor * t : ssm) if (t) ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));
}

KvCache::~KvCache() {
    if (buffer) ggml_backend_buffer_free(buffer);
    if (ctx) ggml_free(ctx);
}

} // namespace luce
