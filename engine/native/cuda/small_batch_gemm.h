// small_batch_gemm.h — quantized weight × a few activation columns on CUDA (1..32 columns).
//
// ggml's CUDA backend has two kernels for quantized weights: MMVQ (up to 8 columns, re-unpacks the
// weights for every column) and MMQ (tiles for large batches). A 16-token verify falls to MMQ,
// which moves Q4_K weights at about 1 TB/s on an H200 (bench/RESULTS.md), so verifying 16 tokens
// cost 2.2 decode steps. These kernels unpack each weight block once and multiply it with all
// columns on the tensor cores (f16 mma), so the weights stream at close to copy bandwidth.
//
// Numerics follow ggml's q8_1 path: activations are quantized to int8 per 32 values with a float
// scale, and the f16 kernels take those int8 values times their scale, and the 32 values' sums, in
// f16; Q4_K and Q6_K weights enter the mma as exact f16 integers, block scales apply in float.
#pragma once

#include <cstddef>
#include <cstdint>

namespace luce::cuda {

constexpr int kSmallGemmMaxCols = 32;

// Weight types these kernels take (ggml_type values: GGML_TYPE_Q4_K = 12, GGML_TYPE_Q6_K = 14).
bool small_gemm_supports(int ggml_type);

struct SmallGemm {
    int type;                 // ggml_type of the weights
    const void * w;           // device pointer: nrows rows of k values, row_bytes apart
    int64_t nrows, k;         // k a multiple of 256
    size_t row_bytes;
    const float * x;          // device pointer: n columns of k floats, x_stride floats apart
    int64_t x_stride;
    int n;                    // 1..kSmallGemmMaxCols
    float * y;                // device pointer: n columns of nrows floats, y_stride floats apart
    int64_t y_stride;
};

// Device scratch of one call with k values and n columns (n rounded up to a multiple of 8): the
// quantized activations, f16 values and an f16 sum per 32.
inline size_t small_gemm_scratch_bytes(int64_t k, int n) {
    const size_t n_pad = size_t(8 * ((n + 7) / 8));
    return n_pad * size_t(k) * 2 + size_t(k / 32) * n_pad * 2;
}

// Quantizes the activations into `scratch` (a pointer from small_gemm_scratch_bytes's size), in the
// layout the kernels read.
// Calls that share x and n may share one quantization: see small_gemm_multiply.
// stream: a cudaStream_t. Returns 0, or a CUDA error code.
int small_gemm_quantize(const SmallGemm & g, void * scratch, void * stream);
// y = W x from activations already quantized by small_gemm_quantize (same x, k and n).
int small_gemm_multiply(const SmallGemm & g, void * scratch, void * stream);

// Smallest compute capability the kernels run on (f16 mma.sync with f32 accumulation, as ggml's
// CUDA backend uses it, from sm_80).
constexpr int kSmallGemmMinCC = 80;

} // namespace luce::cuda
