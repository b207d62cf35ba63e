// small_batch_gemm.cu — see small_batch_gemm.h.
//
// Work split: a block of 8 warps owns R tiles of 16 weight rows (R = 1 but in variants 5 and 6); the
// warps of a tile take its 256-value superblocks round-robin (8 / R ways; with R > 1 the tiles' warps
// read the same activations at the same time, which L1 then serves) and multiply them with every
// column on the tensor cores
// (mma.sync int8: 16 rows × 8 columns × 32 values for Q4_K, × 16 values for Q6_K, whose scales cover
// 16 values). The 8 partial sums meet in shared memory in a fixed order, so results are
// deterministic. The next superblock's weights are loaded before the current one is multiplied.
//
// Inside one 32-value sub-block the order of the dot product is free, so the mma's k index is
// permuted to match the memory layout: thread t of a quad (lane % 4) holds bytes [8t, 8t+8) of a
// sub-block as its two k-registers, for the weights and the activations alike.
#include "small_batch_gemm.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace luce::cuda {
namespace {

constexpr int kQK = 256;          // values per K-quant superblock
constexpr int kWarps = 8;         // warps per block, splitting one row tile's superblocks
constexpr int kThreads = 32 * kWarps;
constexpr int kTileRows = 16;     // mma M
constexpr int kQ4KBytes = 144;    // d, dmin (f16), scales[12], qs[128]
constexpr int kQ6KBytes = 210;    // ql[128], qh[64], scales[16] (int8), d (f16)

// ---- activations: int8 per 32 values, (d, sum of the floats) per block, columns padded to n_pad --
// layout in scratch (small_batch_gemm.h): counters, xq[n_pad][k] int8, xs[k/32][n_pad] float2, partials
__host__ __device__ inline size_t xq_bytes(int64_t k, int n_pad) { return size_t(n_pad) * size_t(k); }
__host__ __device__ inline size_t xs_bytes(int64_t k, int n_pad) { return size_t(k / 32) * size_t(n_pad) * 2 * sizeof(float); }

__global__ void quantize_columns(const float * __restrict__ x, int64_t x_stride, int n, int n_pad, int64_t k,
                                 int8_t * __restrict__ xq, float2 * __restrict__ xs) {
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
    xq[int64_t(col) * k + b * 32 + lane] = int8_t(q);
    if (lane == 0) xs[b * n_pad + col] = make_float2(d, sum);
}

// ---- tensor-core primitives -------------------------------------------------------------------
__device__ __forceinline__ void mma_k32(int (&c)[4], int a0, int a1, int a2, int a3, int b0, int b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_k16(int (&c)[4], int a0, int a1, int b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}

// float(c) for |c| < 2^22, exact like the conversion instruction but on the integer and FP32 pipes:
// 1.5 * 2^23 + c is representable with c in its low mantissa bits. The int8 dot products of one mma
// (at most 32 * 15 * 127 for Q4_K, 16 * 32 * 127 for Q6_K) fit. On sm_90 the conversion instruction
// issues at a quarter of FP32's rate: four per mma would make it the busiest pipe at 16 columns
// (counted from the instruction mix, not profiled).
__device__ __forceinline__ float exact_float(int c) { return __int_as_float(c + 0x4B400000) - 12582912.0f; }

__device__ __forceinline__ float f16_bits(uint32_t bits16) { return __half2float(__ushort_as_half(uint16_t(bits16))); }
__device__ __forceinline__ uint32_t byte_of(const uint32_t * w, int i) { return (w[i / 4] >> (8 * (i % 4))) & 0xffu; }

// 32-bit load from a 2-byte aligned address (Q6_K blocks are 210 bytes, so only 2-aligned)
__device__ __forceinline__ uint32_t load_u32_a2(const uint8_t * p) {
    const uint16_t * h = reinterpret_cast<const uint16_t *>(p);
    return uint32_t(h[0]) | (uint32_t(h[1]) << 16);
}

// ---- where a superblock's quantized activations are read from --------------------------------
// values(col, sb): the 32 int8 values of sub-block sb of column col; scales(sb): the (d, sum) pairs
// of sub-block sb for every column.
struct GlobalActs {        // the quantize kernel's layout in scratch, superblock i
    const int8_t * xq;
    const float2 * xs;
    int64_t k, i;
    int n_pad;
    __device__ __forceinline__ const int8_t * values(int col, int sb) const { return xq + int64_t(col) * k + i * kQK + sb * 32; }
    __device__ __forceinline__ const float2 * scales(int sb) const { return xs + (i * 8 + sb) * n_pad; }
};

struct StagedActs {        // one superblock staged in shared memory by gemm_split (stage_acts)
    const int8_t * q;      // [column tile][sub-block][column % 8][32]: a warp's 8 columns of a sub-block are contiguous
    const float2 * s;      // [sub-block][n_pad]
    int n_pad;
    __device__ __forceinline__ const int8_t * values(int col, int sb) const { return q + ((col / 8) * 8 + sb) * 256 + (col % 8) * 32; }
    __device__ __forceinline__ const float2 * scales(int sb) const { return s + sb * n_pad; }
};

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

// ---- Q4_K: y = d*sc*q - dmin*m per 32-value sub-block -------------------------------------------
struct Q4KRows {           // one thread's part of one superblock, for its rows g and g+8
    uint4 head[2];         // d|dmin, scales[12]
    uint2 qs[2][4];        // bytes [32j + 8t, 32j + 8t + 8) of qs, j = 0..3
};

__device__ __forceinline__ void load_q4k(Q4KRows & r, const uint8_t * a, const uint8_t * b, int t) {
    r.head[0] = *reinterpret_cast<const uint4 *>(a);
    r.head[1] = *reinterpret_cast<const uint4 *>(b);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        r.qs[0][j] = *reinterpret_cast<const uint2 *>(a + 16 + 32 * j + 8 * t);
        r.qs[1][j] = *reinterpret_cast<const uint2 *>(b + 16 + 32 * j + 8 * t);
    }
}

// All 8 six-bit scales and minimums of a superblock at once (ggml's get_scale_min_k4 for every
// sub-block), 4 per word: sc[0] = sub-blocks 0..3, sc[1] = 4..7.
__device__ __forceinline__ void q4k_unpack(const uint4 & head, uint32_t (&sc)[2], uint32_t (&mn)[2]) {
    sc[0] = head.y & 0x3f3f3f3fu;
    mn[0] = head.z & 0x3f3f3f3fu;
    sc[1] = (head.w & 0x0f0f0f0fu) | ((head.y >> 2) & 0x30303030u);
    mn[1] = ((head.w >> 4) & 0x0f0f0f0fu) | ((head.z >> 2) & 0x30303030u);
}

// Q4_K as a format of gemm_small below: one thread's rows of one superblock and their product.
struct Q4K {
    static constexpr int kBytes = kQ4KBytes;
    using Rows = Q4KRows;
    static __device__ __forceinline__ void load(Rows & r, const uint8_t * a, const uint8_t * b, int t) { load_q4k(r, a, b, t); }

    template <int NT, class Acts>
    static __device__ __forceinline__ void multiply(const Rows & cur, float (&acc)[NT][4], const Acts & x, int g, int t) {
        float d[2], dmin[2];
        uint32_t scp[2][2], mnp[2][2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            d[r] = f16_bits(cur.head[r].x & 0xffffu);
            dmin[r] = f16_bits(cur.head[r].x >> 16);
            q4k_unpack(cur.head[r], scp[r], mnp[r]);
        }
#pragma unroll
        for (int sb = 0; sb < 8; ++sb) {
            const int j = sb / 2, shift = 4 * (sb % 2);
            const int a0 = int((cur.qs[0][j].x >> shift) & 0x0F0F0F0Fu);
            const int a1 = int((cur.qs[1][j].x >> shift) & 0x0F0F0F0Fu);
            const int a2 = int((cur.qs[0][j].y >> shift) & 0x0F0F0F0Fu);
            const int a3 = int((cur.qs[1][j].y >> shift) & 0x0F0F0F0Fu);
            float fs[2], fm[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                fs[r] = d[r] * float((scp[r][sb / 4] >> (8 * (sb % 4))) & 0xffu);
                fm[r] = dmin[r] * float((mnp[r][sb / 4] >> (8 * (sb % 4))) & 0xffu);
            }
            const float2 * s_blk = x.scales(sb) + 2 * t;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint2 bx = *reinterpret_cast<const uint2 *>(x.values(nt * 8 + g, sb) + 8 * t);
                int c[4] = {0, 0, 0, 0};
                mma_k32(c, a0, a1, a2, a3, int(bx.x), int(bx.y));
                const float4 s = *reinterpret_cast<const float4 *>(s_blk + nt * 8);   // (d, sum) of columns 2t, 2t+1
                acc[nt][0] += fs[0] * s.x * exact_float(c[0]) - fm[0] * s.y;
                acc[nt][1] += fs[0] * s.z * exact_float(c[1]) - fm[0] * s.w;
                acc[nt][2] += fs[1] * s.x * exact_float(c[2]) - fm[1] * s.y;
                acc[nt][3] += fs[1] * s.z * exact_float(c[3]) - fm[1] * s.w;
            }
        }
    }
};

// ---- Q6_K: y = d*sc*(q - 32) per 16-value group --------------------------------------------------
// Value v = 128h + 32m + l (h = 0..1, m = 0..3, l = 0..31) has its low 4 bits in nibble m/2 of
// ql[64h + 32(m%2) + l] and its high 2 bits at bit 2m of qh[32h + l]; group G = v/16 has scale sc[G].
struct Q6KRows {
    uint32_t ql[2][8];     // [row][h*4 + (m%2)*2 + lh]: bytes 64h + 32(m%2) + 16lh + 4t .. +4
    uint32_t qh[2][4];     // [row][h*2 + lh]:            bytes 32h + 16lh + 4t .. +4
    uint32_t sc[2][4];     // [row]: the 16 int8 scales
    float d[2];
};

__device__ __forceinline__ void load_q6k(Q6KRows & r, const uint8_t * a, const uint8_t * b, int t) {
    const uint8_t * rows[2] = {a, b};
#pragma unroll
    for (int x = 0; x < 2; ++x) {
        const uint8_t * p = rows[x];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int mh = 0; mh < 2; ++mh) {
#pragma unroll
                for (int lh = 0; lh < 2; ++lh) r.ql[x][h * 4 + mh * 2 + lh] = load_u32_a2(p + 64 * h + 32 * mh + 16 * lh + 4 * t);
            }
#pragma unroll
            for (int lh = 0; lh < 2; ++lh) r.qh[x][h * 2 + lh] = load_u32_a2(p + 128 + 32 * h + 16 * lh + 4 * t);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) r.sc[x][q] = load_u32_a2(p + 192 + 4 * q);
        r.d[x] = __half2float(*reinterpret_cast<const __half *>(p + 208));
    }
}

// Q6_K as a format of gemm_small below.
struct Q6K {
    static constexpr int kBytes = kQ6KBytes;
    using Rows = Q6KRows;
    static __device__ __forceinline__ void load(Rows & r, const uint8_t * a, const uint8_t * b, int t) { load_q6k(r, a, b, t); }

    template <int NT, class Acts>
    static __device__ __forceinline__ void multiply(const Rows & cur, float (&acc)[NT][4], const Acts & x, int g, int t) {
#pragma unroll
        for (int G = 0; G < 16; ++G) {
            const int h = G / 8, m = (G / 2) % 4, lh = G % 2;
            int a[2];
            float fs[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const uint32_t lo = (cur.ql[r][h * 4 + (m % 2) * 2 + lh] >> (4 * (m / 2))) & 0x0F0F0F0Fu;
                const uint32_t hi = ((cur.qh[r][h * 2 + lh] >> (2 * m)) & 0x03030303u) << 4;
                a[r] = int(__vsub4(lo | hi, 0x20202020u));
                fs[r] = cur.d[r] * float(int8_t(byte_of(cur.sc[r], G)));
            }
            const float2 * s_blk = x.scales(G / 2) + 2 * t;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint32_t bx = *reinterpret_cast<const uint32_t *>(x.values(nt * 8 + g, G / 2) + (G % 2) * 16 + 4 * t);
                int c[4] = {0, 0, 0, 0};
                mma_k16(c, a[0], a[1], int(bx));
                const float4 s = *reinterpret_cast<const float4 *>(s_blk + nt * 8);
                acc[nt][0] += fs[0] * s.x * exact_float(c[0]);
                acc[nt][1] += fs[0] * s.z * exact_float(c[1]);
                acc[nt][2] += fs[1] * s.x * exact_float(c[2]);
                acc[nt][3] += fs[1] * s.z * exact_float(c[3]);
            }
        }
    }
};

// The kernel, for either format. Variants (small_batch_gemm.h) trade registers for occupancy: MINB
// blocks per SM (a register cap), and whether the next superblock's weights are loaded while this
// one is multiplied; R row tiles per block share their activation loads.
template <class Format, int NT, int MINB, bool PREFETCH, int R>
__global__ void __launch_bounds__(kThreads, MINB) gemm_small(const uint8_t * __restrict__ w, size_t row_bytes, int64_t nrows,
                                                        int64_t n_super, const int8_t * __restrict__ xq,
                                                        const float2 * __restrict__ xs, int64_t k, int n,
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
        Format::template multiply<NT>(cur, acc, GlobalActs{xq, xs, k, i, 8 * NT}, g, t);
        if (PREFETCH) cur = next;
    }
    reduce_and_store<NT, R>(acc, y, y_stride, block_row0, nrows, n);
}

// ---- split kernel (variants 7 and 8): 128 rows a block, K split over blocks --------------------
// The kernels above read each activation byte from L2 once per 16 weight rows: at 16 columns that
// is 2.2 times the bytes of the Q4_K weights themselves, and the 16-column time grew with it. Here
// a block's 8 warps each own 16 rows of a 128-row tile and walk the same superblocks together, so
// one copy of the activations in shared memory (staged kStages superblocks ahead with cp.async)
// serves 128 rows. A 128-row tile alone would leave most SMs idle on the 5120-row matrices, so the
// superblocks are also split over gridDim.y blocks; those write partial sums, and the last block of
// a tile to finish (an arrival counter) adds them in split order, so results stay deterministic.
constexpr int kSplitRows = kWarps * kTileRows;
constexpr int kStages = 4;

__device__ __forceinline__ void cp_async16(void * smem, const void * gmem) {
    const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

template <int NT>
struct ActStage {
    int8_t q[8 * NT * kQK];   // StagedActs's layout
    float2 s[8 * 8 * NT];
};

// Copies superblock i's activations into a stage: 16-byte pieces, consecutive threads reading
// consecutive bytes of one column.
template <int NT>
__device__ __forceinline__ void stage_acts(ActStage<NT> & st, const int8_t * __restrict__ xq, const float2 * __restrict__ xs,
                                           int64_t k, int64_t i) {
    constexpr int n_pad = 8 * NT;
    for (int p = threadIdx.x; p < n_pad * 16; p += kThreads) {
        const int col = p / 16, sb = (p % 16) / 2, half = p % 2;
        cp_async16(st.q + ((col / 8) * 8 + sb) * 256 + (col % 8) * 32 + half * 16, xq + int64_t(col) * k + i * kQK + (p % 16) * 16);
    }
    constexpr int s_pieces = 8 * n_pad * int(sizeof(float2)) / 16;
    for (int p = threadIdx.x; p < s_pieces; p += kThreads) {
        cp_async16(reinterpret_cast<char *>(st.s) + p * 16, reinterpret_cast<const char *>(xs + i * 8 * n_pad) + p * 16);
    }
}

template <class Format, int NT>
__global__ void __launch_bounds__(kThreads, 2) gemm_split(const uint8_t * __restrict__ w, size_t row_bytes, int64_t nrows,
                                                         int64_t n_super, int64_t per_split, const int8_t * __restrict__ xq,
                                                         const float2 * __restrict__ xs, int64_t k, int n,
                                                         float * __restrict__ y, int64_t y_stride,
                                                         float * __restrict__ partial, unsigned * __restrict__ counters) {
    constexpr int n_pad = 8 * NT;
    __shared__ __align__(16) ActStage<NT> stages[kStages];
    __shared__ bool last_arrival;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int split = blockIdx.y, n_splits = gridDim.y;
    const int64_t i0 = split * per_split, i1 = min(n_super, i0 + per_split);
    const int64_t tile0 = int64_t(blockIdx.x) * kSplitRows, row0 = tile0 + warp * kTileRows;
    const uint8_t * wa = w + min(row0 + g, nrows - 1) * row_bytes;       // rows past the end repeat the last
    const uint8_t * wb = w + min(row0 + g + 8, nrows - 1) * row_bytes;   // one; their sums are not stored
    float acc[NT][4] = {};

#pragma unroll
    for (int p = 0; p < kStages - 1; ++p) {   // one commit group per stage, empty past the end
        if (i0 + p < i1) stage_acts<NT>(stages[p], xq, xs, k, i0 + p);
        cp_async_commit();
    }
    typename Format::Rows cur, next;
    if (i0 < i1) Format::load(cur, wa + i0 * Format::kBytes, wb + i0 * Format::kBytes, t);
    for (int64_t i = i0; i < i1; ++i) {
        const int slot = int((i - i0) % kStages);
        cp_async_wait<kStages - 2>();   // this superblock's stage has landed (for this thread's copies)
        __syncthreads();                // ... for everyone's, and every warp is done with stage i - 1
        if (i + kStages - 1 < i1) stage_acts<NT>(stages[(slot + kStages - 1) % kStages], xq, xs, k, i + kStages - 1);
        cp_async_commit();
        if (i + 1 < i1) Format::load(next, wa + (i + 1) * Format::kBytes, wb + (i + 1) * Format::kBytes, t);
        Format::template multiply<NT>(cur, acc, StagedActs{stages[slot].q, stages[slot].s, n_pad}, g, t);
        cur = next;
    }

    // this thread's sums: rows g and g + 8 of the warp's tile, columns nt * 8 + 2t and + 1
    const int64_t rows_pad = int64_t(gridDim.x) * kSplitRows;
    float * out = n_splits == 1 ? y : partial + int64_t(split) * n_pad * rows_pad;
    const int64_t out_stride = n_splits == 1 ? y_stride : rows_pad;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = nt * 8 + 2 * t + e % 2;
            const int64_t row = row0 + g + 8 * (e / 2);
            if (col < n && (n_splits > 1 || row < nrows)) out[col * out_stride + row] = acc[nt][e];
        }
    }
    if (n_splits == 1) return;
    __threadfence();   // the partials are visible device-wide before this block counts as arrived
    __syncthreads();
    if (threadIdx.x == 0) last_arrival = atomicAdd(&counters[blockIdx.x], 1u) == unsigned(n_splits - 1);
    __syncthreads();
    if (!last_arrival) return;
    __threadfence();
    for (int idx = threadIdx.x; idx < kSplitRows * n; idx += kThreads) {
        const int64_t row = tile0 + idx % kSplitRows;
        const int col = idx / kSplitRows;
        if (row >= nrows) continue;
        float sum = 0.0f;
        for (int sp = 0; sp < n_splits; ++sp) sum += __ldcg(partial + (int64_t(sp) * n_pad + col) * rows_pad + row);
        y[col * y_stride + row] = sum;
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0;   // ready for the next call
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

// Splits of K for gemm_split: enough blocks for blocks_per_sm on every SM, each split at least two
// superblocks, the partials within the scratch's room and the tiles within its counters.
int64_t k_splits(const SmallGemm & g, int blocks_per_sm) {
    const int64_t n_super = g.k / kQK, tiles = (g.nrows + kSplitRows - 1) / kSplitRows;
    const int64_t target = int64_t(blocks_per_sm) * sm_count();
    if (tiles >= target || tiles > kSmallGemmCounters) return 1;
    int64_t s = (target + tiles - 1) / tiles;
    s = std::min(s, n_super / 2);
    s = std::min(s, kSmallGemmMaxPartialRows / (tiles * kSplitRows));
    if (s <= 1) return 1;
    const int64_t per = (n_super + s - 1) / s;
    return (n_super + per - 1) / per;   // no empty split
}

template <int NT>
cudaError_t launch_split(const SmallGemm & g, const int8_t * xq, const float2 * xs, float * partial, unsigned * counters,
                         int blocks_per_sm, cudaStream_t s) {
    const int64_t n_super = g.k / kQK, splits = k_splits(g, blocks_per_sm);
    const int64_t per = (n_super + splits - 1) / splits;
    const dim3 grid(unsigned((g.nrows + kSplitRows - 1) / kSplitRows), unsigned(splits));
    const auto * w = static_cast<const uint8_t *>(g.w);
    if (g.type == 12) {
        gemm_split<Q4K, NT><<<grid, kThreads, 0, s>>>(w, g.row_bytes, g.nrows, n_super, per, xq, xs, g.k, g.n, g.y, g.y_stride, partial, counters);
    } else {
        gemm_split<Q6K, NT><<<grid, kThreads, 0, s>>>(w, g.row_bytes, g.nrows, n_super, per, xq, xs, g.k, g.n, g.y, g.y_stride, partial, counters);
    }
    return cudaGetLastError();
}

template <int NT, int MINB, bool PREFETCH, int R = 1>
cudaError_t launch1(const SmallGemm & g, const int8_t * xq, const float2 * xs, cudaStream_t s) {
    const dim3 grid(unsigned((g.nrows + kTileRows * R - 1) / (kTileRows * R)));
    const auto * w = static_cast<const uint8_t *>(g.w);
    if (g.type == 12) {
        gemm_small<Q4K, NT, MINB, PREFETCH, R><<<grid, kThreads, 0, s>>>(w, g.row_bytes, g.nrows, g.k / kQK, xq, xs, g.k, g.n, g.y, g.y_stride);
    } else {
        gemm_small<Q6K, NT, MINB, PREFETCH, R><<<grid, kThreads, 0, s>>>(w, g.row_bytes, g.nrows, g.k / kQK, xq, xs, g.k, g.n, g.y, g.y_stride);
    }
    return cudaGetLastError();
}

// Where small_batch_gemm.h's scratch parts lie for k values and n_pad columns.
struct ScratchParts {
    unsigned * counters;
    int8_t * xq;
    float2 * xs;
    float * partial;
};

ScratchParts scratch_parts(void * scratch, int64_t k, int n_pad) {
    ScratchParts p;
    p.counters = static_cast<unsigned *>(scratch);
    p.xq = reinterpret_cast<int8_t *>(p.counters + kSmallGemmCounters);
    p.xs = reinterpret_cast<float2 *>(p.xq + xq_bytes(k, n_pad));
    p.partial = reinterpret_cast<float *>(reinterpret_cast<char *>(p.xs) + xs_bytes(k, n_pad));
    return p;
}

// small_batch_gemm.h's variants
template <int NT>
cudaError_t launch(const SmallGemm & g, const ScratchParts & p, cudaStream_t s) {
    switch (g.variant) {
        case 1: return launch1<NT, 1, true>(g, p.xq, p.xs, s);
        case 3: return launch1<NT, 3, false>(g, p.xq, p.xs, s);
        case 4: return launch1<NT, 4, false>(g, p.xq, p.xs, s);
        case 5: return launch1<NT, 2, true, 2>(g, p.xq, p.xs, s);
        case 6: return launch1<NT, 2, true, 4>(g, p.xq, p.xs, s);
        case 7: return launch_split<NT>(g, p.xq, p.xs, p.partial, p.counters, 2, s);
        case 8: return launch_split<NT>(g, p.xq, p.xs, p.partial, p.counters, 4, s);
        default: return launch1<NT, 2, true>(g, p.xq, p.xs, s);
    }
}

int padded_cols(const SmallGemm & g) { return 8 * n_tiles(g.n); }

} // namespace

bool small_gemm_supports(int ggml_type) { return ggml_type == 12 || ggml_type == 14; }

int small_gemm_quantize(const SmallGemm & g, void * scratch, void * stream) {
    if (g.n < 1 || g.n > kSmallGemmMaxCols || g.k % kQK != 0) return int(cudaErrorInvalidValue);
    const int n_pad = padded_cols(g);
    const ScratchParts p = scratch_parts(scratch, g.k, n_pad);
    const int64_t pairs = (g.k / 32) * n_pad;
    quantize_columns<<<unsigned((pairs + kWarps - 1) / kWarps), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        g.x, g.x_stride, g.n, n_pad, g.k, p.xq, p.xs);
    return int(cudaGetLastError());
}

int small_gemm_multiply(const SmallGemm & g, void * scratch, void * stream) {
    if (!small_gemm_supports(g.type) || g.n < 1 || g.n > kSmallGemmMaxCols || g.k % kQK != 0) {
        return int(cudaErrorInvalidValue);
    }
    const ScratchParts p = scratch_parts(scratch, g.k, padded_cols(g));
    auto s = static_cast<cudaStream_t>(stream);
    switch (n_tiles(g.n)) {
        case 1: return int(launch<1>(g, p, s));
        case 2: return int(launch<2>(g, p, s));
        case 3: return int(launch<3>(g, p, s));
        default: return int(launch<4>(g, p, s));
    }
}

} // namespace luce::cuda
