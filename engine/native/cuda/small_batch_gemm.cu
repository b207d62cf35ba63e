// small_batch_gemm.cu — see small_batch_gemm.h. The kernels; what they multiply (weight formats,
// activation layouts, mma primitives) is in small_batch_formats.cuh.
//
// quantize_columns writes a call's activations once in every layout the formats read.
//
// gemm_small: a block of 8 warps owns R tiles of 16 weight rows; the warps of a tile take its
// 256-value superblocks of the block's K split round-robin (8 / R ways). The partial sums meet in
// shared memory, and the K splits in the scratch, in a fixed order, so results are deterministic.
// Loads stay in flight either through more blocks an SM or by loading a warp's next superblock
// before it multiplies the current one (small_batch_gemm.h's SmallGemmGeometry).
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
// f16 in xh_index's order, and the sum of the float values as f16. The blocks past k that fill a
// partial last 256-value step are written as zeros (the weights' missing blocks meet them).
__global__ void quantize_columns(const float * __restrict__ x, int64_t x_stride, int n, int n_pad, int64_t k,
                                 __half * __restrict__ xh, __half * __restrict__ xsum) {
    const int64_t pair = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;   // (32-block, column), column fastest
    const int lane = threadIdx.x % 32;
    const int64_t n_blocks = (k + kQK - 1) / kQK * 8;
    if (pair >= n_blocks * n) return;
    const int col = int(pair % n);
    const int64_t b = pair / n;
    const float v = b * 32 < k ? x[col * x_stride + b * 32 + lane] : 0.0f;
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

// ---- epilogue: sum the warps' partials in a fixed order, then store or meet the other K splits ------
// The block's rows start at row0: R tiles of 16, warp w holding tile w % R of in-block K split w / R.
// With one K split the sums are the outputs. Otherwise each split's block writes its sums to
// `partial` ([split][column][row]); the block that arrives last at its row block's counter adds the
// splits in order 0, 1, ... (the same order whichever arrives last) and resets the counter.
template <int NT, int R>
__device__ __forceinline__ void reduce_and_store(float (&acc)[NT][4], float * __restrict__ y, int64_t y_stride,
                                                 int64_t row0, int64_t nrows, int n, float * __restrict__ partial,
                                                 uint32_t * __restrict__ counters) {
    constexpr int n_pad = 8 * NT;
    __shared__ float red[kWarps][kTileRows][n_pad];
    __shared__ bool last;
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
    const int splits = int(gridDim.y);
    for (int idx = threadIdx.x; idx < rows * n_pad; idx += kThreads) {
        const int r = idx % rows, c = idx / rows;   // consecutive threads: consecutive rows
        if (c >= n || row0 + r >= nrows) continue;
        float s = 0.0f;
#pragma unroll
        for (int ks = 0; ks < kWarps / R; ++ks) s += red[ks * R + r / kTileRows][r % kTileRows][c];
        if (splits == 1) {
            y[int64_t(c) * y_stride + row0 + r] = s;
        } else {
            __stcg(partial + (int64_t(blockIdx.y) * n + c) * nrows + row0 + r, s);
        }
    }
    if (splits == 1) return;
    __threadfence();   // this block's partials are visible before its arrival is counted
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(counters + blockIdx.x, 1u) == unsigned(splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int idx = threadIdx.x; idx < rows * n_pad; idx += kThreads) {
        const int r = idx % rows, c = idx / rows;
        if (c >= n || row0 + r >= nrows) continue;
        float s = 0.0f;
        for (int sp = 0; sp < splits; ++sp) s += __ldcg(partial + (int64_t(sp) * n + c) * nrows + row0 + r);
        y[int64_t(c) * y_stride + row0 + r] = s;
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0;   // ready for the next call
}

// The kernel, for either format: a block holds R row tiles of 16, its 8 / R warps per tile taking
// the tile's superblocks of this block's K split (blockIdx.y) round-robin. With PREFETCH each warp
// loads the next superblock's weights before it multiplies the current one (two blocks an SM fit
// the registers); without, MINB blocks an SM hide the loads by their number.
template <class Format, int NT, int R, bool PREFETCH, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) gemm_small(const uint8_t * __restrict__ w, size_t row_bytes, int64_t nrows,
                                                             int64_t n_super, int last_blocks, int64_t per_split, const QuantizedCols cols,
                                                             float * __restrict__ y, int64_t y_stride, float * __restrict__ partial,
                                                             uint32_t * __restrict__ counters) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int ks = warp / R;                                              // this warp's in-block K split
    const int64_t block_row0 = int64_t(blockIdx.x) * kTileRows * R;
    const int64_t row0 = block_row0 + (warp % R) * kTileRows;
    const uint8_t * wa = w + min(row0 + g, nrows - 1) * row_bytes;       // rows past the end repeat the last
    const uint8_t * wb = w + min(row0 + g + 8, nrows - 1) * row_bytes;   // one; their sums are not stored
    constexpr int step = kWarps / R;
    const int64_t end = min(n_super, int64_t(blockIdx.y + 1) * per_split);
    float acc[NT][4] = {};

    typename Format::Rows cur, next;
    int64_t i = int64_t(blockIdx.y) * per_split + ks;
    // whole steps in the loop; a Q8_0 or Q4_1 partial last step (last_blocks < 8, in a kernel of its own)
    // after it, by the warp whose turn it is, so the loop keeps its registers
    int64_t end_whole = end;
    if constexpr (Format::kPartialSteps) end_whole = min(end, n_super - 1);
    if (PREFETCH && i < end_whole) Format::load(cur, wa + i * Format::kBytes, wb + i * Format::kBytes, t, kQ80Blocks);
    for (; i < end_whole; i += step) {
        if (!PREFETCH) {
            Format::load(cur, wa + i * Format::kBytes, wb + i * Format::kBytes, t, kQ80Blocks);
        } else if (i + step < end_whole) {
            Format::load(next, wa + (i + step) * Format::kBytes, wb + (i + step) * Format::kBytes, t, kQ80Blocks);
        }
        Format::template multiply<NT>(cur, acc, cols, i, g, t);
        if (PREFETCH) cur = next;
    }
    if constexpr (Format::kPartialSteps) if (i == n_super - 1 && i < end) {
        Format::load(cur, wa + i * Format::kBytes, wb + i * Format::kBytes, t, last_blocks);
        Format::template multiply<NT>(cur, acc, cols, i, g, t);
    }
    reduce_and_store<NT, R>(acc, y, y_stride, block_row0, nrows, cols.n, partial, counters);
}

int n_tiles(int n) { return (n + 7) / 8; }
int64_t n_steps(int64_t k) { return (k + kQK - 1) / kQK; }   // 256-value steps, the last maybe partial
int padded_cols(const SmallGemm & g) { return 8 * n_tiles(g.n); }

// Where small_batch_gemm.h's scratch parts lie for k values and n_pad columns.
struct ScratchParts {
    QuantizedCols cols;
    float * partial;
    uint32_t * counters;
};

ScratchParts scratch_parts(void * scratch, int64_t k_real, int n, int n_pad) {
    const int64_t k = n_steps(k_real) * kQK;   // the activations fill whole steps
    auto * base = static_cast<char *>(scratch);
    ScratchParts p;
    p.cols.xh = reinterpret_cast<const uint4 *>(base);
    p.cols.xsum = reinterpret_cast<const uint32_t *>(base + xh_bytes(k, n_pad));
    p.cols.k = k;
    p.cols.n_pad = n_pad;
    p.cols.n = n;
    const size_t activations = xh_bytes(k, n_pad) + size_t(k / 32) * size_t(n_pad) * 2;
    p.partial = reinterpret_cast<float *>(base + (activations + 255) / 256 * 256);
    p.counters = reinterpret_cast<uint32_t *>(base + (activations + 255) / 256 * 256 + kSmallGemmSplitBytes);
    return p;
}

template <class Format, int NT, int R, bool PREFETCH, int MINB>
cudaError_t launch_tiles(const SmallGemm & g, const ScratchParts & p, int splits, cudaStream_t s) {
    const int64_t n_super = n_steps(g.k);
    const int last_blocks = g.k % kQK == 0 ? kQ80Blocks : int(g.k % kQK / 32);
    const int64_t per_split = (n_super + splits - 1) / splits;
    const dim3 grid(unsigned((g.nrows + kTileRows * R - 1) / (kTileRows * R)), unsigned(splits));
    gemm_small<Format, NT, R, PREFETCH, MINB><<<grid, kThreads, 0, s>>>(static_cast<const uint8_t *>(g.w), g.row_bytes, g.nrows,
                                                                      n_super, last_blocks, per_split, p.cols, g.y, g.y_stride, p.partial,
                                                                      p.counters);
    return cudaGetLastError();
}

// Two blocks an SM (128 registers) with the next superblock loaded during the multiply, or three
// or four (85 / 64 registers) without: more warps instead of more loads per warp.
template <class Format, int NT, int R>
cudaError_t launch_blocks(const SmallGemm & g, const ScratchParts & p, SmallGemmGeometry geo, cudaStream_t s) {
    switch (geo.blocks_per_sm) {
        case 4: return launch_tiles<Format, NT, R, false, 4>(g, p, geo.k_splits, s);
        case 3: return launch_tiles<Format, NT, R, false, 3>(g, p, geo.k_splits, s);
        default: return launch_tiles<Format, NT, R, true, 2>(g, p, geo.k_splits, s);
    }
}

template <class Format, int NT>
cudaError_t launch_format(const SmallGemm & g, const ScratchParts & p, SmallGemmGeometry geo, cudaStream_t s) {
    switch (geo.row_tiles) {
        case 8: return launch_blocks<Format, NT, 8>(g, p, geo, s);
        case 4: return launch_blocks<Format, NT, 4>(g, p, geo, s);
        case 2: return launch_blocks<Format, NT, 2>(g, p, geo, s);
        default: return launch_blocks<Format, NT, 1>(g, p, geo, s);
    }
}

template <int NT>
cudaError_t launch(const SmallGemm & g, const ScratchParts & p, SmallGemmGeometry geo, cudaStream_t s) {
    switch (g.type) {
        case kTypeQ6K: return launch_format<Q6KHalf, NT>(g, p, geo, s);
        case kTypeQ80: return g.k % kQK == 0 ? launch_format<Q80Half, NT>(g, p, geo, s) : launch_format<Q80HalfPartial, NT>(g, p, geo, s);
        case kTypeQ41: return g.k % kQK == 0 ? launch_format<Q41Half, NT>(g, p, geo, s) : launch_format<Q41HalfPartial, NT>(g, p, geo, s);
        default: return launch_format<Q4KHalf, NT>(g, p, geo, s);
    }
}

int64_t row_blocks(const SmallGemm & g, int row_tiles) { return (g.nrows + kTileRows * row_tiles - 1) / (kTileRows * row_tiles); }

// The most K splits the scratch holds for this shape (the partial sums and one counter a row block).
int max_splits(const SmallGemm & g, int row_tiles) {
    if (row_blocks(g, row_tiles) > kSmallGemmSplitRowBlocks) return 1;
    const int64_t per_split = int64_t(g.n) * g.nrows * int64_t(sizeof(float));
    return int(std::max<int64_t>(1, std::min<int64_t>(kSmallGemmMaxSplits, int64_t(kSmallGemmSplitBytes) / per_split)));
}

SmallGemmGeometry valid_geometry(const SmallGemm & g, SmallGemmGeometry geo) {
    if (geo.row_tiles != 1 && geo.row_tiles != 2 && geo.row_tiles != 4 && geo.row_tiles != 8) geo.row_tiles = 1;
    if (geo.blocks_per_sm != 3 && geo.blocks_per_sm != 4) geo.blocks_per_sm = 2;
    const int n_super = int(n_steps(g.k));
    geo.k_splits = std::max(1, std::min({geo.k_splits, max_splits(g, geo.row_tiles), n_super}));
    return geo;
}

} // namespace

size_t small_gemm_step_bytes(int ggml_type) {
    switch (ggml_type) {
        case kTypeQ4K: return kQ4KBytes;
        case kTypeQ6K: return kQ6KBytes;
        case kTypeQ80: return size_t(kQ80Blocks) * kQ80Bytes;
        case kTypeQ41: return size_t(kQ80Blocks) * kQ41Bytes;
        default: return 0;
    }
}

size_t small_gemm_row_bytes(int ggml_type, int64_t k) {
    if (!small_gemm_takes(ggml_type, k)) return 0;
    if (ggml_type == kTypeQ80 || ggml_type == kTypeQ41) return size_t(k / 32) * small_gemm_step_bytes(ggml_type) / kQ80Blocks;
    return size_t(k / kQK) * small_gemm_step_bytes(ggml_type);
}

// Chosen from bench/gpu/small_gemm_bench.cu's sweep on the H200 (bench/RESULTS.md). The row tiles and
// K splits, which fix the order of the sums, depend on the matrix alone, so a column's outputs are
// the same bits at every column count: two row tiles for large Q4_K matrices, one otherwise; K is
// split only for matrices whose row blocks do not give every SM one. Three blocks an SM without
// prefetch up to 8 columns, and up to 16 but for the Q4_K matrices of 16K rows or more, where two
// with prefetch were 6-22% faster at 16 columns; wider calls, whose accumulators would spill under
// the three-block register cap, two with prefetch. Q8_0 and Q4_1 take Q4_K's row tiles and three blocks.
SmallGemmGeometry small_gemm_geometry(const SmallGemm & g) {
    SmallGemmGeometry geo;
    geo.row_tiles = g.type != kTypeQ6K && g.nrows >= 8192 ? 2 : 1;
    const bool tall_q4k = g.type == kTypeQ4K && g.nrows >= 16384;
    // Q8_0 and Q4_1 hold twice Q4_K's registers a step: a prefetched next step would spill
    geo.blocks_per_sm = g.n <= 8 || (g.n <= 16 && !tall_q4k) || g.type == kTypeQ80 || g.type == kTypeQ41 ? 3 : 2;
    geo.k_splits = 1;
    const int64_t sms = std::max(1, g.n_sm), blocks = row_blocks(g, geo.row_tiles);
    if (blocks < sms) {
        const int64_t by_fill = (2 * sms + blocks - 1) / blocks;
        const int64_t by_length = std::max<int64_t>(1, n_steps(g.k) / kWarps);   // a superblock a warp at least
        geo.k_splits = int(std::min(by_fill, by_length));
    }
    return valid_geometry(g, geo);
}

int small_gemm_quantize(const SmallGemm & g, void * scratch, void * stream) {
    if (g.n < 1 || g.n > kSmallGemmMaxCols || !small_gemm_takes(g.type, g.k)) return int(cudaErrorInvalidValue);
    const int n_pad = padded_cols(g);
    const QuantizedCols c = scratch_parts(scratch, g.k, g.n, n_pad).cols;
    const int64_t pairs = n_steps(g.k) * 8 * g.n;   // the padding columns are never read
    quantize_columns<<<unsigned((pairs + kWarps - 1) / kWarps), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        g.x, g.x_stride, g.n, n_pad, g.k, reinterpret_cast<__half *>(const_cast<uint4 *>(c.xh)),
        reinterpret_cast<__half *>(const_cast<uint32_t *>(c.xsum)));
    return int(cudaGetLastError());
}

int small_gemm_multiply(const SmallGemm & g, void * scratch, void * stream, SmallGemmGeometry geometry) {
    if (!small_gemm_takes(g.type, g.k) || g.n < 1 || g.n > kSmallGemmMaxCols) {
        return int(cudaErrorInvalidValue);
    }
    const SmallGemmGeometry geo = valid_geometry(g, geometry.row_tiles == 0 ? small_gemm_geometry(g) : geometry);
    const ScratchParts p = scratch_parts(scratch, g.k, g.n, padded_cols(g));
    auto s = static_cast<cudaStream_t>(stream);
    switch (n_tiles(g.n)) {
        case 1: return int(launch<1>(g, p, geo, s));
        case 2: return int(launch<2>(g, p, geo, s));
        case 3: return int(launch<3>(g, p, geo, s));
        default: return int(launch<4>(g, p, geo, s));
    }
}

} // namespace luce::cuda
