// small_batch_gemm.h — quantized weight × a few activation columns on CUDA (2..32 columns).
//
// ggml's CUDA backend has two kernels for quantized weights: MMVQ (up to 8 columns, re-unpacks the
// weights for every column) and MMQ (tiles for large batches). A 16-token verify falls to MMQ,
// which moves Q4_K weights at about 1 TB/s on an H200 (bench/RESULTS.md), so verifying 16 tokens
// cost 2.2 decode steps. These kernels unpack each weight block once and multiply it with all
// columns on the tensor cores (int8 mma), so the weights stream at close to copy bandwidth.
//
// Numerics follow ggml's: activations are quantized to int8 per 32 values with a float scale (and
// the scaled sum, for Q4_K's minimums), dot products are exact in int32, block scales apply in float.
#pragma once

#include <cstddef>
#include <cstdint>

namespace luce::cuda {

constexpr int kSmallGemmMaxCols = 32;

// Kernel variants, for measurement (LUCE_SMALL_GEMM_VARIANT):
//   1: 16 weight rows x 8 columns per mma (weights as the A operand), next superblock prefetched;
//   2: 16 columns x 8 weight rows per mma (weights as B), 32 rows a warp;
//   3: 1 capped at 128 registers (2 blocks per SM); 4: 1 without prefetch, 3 blocks per SM;
//   5: 1 without prefetch, 4 blocks per SM.
constexpr int kSmallGemmDefaultVariant = 3;

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
    int variant = kSmallGemmDefaultVariant;
};

// Device scratch for the quantized activations of one call with k values and n columns.
size_t small_gemm_scratch_bytes(int64_t k, int n);

// Quantizes the activations into `scratch` (a pointer from small_gemm_scratch_bytes's size).
// Calls that share x and n may share one quantization: see small_gemm_multiply.
// stream: a cudaStream_t. Returns 0, or a CUDA error code.
int small_gemm_quantize(const SmallGemm & g, void * scratch, void * stream);
// y = W x from activations already quantized by small_gemm_quantize (same x, k and n).
int small_gemm_multiply(const SmallGemm & g, const void * scratch, void * stream);

// Smallest compute capability the kernels run on (int8 mma.sync m16n8k32 needs sm_80).
constexpr int kSmallGemmMinCC = 80;

} // namespace luce::cuda
