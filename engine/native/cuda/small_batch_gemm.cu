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
// f16 in xh_index's order, and the sum of the float values as f16.
__global__ void quantize_columns(const float * __restrict__ x, int64_t x_stride, int n, int n_pad, int64_t k,
                                 __half * __restrict__ xh, __half * __restrict__ xsum) {
    const int64_t pair = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;   // (32-block, column), column fastest
    const int lane = threadIdx.x % 32;
    const int64_t n_blocks = k / 32;
    if (pair >= n_blocks * n) return;
    const int col = int(pair % n);
    const int64_t b = pair / n;
    const float v = x[col * x_stride + b * 32 + lane];
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
                                                             int64_t n_super, int64_t per_split, const QuantizedCols cols,
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
    if (PREFETCH && i < end) Format::load(cur, wa + i * Format::kBytes, wb + i * Format::kBytes, t);
    for (; i < end; i += step) {
        if (!PREFETCH) {
            Format::load(cur, wa + i * Format::kBytes, wb + i * Format::kBytes, t);
        } else if (i + step < end) {
            Format::load(next, wa + (i + step) * Format::kBytes, wb + (i + step) * Format::kBytes, t);
        }
        Format::template multiply<NT>(cur, acc, cols, i, g, t);
        if (PREFETCH) cur = next;
    }
    reduce_and_store<NT, R>(acc, y, y_stride, block_row0, nrows, cols.n, partial, counters);
}

// ---- Q4_K through shared memory: a cp.async pipeline of `NS` stages -------------------------------
// A stage is S = 8 / R superblocks of the block's 16R rows, each row's part one contiguous run of
// 144 S bytes, copied with 16-byte cp.async (row_bytes is a multiple of 144, so every run is
// 16-byte aligned) while the warps multiply an earlier stage: the loads in flight no longer depend
// on how many registers a warp has. Warp w multiplies superblock w / R of each stage for tile w % R,
// which is reduce_and_store's layout. The stage pitch keeps each row's words 8 banks apart (the
// quads of a half-warp then read disjoint banks). The stage also holds its superblocks' quantized
// activations (all 8 NT columns: one contiguous run of the scratch, padding included, never read),
// so the multiply waits on no global load.
__device__ __forceinline__ void cp_async16(void * smem, const void * gmem) {
    const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

template <int R, int NT>
struct Q4KStage {
    static constexpr int kSuper = kWarps / R;                           // superblocks a stage
    static constexpr int kRunBytes = kSuper * kQ4KBytes;                // one row's run
    static constexpr int kPitch = kSuper == 1 ? 160 : kSuper == 2 ? 288 : 608;
    static constexpr int kWeightBytes = kTileRows * R * kPitch;
    static constexpr int kChunks = kTileRows * R * (kRunBytes / 16);
    static constexpr int kXhPerSuper = 8 * (8 * NT) * 4 * 16;           // xh_index's bytes of a superblock
    static constexpr int kSumPerSuper = 8 * NT * 16;                    // and of its sums
    static constexpr int kBytes = kWeightBytes + kSuper * (kXhPerSuper + kSumPerSuper);
};
constexpr int kStagedBlocksPerSM = 2;

template <int NT, int R, int NS>
__global__ void __launch_bounds__(kThreads, kStagedBlocksPerSM) gemm_q4k_staged(const uint8_t * __restrict__ w, size_t row_bytes,
                                                                               int64_t nrows, int64_t n_super, int64_t per_split,
                                                                               const QuantizedCols cols, float * __restrict__ y,
                                                                               int64_t y_stride, float * __restrict__ partial,
                                                                               uint32_t * __restrict__ counters) {
    using St = Q4KStage<R, NT>;
    extern __shared__ __align__(16) uint8_t stages[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int64_t block_row0 = int64_t(blockIdx.x) * kTileRows * R;
    const int64_t begin = int64_t(blockIdx.y) * per_split, end = min(n_super, begin + per_split);
    const int64_t n_stages = end > begin ? (end - begin + St::kSuper - 1) / St::kSuper : 0;

    // Each thread's 16-byte chunks of a stage, the same in every stage but for the superblock offset:
    // where they come from (relative to the block's first row and the stage's first superblock)
    // and where they go in the slot. A chunk past the end of a partial last stage is skipped.
    constexpr int kPerThread = (St::kChunks + kThreads - 1) / kThreads;
    uint32_t src_off[kPerThread], dst_off[kPerThread];
#pragma unroll
    for (int m = 0; m < kPerThread; ++m) {
        const int c = min(int(threadIdx.x) + m * kThreads, St::kChunks - 1);
        const int r = c / (St::kRunBytes / 16), off = (c % (St::kRunBytes / 16)) * 16;
        src_off[m] = uint32_t((min(block_row0 + r, nrows - 1) - block_row0) * int64_t(row_bytes)) + uint32_t(off);
        dst_off[m] = uint32_t(r * St::kPitch + off);
    }
    const uint8_t * block_w = w + block_row0 * int64_t(row_bytes);

    // Stage st into slot st % NS. Every thread commits a group each time, empty or not, so that
    // wait_group counts the same stages in every thread.
    auto issue = [&](int64_t st) {
        if (st < n_stages) {
            uint8_t * dst = stages + (st % NS) * St::kBytes;
            const int64_t sb0 = begin + st * St::kSuper;
            const uint8_t * src = block_w + sb0 * kQ4KBytes;
            const int count = int(min(int64_t(St::kSuper), end - sb0));
            const int run = count * kQ4KBytes;
#pragma unroll
            for (int m = 0; m < kPerThread; ++m) {
                const bool owned = int(threadIdx.x) + m * kThreads < St::kChunks;
                if (owned && (run == St::kRunBytes || int(dst_off[m] % St::kPitch) < run)) cp_async16(dst + dst_off[m], src + src_off[m]);
            }
            const uint8_t * xh = reinterpret_cast<const uint8_t *>(cols.xh) + sb0 * St::kXhPerSuper;
            const uint8_t * xs = reinterpret_cast<const uint8_t *>(cols.xsum) + sb0 * St::kSumPerSuper;
            uint8_t * dxh = dst + St::kWeightBytes;
            uint8_t * dxs = dxh + St::kSuper * St::kXhPerSuper;
            for (int c = threadIdx.x; c < count * (St::kXhPerSuper / 16); c += kThreads) cp_async16(dxh + 16 * c, xh + 16 * c);
            for (int c = threadIdx.x; c < count * (St::kSumPerSuper / 16); c += kThreads) cp_async16(dxs + 16 * c, xs + 16 * c);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int st = 0; st < NS - 1; ++st) issue(st);

    float acc[NT][4] = {};
    const int tile = warp % R, mine = warp / R;
    for (int64_t st = 0; st < n_stages; ++st) {
        cp_async_wait<NS - 2>();   // stage st has landed (for this thread's copies)
        __syncthreads();           // ... for every thread's, and stage st - 1's slot is free again
        issue(st + NS - 1);
        const int64_t i = begin + st * St::kSuper + mine;
        if (i < end) {
            const uint8_t * slot = stages + (st % NS) * St::kBytes;
            const uint8_t * a = slot + (tile * kTileRows + g) * St::kPitch + mine * kQ4KBytes;
            Q4KRows cur;
            load_q4k(cur, a, a + 8 * St::kPitch, t);
            QuantizedCols staged = cols;   // this stage's superblocks' activations, in shared memory
            staged.xh = reinterpret_cast<const uint4 *>(slot + St::kWeightBytes);
            staged.xsum = reinterpret_cast<const uint32_t *>(slot + St::kWeightBytes + St::kSuper * St::kXhPerSuper);
            Q4KHalf::multiply<NT>(cur, acc, staged, mine, g, t);
        }
    }
    cp_async_wait<0>();
    reduce_and_store<NT, R>(acc, y, y_stride, block_row0, nrows, cols.n, partial, counters);
}

int n_tiles(int n) { return (n + 7) / 8; }
int padded_cols(const SmallGemm & g) { return 8 * n_tiles(g.n); }

// Where small_batch_gemm.h's scratch parts lie for k values and n_pad columns.
struct ScratchParts {
    QuantizedCols cols;
    float * partial;
    uint32_t * counters;
};

ScratchParts scratch_parts(void * scratch, int64_t k, int n, int n_pad) {
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
    const int64_t n_super = g.k / kQK;
    const int64_t per_split = (n_super + splits - 1) / splits;
    const dim3 grid(unsigned((g.nrows + kTileRows * R - 1) / (kTileRows * R)), unsigned(splits));
    gemm_small<Format, NT, R, PREFETCH, MINB><<<grid, kThreads, 0, s>>>(static_cast<const uint8_t *>(g.w), g.row_bytes, g.nrows,
                                                                      n_super, per_split, p.cols, g.y, g.y_stride, p.partial,
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

template <int NT, int R, int NS>
cudaError_t launch_staged_tiles(const SmallGemm & g, const ScratchParts & p, int splits, cudaStream_t s) {
    const int64_t n_super = g.k / kQK;
    const int64_t per_split = (n_super + splits - 1) / splits;
    const dim3 grid(unsigned((g.nrows + kTileRows * R - 1) / (kTileRows * R)), unsigned(splits));
    constexpr int smem = NS * Q4KStage<R, NT>::kBytes;
    // more than 48 KiB of dynamic shared memory needs the opt-in, once per device
    constexpr int kMaxDevices = 64;
    static bool opted_in[kMaxDevices] = {};
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device >= kMaxDevices) return cudaErrorInvalidDevice;
    if (!opted_in[device]) {
        const cudaError_t e = cudaFuncSetAttribute(gemm_q4k_staged<NT, R, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        opted_in[device] = true;
    }
    gemm_q4k_staged<NT, R, NS><<<grid, kThreads, smem, s>>>(static_cast<const uint8_t *>(g.w), g.row_bytes, g.nrows, n_super,
                                                            per_split, p.cols, g.y, g.y_stride, p.partial, p.counters);
    return cudaGetLastError();
}

// What a block may hold on sm_90 (227 KiB); a deeper pipeline than fits is cut to one that does.
constexpr int kMaxBlockSharedBytes = 227 * 1024;

template <int NT, int R>
cudaError_t launch_staged_depth(const SmallGemm & g, const ScratchParts & p, SmallGemmGeometry geo, cudaStream_t s) {
    constexpr int slot = Q4KStage<R, NT>::kBytes;
    if (geo.stages >= 6 && 6 * slot > kMaxBlockSharedBytes) geo.stages = 4;
    if (geo.stages >= 4 && 4 * slot > kMaxBlockSharedBytes) geo.stages = 3;
    switch (geo.stages) {
        case 3: return launch_staged_tiles<NT, R, 3>(g, p, geo.k_splits, s);
        case 6: return launch_staged_tiles<NT, R, 6>(g, p, geo.k_splits, s);
        default: return launch_staged_tiles<NT, R, 4>(g, p, geo.k_splits, s);
    }
}

template <int NT>
cudaError_t launch_staged(const SmallGemm & g, const ScratchParts & p, SmallGemmGeometry geo, cudaStream_t s) {
    switch (geo.row_tiles) {
        case 8: return launch_staged_depth<NT, 8>(g, p, geo, s);
        case 2: return launch_staged_depth<NT, 2>(g, p, geo, s);
        default: return launch_staged_depth<NT, 4>(g, p, geo, s);
    }
}

template <int NT>
cudaError_t launch(const SmallGemm & g, const ScratchParts & p, SmallGemmGeometry geo, cudaStream_t s) {
    if (g.type == 14) return launch_format<Q6KHalf, NT>(g, p, geo, s);
    if constexpr (NT <= 2) {
        if (geo.stages > 0) return launch_staged<NT>(g, p, geo, s);
    }
    return launch_format<Q4KHalf, NT>(g, p, geo, s);
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
    // the staged kernel: Q4_K only, 2, 4 or 8 row tiles, 3, 4 or 6 stages, at most 16 columns
    if (g.type != 12 || g.n > 16 || (geo.row_tiles != 2 && geo.row_tiles != 4 && geo.row_tiles != 8)) geo.stages = 0;
    if (geo.stages != 0 && geo.stages != 3 && geo.stages != 6) geo.stages = 4;
    const int n_super = int(g.k / kQK);
    geo.k_splits = std::max(1, std::min({geo.k_splits, max_splits(g, geo.row_tiles), n_super}));
    return geo;
}

} // namespace

bool small_gemm_supports(int ggml_type) { return ggml_type == 12 || ggml_type == 14; }

// Chosen from bench/gpu/small_gemm_bench.cu's sweep on the H200 (bench/RESULTS.md). The row tiles and
// K splits, which fix the order of the sums, depend on the matrix alone, so a column's outputs are
// the same bits at every column count: two row tiles for large Q4_K matrices, one otherwise; K is
// split only for matrices whose row blocks do not give every SM one. Three blocks an SM without
// prefetch up to 16 columns (the sweep's best or within 1% for all but the 1024-row matrix); wider
// calls, whose accumulators would spill under that register cap, two with prefetch.
SmallGemmGeometry small_gemm_geometry(const SmallGemm & g) {
    SmallGemmGeometry geo;
    geo.row_tiles = g.type == 12 && g.nrows >= 8192 ? 2 : 1;
    geo.blocks_per_sm = g.n <= 16 ? 3 : 2;
    geo.k_splits = 1;
    const int64_t sms = std::max(1, g.n_sm), blocks = row_blocks(g, geo.row_tiles);
    if (blocks < sms) {
        const int64_t by_fill = (2 * sms + blocks - 1) / blocks;
        const int64_t by_length = std::max<int64_t>(1, g.k / kQK / kWarps);   // a superblock a warp at least
        geo.k_splits = int(std::min(by_fill, by_length));
    }
    return valid_geometry(g, geo);
}

int small_gemm_quantize(const SmallGemm & g, void * scratch, void * stream) {
    if (g.n < 1 || g.n > kSmallGemmMaxCols || g.k % kQK != 0) return int(cudaErrorInvalidValue);
    const int n_pad = padded_cols(g);
    const QuantizedCols c = scratch_parts(scratch, g.k, g.n, n_pad).cols;
    const int64_t pairs = (g.k / 32) * g.n;   // the padding columns are never read
    quantize_columns<<<unsigned((pairs + kWarps - 1) / kWarps), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        g.x, g.x_stride, g.n, n_pad, g.k, reinterpret_cast<__half *>(const_cast<uint4 *>(c.xh)),
        reinterpret_cast<__half *>(const_cast<uint32_t *>(c.xsum)));
    return int(cudaGetLastError());
}

int small_gemm_multiply(const SmallGemm & g, void * scratch, void * stream, SmallGemmGeometry geometry) {
    if (!small_gemm_supports(g.type) || g.n < 1 || g.n > kSmallGemmMaxCols || g.k % kQK != 0) {
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
