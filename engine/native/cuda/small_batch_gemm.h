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
// f16; Q4_K, Q6_K, Q8_0 and Q4_1 weights enter the mma as exact f16 integers, block scales apply in float.
// A column's result does not depend on how many other columns the call has: a token gets the same
// matmul outputs in a 1-token step as in a 16-token verify.
#pragma once

#include <cstddef>
#include <cstdint>

namespace luce::cuda {

constexpr int kSmallGemmMaxCols = 32;

// Weight types these kernels take (ggml_type values).
constexpr int kTypeQ41 = 3, kTypeQ80 = 8, kTypeQ4K = 12, kTypeQ6K = 14;
constexpr bool small_gemm_supports(int ggml_type) {
    return ggml_type == kTypeQ41 || ggml_type == kTypeQ80 || ggml_type == kTypeQ4K || ggml_type == kTypeQ6K;
}
// The row lengths k they take: whole superblocks of 256 for Q4_K and Q6_K; for Q8_0 and Q4_1 any
// multiple of 64 (rows of an even number of 34- or 20-byte blocks stay 4-byte aligned), the last
// 256-value step partial (SmolLM2's k = 576, its draft's 576 and 2880).
constexpr int small_gemm_k_multiple(int ggml_type) { return ggml_type == kTypeQ80 || ggml_type == kTypeQ41 ? 64 : 256; }
constexpr bool small_gemm_takes(int ggml_type, int64_t k) {
    return small_gemm_supports(ggml_type) && k > 0 && k % small_gemm_k_multiple(ggml_type) == 0;
}
// Bytes of one row's 256 values in that type (0 for a type the kernels do not take).
size_t small_gemm_step_bytes(int ggml_type);
// Bytes of a row of k values in that type (0 for a type the kernels do not take).
size_t small_gemm_row_bytes(int ggml_type, int64_t k);

struct SmallGemm {
    int type;                 // ggml_type of the weights
    const void * w;           // device pointer: nrows rows of k values, row_bytes apart
    int64_t nrows, k;         // small_gemm_takes(type, k)
    size_t row_bytes;
    const float * x;          // device pointer: n columns of k floats, x_stride floats apart
    int64_t x_stride;
    int n;                    // 1..kSmallGemmMaxCols
    float * y;                // device pointer: n columns of nrows floats, y_stride floats apart
    int64_t y_stride;
    int n_sm = 132;           // the device's multiprocessors (sizes the grid)
};

// How a call is spread over the GPU: blocks of 8 warps hold `row_tiles` tiles of 16 rows (8 /
// row_tiles warps share a tile's superblocks), and the superblocks are cut into `k_splits` ranges
// computed by separate blocks, whose partial sums the last of them adds in a fixed order (results
// stay deterministic). row_tiles 0 picks the whole geometry from the shape (small_gemm_geometry).
// blocks_per_sm: 2 (each warp loads the next superblock while it multiplies one), 3 or 4 (fewer
// registers, no prefetch: more warps hide the loads instead).
struct SmallGemmGeometry {
    int row_tiles = 0;        // 1, 2, 4 or 8
    int k_splits = 0;         // 1..kSmallGemmMaxSplits
    int blocks_per_sm = 2;    // 2, 3 or 4
};
constexpr int kSmallGemmMaxSplits = 16;
SmallGemmGeometry small_gemm_geometry(const SmallGemm & g);

// Device scratch of one call with k values and n columns (n rounded up to a multiple of 8): the
// quantized activations (f16 values and an f16 sum per 32), then the K splits' partial sums and
// one counter per block row.
constexpr size_t kSmallGemmSplitBytes = size_t(8) << 20;
constexpr int kSmallGemmSplitRowBlocks = 8192;
// k counts whole 256-value steps: a partial last step's missing values are quantized as zeros.
inline size_t small_gemm_scratch_bytes(int64_t k, int n) {
    const size_t n_pad = size_t(8 * ((n + 7) / 8));
    const int64_t k_steps = (k + 255) / 256 * 256;
    const size_t activations = n_pad * size_t(k_steps) * 2 + size_t(k_steps / 32) * n_pad * 2;
    return (activations + 255) / 256 * 256 + kSmallGemmSplitBytes + kSmallGemmSplitRowBlocks * sizeof(uint32_t);
}

// Quantizes the activations into `scratch` (a pointer from small_gemm_scratch_bytes's size, zeroed
// once when allocated: the split counters start at zero and every call leaves them so), in the
// layout the kernels read.
// Calls that share x and n may share one quantization: see small_gemm_multiply.
// stream: a cudaStream_t. Returns 0, or a CUDA error code.
int small_gemm_quantize(const SmallGemm & g, void * scratch, void * stream);
// y = W x from activations already quantized by small_gemm_quantize (same x, k and n). A geometry
// the shape cannot take (too many splits for the scratch) is reduced to one it can.
int small_gemm_multiply(const SmallGemm & g, void * scratch, void * stream, SmallGemmGeometry geometry = {});

// Smallest compute capability the kernels run on (f16 mma.sync with f32 accumulation, as ggml's
// CUDA backend uses it, from sm_80).
constexpr int kSmallGemmMinCC = 80;

} // namespace luce::cuda
