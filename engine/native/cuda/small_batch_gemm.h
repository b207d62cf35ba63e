// small_batch_gemm.h — quantized weight × a few activation columns on CUDA (1..32 columns).
//
// ggml's CUDA backend has two kernels for quantized weights: MMVQ (up to 8 columns, re-unpacks the
// weights for every column) and MMQ (tiles for large batches). A 16-token verify falls to MMQ,
// which moves Q4_K weights at about 1 TB/s on an H200 (bench/RESULTS.md), so verifying 16 tokens
// cost 2.2 decode steps. These kernels unpack each weight block once and multiply it with all
// columns on the tensor cores (int8 mma), so the weights stream at close to copy bandwidth.
//
// Numerics of the int8 kernel follow ggml's: activations are quantized to int8 per 32 values with a
// float scale (and the sum, for Q4_K's minimums), dot products are exact in int32, block scales
// apply in float. The f16 kernels (Q4_K in variants 7..10 and 12, Q6_K in 10 and 12) take the
// same int8 activations times their scale, and their sums, in f16.
#pragma once

#include <cstddef>
#include <cstdint>

namespace luce::cuda {

constexpr int kSmallGemmMaxCols = 32;

// Kernel variants (LUCE_SMALL_GEMM_VARIANT). 1..6 are the int8 kernel's trade-offs: the next
// superblock prefetched with 1 (1) or 2 (2) blocks per SM, or not prefetched with 3 (3) or 4 (4)
// blocks per SM; 5 and 6 are 2 with 2 or 4 row tiles per block sharing their activation loads.
// 7, 8 and 9 run Q4_K on f16 tensor cores (q8_1's activations in f16, a float epilogue per
// superblock instead of per mma) and Q6_K as 2; they differ in the rows a block (see
// q4k_half_tiles). 10 and 11 cut each matrix into equal shares per warp (gemm_stream): 10 with
// the f16 kernels for both weight types, 11 with the int8 ones. 12 is 9 with Q6_K on f16 too. On
// the H200 with the 27B-shaped file (bench/RESULTS.md), 2 was the fastest of 1..6 at 16 columns
// and 9 of 7..9; of 2, 9..12, 12 is the fastest at 4, 8 and 16 columns (16-token verify 19.49 ms
// against 22.48 for 2; the balanced 10 and 11 are slower, 24.2 and 27.1) and the default. The
// exactness suite passes on the H200 with 12 and with 2.
constexpr int kSmallGemmDefaultVariant = 12;
constexpr int kSmallGemmMaxVariant = 12;

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

// Device scratch of one call with k values and n columns (n rounded up to a multiple of 8): the
// balanced kernel's arrival counters, one per 16-row tile (zero between calls: zero-fill the scratch
// once after allocating it) and its partial sums (two 16-row tiles per warp); the quantized
// activations: for the int8 kernels int8 values and a (scale, sum) float pair per 32, for the f16
// kernel the values and a sum per 32 as f16. Matrices of more tiles than kSmallGemmStreamTiles
// take the unbalanced kernels.
constexpr int64_t kSmallGemmStreamTiles = 32768;
constexpr int64_t kSmallGemmStreamWorkers = 4096;
inline size_t small_gemm_scratch_bytes(int64_t k, int n) {
    const size_t n_pad = size_t(8 * ((n + 7) / 8));
    return size_t(kSmallGemmStreamTiles) * sizeof(unsigned) + size_t(kSmallGemmStreamWorkers) * 2 * 16 * n_pad * sizeof(float) +
           n_pad * size_t(k) + size_t(k / 32) * n_pad * 2 * sizeof(float) + n_pad * size_t(k) * 2 + size_t(k / 32) * n_pad * 2;
}

// Quantizes the activations into `scratch` (a pointer from small_gemm_scratch_bytes's size), in the
// layouts g.variant's kernels read.
// Calls that share x and n may share one quantization: see small_gemm_multiply.
// stream: a cudaStream_t. Returns 0, or a CUDA error code.
int small_gemm_quantize(const SmallGemm & g, void * scratch, void * stream);
// y = W x from activations already quantized by small_gemm_quantize (same x, k, n and variant).
int small_gemm_multiply(const SmallGemm & g, void * scratch, void * stream);

// Smallest compute capability the kernels run on (int8 mma.sync m16n8k32 needs sm_80).
constexpr int kSmallGemmMinCC = 80;

} // namespace luce::cuda
