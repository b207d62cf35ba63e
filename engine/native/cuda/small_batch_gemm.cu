// small_batch_gemm.cu — see small_batch_gemm.h. The kernels; what they multiply (weight formats,
// activation layouts, mma primitives) is in small_batch_formats.cuh.
//
// quantize_columns writes a call's activations once in every layout the formats read.
//
// gemm_small (variants 1..9, 12): a block of 8 warps owns R tiles of 16 weight rows; the warps of a
// tile take its 256-value superblocks round-robin (8 / R ways; with R > 1 the tiles' warps read the
// same activations at about the same time, which L1 then serves). The partial sums meet in shared
// memory in a fixed order, so results are deterministic. The next superblock's weights are loaded
// before the current one is multiplied.
//
// gemm_stream (variants 10, 11): each warp one equal contiguous share of the matrix's (tile,
// superblock) units; see its comment.
#include "small_batch_gemm.h"
#include "small_batch_formats.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace luce::cuda {
namespace {

constexpr int kWarps = 8;         // warps per block, splitting one row tile's superblocks
constexpr int kThreads = 32 * kWarps;

// One warp per (32 values, column): for the int8 formats (INT8) q8_1's int8 values and (d, sum),
// for the f16 formats (HALF) q * d as f16 in xh_index's order and the sum as f16.
template <bool INT8, bool HALF>
__global__ void quantize_columns(const float * __restrict__ x, int64_t x_stride, int n, int n_pad, int64_t k,
                                 int8_t * __restrict__ xq, float2 * __restrict__ xs, __half * __restrict__ xh,
                                 __half * __restrict__ xsum) {
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
    float sum = v;   // of the float values, as ggml's q8_1: Q4_K's minimum term then has no rounding
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (INT8) {
        xq[int64_t(col) * k + b * 32 + lane] = int8_t(q);
        if (lane == 0) xs[b * n_pad + col] = make_float2(d, sum);
    }
    if (!HALF) return;
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

// The kernel, for either format. Variants (small_batch_gemm.h) trade registers for occupancy: MINB
// blocks per SM (a register cap), and whether the next superblock's weights are loaded while this
// one is multiplied; R row tiles per block share their activation loads.
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

// ---- balanced kernel (variants 10, 11): every warp the same share of the work ---------------------
// gemm_small gives a block 16..64 rows and all of K, so a matrix is a few waves of equal blocks: on
// an H200 (264 block slots) the 17408-row FFN matrices take 4.12 waves of 16-row blocks (the fifth
// nearly empty) and the 5120-row ones 1.21; and 8 warps splitting 20 superblocks leave half of them
// idle for the last round. Here the matrix's (16-row tile, superblock) units are cut into one equal
// contiguous range per warp, for as many warps as the GPU holds at once (stream-K, at warp grain).
// A tile that straddles warps gets a partial sum from each; the last of them to finish (an arrival
// counter per tile) adds them in warp order, so results are deterministic.
struct StreamSplit {
    int64_t units, workers, n_super;
    __host__ __device__ int64_t start(int64_t w) const { return w * units / workers; }
    __host__ __device__ int64_t worker_of(int64_t unit) const {   // the w with start(w) <= unit < start(w + 1)
        int64_t w = unit * workers / units;
        while (w + 1 < workers && start(w + 1) <= unit) ++w;
        while (w > 0 && start(w) > unit) --w;
        return w;
    }
    // the partial-sum slot of worker w for a tile it shares: 0 for the tile its range starts in, else 1
    __host__ __device__ int slot(int64_t w, int64_t tile) const { return start(w) / n_super == tile ? 0 : 1; }
};

template <class Format, int NT>
__global__ void __launch_bounds__(kThreads, 2) gemm_stream(const uint8_t * __restrict__ w, size_t row_bytes, int64_t nrows,
                                                          const StreamSplit split, const QuantizedCols cols, int n,
                                                          float * __restrict__ y, int64_t y_stride,
                                                          float * __restrict__ partial, unsigned * __restrict__ counters) {
    constexpr int n_pad = 8 * NT;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int64_t worker = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (worker >= split.workers) return;
    const int64_t n_super = split.n_super, u_end = split.start(worker + 1);
    for (int64_t u = split.start(worker); u < u_end;) {
        const int64_t tile = u / n_super, i0 = u % n_super, i1 = min(n_super, i0 + (u_end - u));
        const int64_t row0 = tile * kTileRows;
        const uint8_t * wa = w + min(row0 + g, nrows - 1) * row_bytes;       // rows past the end repeat the last
        const uint8_t * wb = w + min(row0 + g + 8, nrows - 1) * row_bytes;   // one; their sums are not stored
        float acc[NT][4] = {};
        typename Format::Rows cur, next;
        Format::load(cur, wa + i0 * Format::kBytes, wb + i0 * Format::kBytes, t);
        for (int64_t i = i0; i < i1; ++i) {
            if (i + 1 < i1) Format::load(next, wa + (i + 1) * Format::kBytes, wb + (i + 1) * Format::kBytes, t);
            Format::template multiply<NT>(cur, acc, cols, i, g, t);
            cur = next;
        }
        const bool whole = i0 == 0 && i1 == n_super;
        float * out = whole ? y : partial + (worker * 2 + (u == split.start(worker) ? 0 : 1)) * kTileRows * n_pad;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = nt * 8 + 2 * t + e % 2, r = g + 8 * (e / 2);
                if (whole) {
                    if (col < n && row0 + r < nrows) out[col * y_stride + row0 + r] = acc[nt][e];
                } else {
                    out[r * n_pad + col] = acc[nt][e];
                }
            }
        }
        u += i1 - i0;
        if (whole) continue;
        const int64_t first = split.worker_of(tile * n_super), last = split.worker_of((tile + 1) * n_super - 1);
        __threadfence();   // this warp's partial is visible device-wide before it counts as arrived
        __syncwarp();
        unsigned arrived = 0;
        if (lane == 0) arrived = atomicAdd(&counters[tile], 1u);
        arrived = __shfl_sync(0xffffffffu, arrived, 0);
        if (arrived != unsigned(last - first)) continue;
        __threadfence();
        for (int idx = lane; idx < kTileRows * n; idx += 32) {
            const int r = idx % kTileRows, col = idx / kTileRows;
            if (row0 + r >= nrows) continue;
            float sum = 0.0f;
            for (int64_t c = first; c <= last; ++c) {
                sum += __ldcg(partial + (c * 2 + split.slot(c, tile)) * kTileRows * n_pad + r * n_pad + col);
            }
            y[col * y_stride + row0 + r] = sum;
        }
        if (lane == 0) counters[tile] = 0;   // ready for the next call
    }
}

int n_tiles(int n) { return (n + 7) / 8; }

int sm_count() {   // of the current device, cached per device
    static int counts[64] = {};
    int device = 0;
    cudaGetDevice(&device);
    if (device < 0 || device >= 64) return 132;
    if (counts[device] == 0) {
        int c = 0;
        cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, device);
        counts[device] = c > 0 ? c : 132;
    }
    return counts[device];
}

template <class Format, int NT, int MINB, bool PREFETCH, int R = 1>
cudaError_t launch1(const SmallGemm & g, const QuantizedCols & cols, cudaStream_t s) {
    const dim3 grid(unsigned((g.nrows + kTileRows * R - 1) / (kTileRows * R)));
    gemm_small<Format, NT, MINB, PREFETCH, R><<<grid, kThreads, 0, s>>>(static_cast<const uint8_t *>(g.w), g.row_bytes, g.nrows,
                                                                       g.k / kQK, cols, g.n, g.y, g.y_stride);
    return cudaGetLastError();
}

// The int8 kernel's register/occupancy trade-offs (variants 1..6; any other runs as 2), for either
// weight type.
template <class Format, int NT>
cudaError_t launch_int8(const SmallGemm & g, const QuantizedCols & cols, cudaStream_t s) {
    switch (g.variant) {
        case 1: return launch1<Format, NT, 1, true>(g, cols, s);
        case 3: return launch1<Format, NT, 3, false>(g, cols, s);
        case 4: return launch1<Format, NT, 4, false>(g, cols, s);
        case 5: return launch1<Format, NT, 2, true, 2>(g, cols, s);
        case 6: return launch1<Format, NT, 2, true, 4>(g, cols, s);
        default: return launch1<Format, NT, 2, true>(g, cols, s);
    }
}

// Rows a block for the f16 Q4_K kernel: 16, 32 or 64 (R = 1, 2, 4 tiles, whose warps then read the
// same activations through L1). Variant 7: the most rows that still give every SM two blocks.
// Variant 8: the fewest idle block slots in the last wave (blocks of equal work run in waves of
// 2 per SM). Variants 9 and 12: always 16.
int q4k_half_tiles(const SmallGemm & g) {
    const int64_t slots = 2 * int64_t(sm_count());
    auto blocks = [&](int r) { return (g.nrows + 16 * r - 1) / (16 * r); };
    if (g.variant == 9 || g.variant == 12) return 1;
    if (g.variant == 7) return blocks(4) >= slots ? 4 : blocks(2) >= slots ? 2 : 1;
    int best = 1;
    double best_use = 0.0;
    for (int r : {4, 2, 1}) {   // ties keep the taller block
        const int64_t b = blocks(r);
        const double use = double(b) / double(slots * ((b + slots - 1) / slots));
        if (use > best_use + 1e-9) best = r, best_use = use;
    }
    return best;
}

template <int NT>
cudaError_t launch_q4k_half(const SmallGemm & g, const QuantizedCols & cols, cudaStream_t s) {
    switch (q4k_half_tiles(g)) {
        case 4: return launch1<Q4KHalf, NT, 2, true, 4>(g, cols, s);
        case 2: return launch1<Q4KHalf, NT, 2, true, 2>(g, cols, s);
        default: return launch1<Q4KHalf, NT, 2, true, 1>(g, cols, s);
    }
}

// The balanced kernel's split: one range per warp of the blocks every SM holds at once (2 of 8
// warps), at least kMinStreamUnits superblocks each, within the scratch's room.
constexpr int64_t kMinStreamUnits = 4;

StreamSplit stream_split(const SmallGemm & g) {
    const int64_t n_super = g.k / kQK, tiles = (g.nrows + kTileRows - 1) / kTileRows, units = tiles * n_super;
    int64_t workers = std::min<int64_t>(2 * kWarps * int64_t(sm_count()), kSmallGemmStreamWorkers);
    workers = std::max<int64_t>(1, std::min(workers, units / kMinStreamUnits));
    return StreamSplit{units, workers, n_super};
}

template <class Format, int NT>
cudaError_t launch_stream(const SmallGemm & g, const QuantizedCols & cols, float * partial, unsigned * counters, cudaStream_t s) {
    const StreamSplit split = stream_split(g);
    const unsigned blocks = unsigned((split.workers + kWarps - 1) / kWarps);
    gemm_stream<Format, NT><<<blocks, kThreads, 0, s>>>(static_cast<const uint8_t *>(g.w), g.row_bytes, g.nrows, split, cols,
                                                         g.n, g.y, g.y_stride, partial, counters);
    return cudaGetLastError();
}

// What a variant (small_batch_gemm.h) runs: the balanced kernel or gemm_small, and for each weight
// type the f16 or the int8 arithmetic.
struct VariantKernels {
    bool balanced, q4k_half, q6k_half;
};

VariantKernels kernels_of(int variant) {
    return {variant == 10 || variant == 11, (variant >= 7 && variant <= 10) || variant == 12, variant == 10 || variant == 12};
}

template <int NT>
cudaError_t launch(const SmallGemm & g, const QuantizedCols & cols, float * partial, unsigned * counters, cudaStream_t s) {
    const VariantKernels k = kernels_of(g.variant);
    const bool balanced = k.balanced && (g.nrows + kTileRows - 1) / kTileRows <= kSmallGemmStreamTiles;
    if (g.type == 14) {
        if (balanced) {
            return k.q6k_half ? launch_stream<Q6KHalf, NT>(g, cols, partial, counters, s)
                              : launch_stream<Q6K, NT>(g, cols, partial, counters, s);
        }
        return k.q6k_half ? launch1<Q6KHalf, NT, 2, true>(g, cols, s) : launch_int8<Q6K, NT>(g, cols, s);
    }
    if (balanced) {
        return k.q4k_half ? launch_stream<Q4KHalf, NT>(g, cols, partial, counters, s)
                          : launch_stream<Q4K, NT>(g, cols, partial, counters, s);
    }
    return k.q4k_half ? launch_q4k_half<NT>(g, cols, s) : launch_int8<Q4K, NT>(g, cols, s);
}

int padded_cols(const SmallGemm & g) { return 8 * n_tiles(g.n); }

// Where small_batch_gemm.h's scratch parts lie for k values and n_pad columns.
struct ScratchParts {
    QuantizedCols cols;
    unsigned * counters;
    float * partial;
};

ScratchParts scratch_parts(void * scratch, int64_t k, int n_pad) {
    auto * base = static_cast<char *>(scratch);
    ScratchParts p;
    p.counters = reinterpret_cast<unsigned *>(base);
    base += kSmallGemmStreamTiles * sizeof(unsigned);
    p.partial = reinterpret_cast<float *>(base);
    base += size_t(kSmallGemmStreamWorkers) * 2 * kTileRows * size_t(n_pad) * sizeof(float);
    QuantizedCols & c = p.cols;
    c.xq = reinterpret_cast<const int8_t *>(base);
    c.xs = reinterpret_cast<const float2 *>(base + xq_bytes(k, n_pad));
    c.xh = reinterpret_cast<const uint4 *>(base + xq_bytes(k, n_pad) + xs_bytes(k, n_pad));
    c.xsum = reinterpret_cast<const uint32_t *>(base + xq_bytes(k, n_pad) + xs_bytes(k, n_pad) + xh_bytes(k, n_pad));
    c.k = k;
    c.n_pad = n_pad;
    return p;
}

} // namespace

bool small_gemm_supports(int ggml_type) { return ggml_type == 12 || ggml_type == 14; }

int small_gemm_quantize(const SmallGemm & g, void * scratch, void * stream) {
    if (g.n < 1 || g.n > kSmallGemmMaxCols || g.k % kQK != 0) return int(cudaErrorInvalidValue);
    const int n_pad = padded_cols(g);
    const QuantizedCols c = scratch_parts(scratch, g.k, n_pad).cols;
    const int64_t pairs = (g.k / 32) * n_pad;
    // only the layouts this variant's kernels read (matmuls sharing a quantization share the variant)
    const VariantKernels kv = kernels_of(g.variant);
    const bool int8 = !(kv.q4k_half && kv.q6k_half), half = kv.q4k_half || kv.q6k_half;
    auto kernel = int8 && half ? quantize_columns<true, true> : half ? quantize_columns<false, true> : quantize_columns<true, false>;
    kernel<<<unsigned((pairs + kWarps - 1) / kWarps), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        g.x, g.x_stride, g.n, n_pad, g.k, const_cast<int8_t *>(c.xq), const_cast<float2 *>(c.xs),
        reinterpret_cast<__half *>(const_cast<uint4 *>(c.xh)), reinterpret_cast<__half *>(const_cast<uint32_t *>(c.xsum)));
    return int(cudaGetLastError());
}

int small_gemm_multiply(const SmallGemm & g, void * scratch, void * stream) {
    if (!small_gemm_supports(g.type) || g.n < 1 || g.n > kSmallGemmMaxCols || g.k % kQK != 0) {
        return int(cudaErrorInvalidValue);
    }
    const ScratchParts p = scratch_parts(scratch, g.k, padded_cols(g));
    auto s = static_cast<cudaStream_t>(stream);
    switch (n_tiles(g.n)) {
        case 1: return int(launch<1>(g, p.cols, p.partial, p.counters, s));
        case 2: return int(launch<2>(g, p.cols, p.partial, p.counters, s));
        case 3: return int(launch<3>(g, p.cols, p.partial, p.counters, s));
        default: return int(launch<4>(g, p.cols, p.partial, p.counters, s));
    }
}

} // namespace luce::cuda
