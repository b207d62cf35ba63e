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

// ---- activations, quantized once for every matmul that reads them (small_batch_gemm.h's scratch) ----
// For the int8 kernels: int8 per 32 values and a (d, sum of the floats) pair per 32, columns padded
// to n_pad: xq[n_pad][k], xs[k/32][n_pad]. For the f16 Q4_K kernel: the values as f16 in the order
// its mma fragments take them (xh, see HalfCols) and the sum of each 32 as f16 (xsum).
__host__ __device__ inline size_t xq_bytes(int64_t k, int n_pad) { return size_t(n_pad) * size_t(k); }
__host__ __device__ inline size_t xs_bytes(int64_t k, int n_pad) { return size_t(k / 32) * size_t(n_pad) * 2 * sizeof(float); }
__host__ __device__ inline size_t xh_bytes(int64_t k, int n_pad) { return size_t(n_pad) * size_t(k) * sizeof(__half); }

// Where a value of the f16 layout goes: the Q4_K kernel's thread t of a quad holds, per superblock
// and per word h (0, 1) of its 8 qs bytes [32j + 8t, +8), four values of sub-block 2j (low nibbles)
// and four of 2j + 1 (high nibbles); see Q4KHalf. Those positions of a column lie in 16 bytes
// there: [superblock][2j + h][column][t][u = sub-block % 2][4], the 4 in nibble-pair order 0, 2, 1, 3.
__device__ __forceinline__ int64_t xh_index(int64_t i, int sb, int l, int col, int n_pad) {
    const int j = sb / 2, u = sb % 2, t = l / 8, h = (l / 4) % 2, e = l % 4;
    const int slot = (e == 1 ? 2 : e == 2 ? 1 : e);
    return (((i * 8 + 2 * j + h) * n_pad + col) * 4 + t) * 8 + u * 4 + slot;
}

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
    xq[int64_t(col) * k + b * 32 + lane] = int8_t(q);
    if (lane == 0) xs[b * n_pad + col] = make_float2(d, sum);
    const int64_t i = b / 8;
    const int sb = int(b % 8);
    // ggml's q8_1 value q * d (not v itself): the f16 kernel then rounds like ggml's int8 kernels
    // (up to f16's 11 bits, finer than q8_1's step), so verify stays close to single-token decoding
    xh[xh_index(i, sb, lane, col, n_pad)] = __float2half_rn(float(q) * d);
    // the sums as the f16 kernel's min-term mma takes them: [superblock][column][sub-block]
    if (lane == 0) xsum[(i * n_pad + col) * 8 + sb] = __float2half_rn(sum);
}

// ---- tensor-core primitives -------------------------------------------------------------------
__device__ __forceinline__ void mma_k32(int (&c)[4], int a0, int a1, int a2, int a3, int b0, int b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// f16 × f16 with f32 accumulation: 16 rows × 8 columns × 16 values, and × 8 values
__device__ __forceinline__ void mma_f16_k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_f16_k8(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0));
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

// ---- the quantized activations as the kernels get them ------------------------------------------
struct QuantizedCols {
    const int8_t * xq;
    const float2 * xs;
    const uint4 * xh;      // xh_index's layout, 16 bytes a thread
    const uint32_t * xsum; // [superblock][column][4]: sums of sub-blocks 2t, 2t + 1 as a half2
    int64_t k;
    int n_pad;
};

// ---- where a superblock's int8 activations are read from ----------------------------------------
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

    template <int NT>
    static __device__ __forceinline__ void multiply(const Rows & cur, float (&acc)[NT][4], const QuantizedCols & cols, int64_t i,
                                                    int g, int t) {
        const GlobalActs x{cols.xq, cols.xs, cols.k, i, cols.n_pad};
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

// ---- Q4_K on f16 tensor cores ---------------------------------------------------------------------
// The int8 kernel above needs a float epilogue per mma (each 32 values have their own activation
// scale): about 50 instructions per mma at 16 columns, so it ran at a quarter of the weights'
// bandwidth (bench/RESULTS.md). Here the activations are f16 and the weights enter the mma as the
// exact integers q * sc (at most 15 * 63, exact in f16), so one mma chain spans a whole superblock
// in f32 and d applies once per superblock. The minimums' term, dmin * sum over the 8 sub-blocks of
// m * (sum of the activations), is one more mma (m16n8k8) per superblock. The activations are
// q8_1's (int8 times scale, in f16), the sums f16 as in ggml's q8_1 blocks.
__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __half2 bits_half2(uint32_t b) { return *reinterpret_cast<__half2 *>(&b); }

// Two bytes (the low 16 bits of w, at most 255 each) as an exact half2 (byte 0 low).
__device__ __forceinline__ __half2 bytes_to_half2(uint32_t w) {
    const uint32_t biased = (w & 0xffu) | ((w & 0xff00u) << 8) | 0x64006400u;   // 1024 + byte
    return __hsub2(bits_half2(biased), __float2half2_rn(1024.0f));
}

struct Q4KHalf {
    static constexpr int kBytes = kQ4KBytes;
    using Rows = Q4KRows;
    static __device__ __forceinline__ void load(Rows & r, const uint8_t * a, const uint8_t * b, int t) { load_q4k(r, a, b, t); }

    template <int NT>
    static __device__ __forceinline__ void multiply(const Rows & cur, float (&acc)[NT][4], const QuantizedCols & cols, int64_t i,
                                                    int g, int t) {
        float d[2], dmin[2];
        uint32_t scp[2][2], mnp[2][2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            d[r] = f16_bits(cur.head[r].x & 0xffffu);
            dmin[r] = f16_bits(cur.head[r].x >> 16);
            q4k_unpack(cur.head[r], scp[r], mnp[r]);
        }
        float sum[NT][4] = {};
        const uint4 * xh = cols.xh + (i * 8 * cols.n_pad + g) * 4 + t;   // + ((2j + h) * n_pad + nt * 8) * 4
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            // (sc, sc) of sub-blocks 2j and 2j + 1 for both rows, and (-1024 sc, -1024 sc)
            __half2 sc[2][2], bias[2][2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const __half2 both = bytes_to_half2(scp[r][j / 2] >> (16 * (j % 2)));
                sc[r][0] = __low2half2(both);
                sc[r][1] = __high2half2(both);
                bias[r][0] = __hmul2(sc[r][0], __float2half2_rn(-1024.0f));
                bias[r][1] = __hmul2(sc[r][1], __float2half2_rn(-1024.0f));
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const uint32_t w[2] = {h ? cur.qs[0][j].y : cur.qs[0][j].x, h ? cur.qs[1][j].y : cur.qs[1][j].x};
                uint32_t a[2][4];   // [u][mma register]: rows g, g+8 of nibbles (0, 2), then (1, 3)
#pragma unroll
                for (int u = 0; u < 2; ++u) {
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        // (1024 + q) * sc - 1024 * sc in one rounding: q * sc exactly
                        const uint32_t p02 = ((w[r] >> (4 * u)) & 0x000F000Fu) | 0x64006400u;
                        const uint32_t p13 = ((w[r] >> (4 * u + 8)) & 0x000F000Fu) | 0x64006400u;
                        a[u][r] = half2_bits(__hfma2(bits_half2(p02), sc[r][u], bias[r][u]));
                        a[u][2 + r] = half2_bits(__hfma2(bits_half2(p13), sc[r][u], bias[r][u]));
                    }
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const uint4 bx = xh[((2 * j + h) * cols.n_pad + nt * 8) * 4];
                    mma_f16_k16(sum[nt], a[0][0], a[0][1], a[0][2], a[0][3], bx.x, bx.y);
                    mma_f16_k16(sum[nt], a[1][0], a[1][1], a[1][2], a[1][3], bx.z, bx.w);
                }
            }
        }
        // minimums: m of sub-blocks 2t, 2t + 1 for rows g and g + 8 (m16n8k8's A) times the sums
        uint32_t am[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) am[r] = half2_bits(bytes_to_half2(mnp[r][t / 2] >> (16 * (t % 2))));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            float mins[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_f16_k8(mins, am[0], am[1], cols.xsum[(i * cols.n_pad + nt * 8 + g) * 4 + t]);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nt][e] += d[e / 2] * sum[nt][e] - dmin[e / 2] * mins[e];
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

    template <int NT>
    static __device__ __forceinline__ void multiply(const Rows & cur, float (&acc)[NT][4], const QuantizedCols & cols, int64_t i,
                                                    int g, int t) {
        const GlobalActs x{cols.xq, cols.xs, cols.k, i, cols.n_pad};
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

// Q6_K on f16 tensor cores: q - 32 as exact f16, one m16n8k16 mma per 16-value group against the
// f16 activations of Q4KHalf's layout (a Q6_K thread's 4 values of a group sit in 8 bytes of it),
// d * sc applied to the group's sum in f32. q * sc can exceed f16's exact integers, so the scale
// stays outside the mma; the gain over Q6K is the int8 path's per-mma scale and conversion work.
struct Q6KHalf {
    static constexpr int kBytes = kQ6KBytes;
    using Rows = Q6KRows;
    static __device__ __forceinline__ void load(Rows & r, const uint8_t * a, const uint8_t * b, int t) { load_q6k(r, a, b, t); }

    template <int NT>
    static __device__ __forceinline__ void multiply(const Rows & cur, float (&acc)[NT][4], const QuantizedCols & cols, int64_t i,
                                                    int g, int t) {
        const uint2 * xh = reinterpret_cast<const uint2 *>(cols.xh);
        const __half2 offset = __float2half2_rn(1056.0f);   // the 1024 of the bit trick + Q6_K's 32
#pragma unroll
        for (int G = 0; G < 16; ++G) {
            const int h = G / 8, m = (G / 2) % 4, lh = G % 2;
            uint32_t a[4];
            float ds[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const uint32_t lo = (cur.ql[r][h * 4 + (m % 2) * 2 + lh] >> (4 * (m / 2))) & 0x0F0F0F0Fu;
                const uint32_t hi = ((cur.qh[r][h * 2 + lh] >> (2 * m)) & 0x03030303u) << 4;
                const uint32_t v = lo | hi;   // bytes e = 0..3: values 16G + 4t + e
                a[r] = half2_bits(__hsub2(bits_half2((v & 0x00FF00FFu) | 0x64006400u), offset));             // e = 0, 2
                a[2 + r] = half2_bits(__hsub2(bits_half2(((v >> 8) & 0x00FF00FFu) | 0x64006400u), offset));  // e = 1, 3
                ds[r] = cur.d[r] * float(int8_t(byte_of(cur.sc[r], G)));
            }
            // where values 16G + 4t + e lie in xh_index's layout: sub-block pair 2h + m/2, word t % 2,
            // quad thread 2lh + t/2, half m % 2
            const int64_t base = ((i * 8 + 2 * (2 * h + m / 2) + t % 2) * cols.n_pad + g) * 4 + 2 * lh + t / 2;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint2 bx = xh[(base + nt * 8 * 4) * 2 + m % 2];
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_f16_k16(c, a[0], a[1], a[2], a[3], bx.x, bx.y);
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[nt][e] += ds[e / 2] * c[e];
            }
        }
    }
};

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

// The int8 kernel's register/occupancy trade-offs (variants 1..6), for either weight type.
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

template <int NT>
cudaError_t launch(const SmallGemm & g, const QuantizedCols & cols, float * partial, unsigned * counters, cudaStream_t s) {
    const bool stream = (g.variant == 10 || g.variant == 11) && (g.nrows + kTileRows - 1) / kTileRows <= kSmallGemmStreamTiles;
    if (g.type == 14) {
        if (stream) {
            return g.variant == 10 ? launch_stream<Q6KHalf, NT>(g, cols, partial, counters, s)
                                   : launch_stream<Q6K, NT>(g, cols, partial, counters, s);
        }
        if (g.variant == 10 || g.variant == 12) return launch1<Q6KHalf, NT, 2, true>(g, cols, s);
        SmallGemm q6 = g;
        if (q6.variant >= 7) q6.variant = 2;   // the int8 kernel
        return launch_int8<Q6K, NT>(q6, cols, s);
    }
    if (stream) {
        return g.variant == 10 ? launch_stream<Q4KHalf, NT>(g, cols, partial, counters, s)
                               : launch_stream<Q4K, NT>(g, cols, partial, counters, s);
    }
    if (g.variant >= 7 && g.variant != 11) return launch_q4k_half<NT>(g, cols, s);
    SmallGemm q4 = g;
    if (q4.variant >= 7) q4.variant = 2;
    return launch_int8<Q4K, NT>(q4, cols, s);
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
    quantize_columns<<<unsigned((pairs + kWarps - 1) / kWarps), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
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
