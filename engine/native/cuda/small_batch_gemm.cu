// small_batch_gemm.cu — see small_batch_gemm.h. The kernels; what they multiply (weight formats,
// activation layouts, mma primitives) is in small_batch_formats.cuh.
//
// quantize_columns writes a call's activations once in every layout the formats read.
//
// gemm_small: a block of 8 warps owns R tiles of 16 weight rows (R = 1 for both formats today); the
// warps of a tile take its 256-value superblocks round-robin (8 / R ways). The partial sums meet in
// shared memory in a fixed order, so results are deterministic. The next superblock's weights are
// loaded before the current one is multiplied.
#include "small_batch_gemm.h"
#include "small_batch_formats.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace luce::cuda {
namespace {

constexpr int kWarps = 8;         // warps per block, splitting one row tile's superblocks
constexpr int kThreads = 32 * kWarps;

// One warp per (32 values, column): q8_1's int8 quantization (scale amax/127), written as q * d in
// f16 in xh_index's order, and the sum of the float values as f16.
__global__ void quantize_columns(const float * __restrict__ x, int64_t x_stride, int n, int n_pad, int64_t k,
                                 __half * __restrict__ xh, __half * __restrict__ xsum) {
    const int64_t pair = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;   // (32-block, column), column fastest
    const int lane = threadIdx.x % 32;
    const int64_t n_blocks = k / 32;
    if (pair >= n_blocks * n_pad) return;
    const int col = int(pair % n_pad);
    const int64_t b = pair / n_pad;
    const float v = col < n ? x[col * x_stride + b * 32 + lane] : 0.0f;
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const int q = amax == 0.0f ? 0 : __float2int_rn(v / d);
    float sum = v;   // of the float values, as ggml's q8_1
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const int64_t i = b / 8;
    const int sb = int(b % 8);
    // ggml's q8_1 value q * d (not v itself): the f16 kernel then rounds like ggml's int8 kernels
    // (up to f16's 11 bits, finer than q8_1's step), so verify stays close to single-token decoding
    xh[xh_index(i, sb, lane, col, n_pad)] = __float2half_rn(float(q) * d);
    // the sums as the f16 kernel's min-term mma takes them: [superblock][column][sub-block]
    if (lane == 0) xsum[(i * n_pad + col) * 8 + sb] = __float2half_rn(sum);
}

// ---- shared epilogue: sum the warps' partials in a fixed order and store -------------------------
// The block's rows start at row0: R tiles of 16, warp w holding tile w % R of K split w / R.
template <int NT, int R>
__device__ __forceinline__ void reduce_and_store(float (&acc)[NT][4], float * __restrict__ y, int64_t y_stride,
                                                 int64_t row0, int64_t nrows, int n) {
    constexpr int n_pad = 8 * NT;
    __shared__ float red[kWarps][kTileRows][n_pad];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        red[warp][g][nt * 8 + 2 * t] = acc[nt][0];
        red[warp][g][nt * 8 + 2 * t + 1] = acc[nt][1];
        red[warp][g + 8][nt * 8 + 2 * t] = acc[nt][2];
        red[warp][g + 8][nt * 8 + 2 * t + 1] = acc[nt][3];
    }
    __syncthreads();
    constexpr int rows = kTileRows * R;
    for (int idx = threadIdx.x; idx < rows * n_pad; idx += kThreads) {
        const int r = idx % rows, c = idx / rows;   // consecutive threads: consecutive rows
        if (c >= n || row0 + r >= nrows) continue;
        float s = 0.0f;
#pragma unroll
        for (int ks = 0; ks < kWarps / R; ++ks) s += red[ks * R + r / kTileRows][r % kTileRows][c];
        y[int64_t(c) * y_stride + row0 + r] = s;
    }
}

// The kernel, for either format: MINB blocks per SM (a register cap), whether the next superblock's
// weights are loaded while this one is multiplied, R row tiles per block sharing their activation loads.
template <class Format, int NT, int MINB, bool PREFETCH, int R>
__global__ void __launch_bounds__(kThreads, MINB) gemm_small(const uint8_t * __restrict__ w, size_t row_bytes, int64_t nrows,
                                                        int64_t n_super, const QuantizedCols cols, int n,
                                                        float * __restrict__ y, int64_t y_stride) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int ks = warp / R;                                              // this warp's K split
    const int64_t block_row0 = int64_t(blockIdx.x) * kTileRows * R;
    const int64_t row0 = block_row0 + (warp % R) * kTileRows;
    const uint8_t * wa = w + min(row0 + g, nrows - 1) * row_bytes;       // rows past the end repeat the last
    const uint8_t * wb = w + min(row0 + g + 8, nrows - 1) * row_bytes;   // one; their sums are not stored
    constexpr int step = kWarps / R;
    float acc[NT][4] = {};

    typename Format::Rows cur, next;
    int64_t i = ks;
    if (PREFETCH && i < n_super) Format::load(cur, wa + i * Format::kBytes, wb + i * Format::kBytes, t);
    for (; i < n_super; i += step) {
        if (!PREFETCH) {
            Format::load(cur, wa + i * Format::kBytes, wb + i * Format::kBytes, t);
        } else if (i + step < n_super) {
            Format::load(next, wa + (i + step) * Format::kBytes, wb + (i + step) * Format::kBytes, t);
        }
        Format::template multiply<NT>(cur, acc, cols, i, g, t);
        if (PREFETCH) cur = next;
    }
    reduce_and_store<NT, R>(acc, y, y_stride, block_row0, nrows, n);
}

int n_tiles(int n) { return (n + 7) / 8; }

template <class Format, int NT, int MINB, bool PREFETCH, int R = 1>
cudaError_t launch1(const SmallGemm & g, const QuantizedCols & cols, cudaStream_t s) {
    const dim3 grid(unsigned((g.nrows + kTileRows * R - 1) / (kTileRows * R)));
    gemm_small<Format, NT, MINB, PREFETCH, R><<<grid, kThreads, 0, s>>>(static_cast<const uint8_t *>(g.w), g.row_bytes, g.nrows,
                                                                       g.k / kQK, cols, g.n, g.y, g.y_stride);
    return cudaGetLastError();
}

// One block of 8 warps per 16-row tile, the next superblock prefetched, 2 blocks per SM; Q4_K and
// Q6_K both on f16 tensor cores.
template <int NT>
cudaError_t launch(const SmallGemm & g, const QuantizedCols & cols, cudaStream_t s) {
    return g.type == 14 ? launch1<Q6KHalf, NT, 2, true>(g, cols, s) : launch1<Q4KHalf, NT, 2, true>(g, cols, s);
}

int padded_cols(const SmallGemm & g) { return 8 * n_tiles(g.n); }

// Where small_batch_gemm.h's scratch parts lie for k values and n_pad columns.
QuantizedCols scratch_cols(void * scratch, int64_t k, int n_pad) {
    auto * base = static_cast<char *>(scratch);
    QuantizedCols c;
    c.xh = reinterpret_cast<const uint4 *>(base);
    c.xsum = reinterpret_cast<const uint32_t *>(base + xh_bytes(k, n_pad));
    c.k = k;
    c.n_pad = n_pad;
    return c;
}

} // namespace

bool small_gemm_supports(int ggml_type) { return ggml_type == 12 || ggml_type == 14; }

int small_gemm_quantize(const SmallGemm & g, void * scratch, void * stream) {
    if (g.n < 1 || g.n > kSmallGemmMaxCols || g.k % kQK != 0) return int(cudaErrorInvalidValue);
    const int n_pad = padded_cols(g);
    const QuantizedCols c = scratch_cols(scratch, g.k, n_pad);
    const int64_t pairs = (g.k / 32) * n_pad;
    quantize_columns<<<unsigned((pairs + kWarps - 1) / kWarps), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        g.x, g.x_stride, g.n, n_pad, g.k, reinterpret_cast<__half *>(const_cast<uint4 *>(c.xh)),
        reinterpret_cast<__half *>(const_cast<uint32_t *>(c.xsum)));
    return int(cudaGetLastError());
}

int small_gemm_multiply(const SmallGemm & g, void * scratch, void * stream) {
    if (!small_gemm_supports(g.type) || g.n < 1 || g.n > kSmallGemmMaxCols || g.k % kQK != 0) {
        return int(cudaErrorInvalidValue);
    }
    const QuantizedCols cols = scratch_cols(scratch, g.k, padded_cols(g));
    auto s = static_cast<cudaStream_t>(stream);
    switch (n_tiles(g.n)) {
        case 1: return int(launch<1>(g, cols, s));
        case 2: return int(launch<2>(g, cols, s));
        case 3: return int(launch<3>(g, cols, s));
        default: return int(launch<4>(g, cols, s));
    }
}

} // namespace luce::cuda
