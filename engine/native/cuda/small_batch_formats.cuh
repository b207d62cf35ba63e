// small_batch_formats.cuh — what the small-batch kernels (small_batch_gemm.cu) multiply: the
// activation layout the quantize kernel writes, the tensor-core primitives, and one struct per
// weight format (Q4KHalf, Q6KHalf, Q80Half, Q41Half: f16 mma) that loads one thread's part of a 256-value
// step for rows g and g + 8 and multiplies it with every column.
// Included by small_batch_gemm.cu only (internal linkage).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace luce::cuda {
namespace {

constexpr int kQK = 256;          // values per K-quant superblock
constexpr int kTileRows = 16;     // mma M
constexpr int kQ4KBytes = 144;    // d, dmin (f16), scales[12], qs[128]
constexpr int kQ6KBytes = 210;    // ql[128], qh[64], scales[16] (int8), d (f16)
constexpr int kQ80Bytes = 34;     // d (f16), qs[32] (int8): 32 values
constexpr int kQ80Blocks = 8;     // Q8_0 blocks in the kernels' 256-value step
constexpr int kQ41Bytes = 20;     // d, m (f16), qs[16] (value l: low nibble of qs[l], l < 16; else high of qs[l - 16])

// ---- activations, quantized once for every matmul that reads them (small_batch_gemm.h's scratch) ----
// q8_1's int8 values times their scale as f16, in the order the mma fragments take them (xh, see
// xh_index), and the sum of each 32 as f16 (xsum); columns padded to n_pad.
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

// ---- tensor-core primitives -------------------------------------------------------------------
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

__device__ __forceinline__ float f16_bits(uint32_t bits16) { return __half2float(__ushort_as_half(uint16_t(bits16))); }
__device__ __forceinline__ uint32_t byte_of(const uint32_t * w, int i) { return (w[i / 4] >> (8 * (i % 4))) & 0xffu; }

// 32-bit load from a 2-byte aligned address (Q6_K blocks are 210 bytes, so only 2-aligned)
__device__ __forceinline__ uint32_t load_u32_a2(const uint8_t * p) {
    const uint16_t * h = reinterpret_cast<const uint16_t *>(p);
    return uint32_t(h[0]) | (uint32_t(h[1]) << 16);
}

// Read-only loads through L1 (Q8_0's 2- and 4-byte fields re-read sectors there). Skipping L1 for
// weight loads was measured slower for every format (docs/decisions.md).
__device__ __forceinline__ uint32_t ldg_u32(const uint8_t * p) { return __ldg(reinterpret_cast<const unsigned int *>(p)); }
__device__ __forceinline__ uint32_t ldg_u16(const uint8_t * p) { return __ldg(reinterpret_cast<const unsigned short *>(p)); }

// ---- the quantized activations as the kernels get them ------------------------------------------
// Columns n..n_pad are padding: the lanes that would load them (mma column g = lane / 4) feed zeros
// instead, so a call reads only its real columns' activations (one in eight of the layout at n = 1).
struct QuantizedCols {
    const uint4 * xh;      // xh_index's layout, 16 bytes a thread
    const uint32_t * xsum; // [superblock][column][4]: sums of sub-blocks 2t, 2t + 1 as a half2
    int64_t k;
    int n_pad;
    int n;                 // real columns
};

// ---- Q4_K: y = d*sc*q - dmin*m per 32-value sub-block -------------------------------------------
// Thread t of a quad (lane % 4) holds bytes [8t, 8t+8) of each 32-byte group of qs.
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

// d, dmin and the unpacked scales and minimums of both rows of a thread's Q4_K superblock.
__device__ __forceinline__ void q4k_scales(const Q4KRows & cur, float (&d)[2], float (&dmin)[2], uint32_t (&sc)[2][2],
                                           uint32_t (&mn)[2][2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        d[r] = f16_bits(cur.head[r].x & 0xffffu);
        dmin[r] = f16_bits(cur.head[r].x >> 16);
        q4k_unpack(cur.head[r], sc[r], mn[r]);
    }
}

// What every Q4_K format of the kernels shares: the block size and how a thread loads its part.
struct Q4KBlocks {
    static constexpr int kBytes = kQ4KBytes;
    static constexpr bool kPartialSteps = false;   // rows are whole superblocks
    using Rows = Q4KRows;
    // blocks: Q8_0 blocks of a partial last step (K-quant rows are whole superblocks)
    static __device__ __forceinline__ void load(Rows & r, const uint8_t * a, const uint8_t * b, int t, int /*blocks*/) { load_q4k(r, a, b, t); }
};

// ---- Q4_K on f16 tensor cores ---------------------------------------------------------------------
// An int8 kernel needs a float epilogue per mma (each 32 values have their own activation scale):
// about 50 instructions per mma at 16 columns, so it ran at a quarter of the weights' bandwidth
// (bench/RESULTS.md). Here the activations are f16 and the weights enter the mma as the
// exact integers q * sc (at most 15 * 63, exact in f16), so one mma chain spans a whole superblock
// in f32 and d applies once per superblock. The minimums' term, dmin * sum over the 8 sub-blocks of
// m * (sum of the activations), is one more mma (m16n8k8) per superblock. The activations are
// q8_1's (int8 times scale, in f16), the sums f16 as in ggml's q8_1 blocks.
__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __half2 bits_half2(uint32_t b) { return *reinterpret_cast<__half2 *>(&b); }

// (w & MASK) | 0x64006400 in one LOP3: written as C++ the compiler emits two (a LOP3 takes one
// immediate), and this is the hot path's most frequent operation.
template <uint32_t MASK>
__device__ __forceinline__ uint32_t masked_into_half2(uint32_t w) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "n"(MASK), "r"(0x64006400u));
    return r;
}

// Two bytes (the low 16 bits of w, at most 255 each) as an exact half2 (byte 0 low).
__device__ __forceinline__ __half2 bytes_to_half2(uint32_t w) {
    const uint32_t biased = (w & 0xffu) | ((w & 0xff00u) << 8) | 0x64006400u;   // 1024 + byte
    return __hsub2(bits_half2(biased), __float2half2_rn(1024.0f));
}

// (1024 + byte b of w) twice, as a half2: the start of the exact-integer trick below.
__device__ __forceinline__ __half2 biased_byte_pair(uint32_t w, int b) {
    return bits_half2(__byte_perm(w, 0x64646464u, 0x4040u + 0x0101u * unsigned(b)));
}

struct Q4KHalf : Q4KBlocks {

    // The activations' padded column count is 8 * NT (small_batch_gemm.cu's padded_cols), so their
    // offsets are compile-time constants.
    template <int NT>
    static __device__ __forceinline__ void multiply(const Rows & cur, float (&acc)[NT][4], const QuantizedCols & cols, int64_t i,
                                                    int g, int t) {
        constexpr int n_pad = 8 * NT;
        float d[2], dmin[2];
        uint32_t scp[2][2], mnp[2][2];
        q4k_scales(cur, d, dmin, scp, mnp);
        bool live[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) live[nt] = nt * 8 + g < cols.n;
        // two accumulator chains (words h = 0, 1) halve the dependent mma latency per superblock
        float sum[2][NT][4] = {};
        const uint4 * xh = cols.xh + (i * 8 * n_pad + g) * 4 + t;   // + ((2j + h) * n_pad + nt * 8) * 4
        const __half2 k1024 = __float2half2_rn(1024.0f), km1024 = __float2half2_rn(-1024.0f);
        const __half2 k16th = __float2half2_rn(1.0f / 16.0f), km64 = __float2half2_rn(-64.0f);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            // Sub-block 2j (low nibbles, 1024 + q): (sc, sc) and -1024 sc. Sub-block 2j + 1 (high
            // nibbles, masked in place as 1024 + 16q): (sc/16, sc/16) and -64 sc. Either way one
            // hfma2 gives q * sc exactly (at most 945).
            __half2 sc[2][2], bias[2][2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const __half2 lo = biased_byte_pair(scp[r][j / 2], (2 * j) % 4);
                const __half2 hi = biased_byte_pair(scp[r][j / 2], (2 * j + 1) % 4);
                sc[r][0] = __hsub2(lo, k1024);
                sc[r][1] = __hfma2(hi, k16th, km64);
                bias[r][0] = __hmul2(sc[r][0], km1024);
                bias[r][1] = __hmul2(sc[r][1], km1024);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                uint32_t a[2][4];   // [u][mma register]: rows g, g+8 of nibbles (0, 2), then (1, 3)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const uint32_t w = h ? cur.qs[r][j].y : cur.qs[r][j].x, w8 = w >> 8;
                    a[0][r] = half2_bits(__hfma2(bits_half2(masked_into_half2<0x000F000Fu>(w)), sc[r][0], bias[r][0]));
                    a[0][2 + r] = half2_bits(__hfma2(bits_half2(masked_into_half2<0x000F000Fu>(w8)), sc[r][0], bias[r][0]));
                    a[1][r] = half2_bits(__hfma2(bits_half2(masked_into_half2<0x00F000F0u>(w)), sc[r][1], bias[r][1]));
                    a[1][2 + r] = half2_bits(__hfma2(bits_half2(masked_into_half2<0x00F000F0u>(w8)), sc[r][1], bias[r][1]));
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const uint4 bx = live[nt] ? xh[((2 * j + h) * n_pad + nt * 8) * 4] : make_uint4(0, 0, 0, 0);
                    mma_f16_k16(sum[h][nt], a[0][0], a[0][1], a[0][2], a[0][3], bx.x, bx.y);
                    mma_f16_k16(sum[h][nt], a[1][0], a[1][1], a[1][2], a[1][3], bx.z, bx.w);
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
            const uint32_t sums = live[nt] ? cols.xsum[(i * n_pad + nt * 8 + g) * 4 + t] : 0u;
            mma_f16_k8(mins, am[0], am[1], sums);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nt][e] += d[e / 2] * (sum[0][nt][e] + sum[1][nt][e]) - dmin[e / 2] * mins[e];
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

// The 4 six-bit values (0..63, one a byte) of 16-value group G that row r of a thread holds:
// values 16G + 4t + e, e = 0..3.
__device__ __forceinline__ uint32_t q6k_values(const Q6KRows & cur, int r, int G) {
    const int h = G / 8, m = (G / 2) % 4, lh = G % 2;
    const uint32_t lo = (cur.ql[r][h * 4 + (m % 2) * 2 + lh] >> (4 * (m / 2))) & 0x0F0F0F0Fu;
    const uint32_t hi = ((cur.qh[r][h * 2 + lh] >> (2 * m)) & 0x03030303u) << 4;
    return lo | hi;
}

// What every Q6_K format of the kernels shares: the block size and how a thread loads its part.
struct Q6KBlocks {
    static constexpr int kBytes = kQ6KBytes;
    static constexpr bool kPartialSteps = false;
    using Rows = Q6KRows;
    static __device__ __forceinline__ void load(Rows & r, const uint8_t * a, const uint8_t * b, int t, int /*blocks*/) { load_q6k(r, a, b, t); }
};

// Q6_K on f16 tensor cores: q - 32 as exact f16, one m16n8k16 mma per 16-value group against the
// f16 activations of Q4KHalf's layout (a Q6_K thread's 4 values of a group sit in 8 bytes of it),
// d * sc applied to the group's sum in f32. q * sc can exceed f16's exact integers, so the scale
// stays outside the mma; the gain over an int8 kernel is its per-mma scale and conversion work.
struct Q6KHalf : Q6KBlocks {

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
                const uint32_t v = q6k_values(cur, r, G);   // bytes e = 0..3: values 16G + 4t + e
                a[r] = half2_bits(__hsub2(bits_half2((v & 0x00FF00FFu) | 0x64006400u), offset));             // e = 0, 2
                a[2 + r] = half2_bits(__hsub2(bits_half2(((v >> 8) & 0x00FF00FFu) | 0x64006400u), offset));  // e = 1, 3
                ds[r] = cur.d[r] * float(int8_t(byte_of(cur.sc[r], G)));
            }
            // where values 16G + 4t + e lie in xh_index's layout: sub-block pair 2h + m/2, word t % 2,
            // quad thread 2lh + t/2, half m % 2
            const int64_t base = ((i * 8 + 2 * (2 * h + m / 2) + t % 2) * cols.n_pad + g) * 4 + 2 * lh + t / 2;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint2 bx = nt * 8 + g < cols.n ? xh[(base + nt * 8 * 4) * 2 + m % 2] : make_uint2(0, 0);
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_f16_k16(c, a[0], a[1], a[2], a[3], bx.x, bx.y);
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[nt][e] += ds[e / 2] * c[e];
            }
        }
    }
};

// ---- Q8_0: y = d*q per 32-value block --------------------------------------------------------------
// The kernels step through K 256 values at a time: 8 blocks (272 bytes, so a step starts 16-byte
// aligned in rows of a multiple of 256 values; 4-byte aligned in rows of a multiple of 64). Thread t of a quad holds, per block b and word h,
// qs bytes [8t + 4h, +4) of rows g and g + 8: the values xh_index places at sub-block b, word h.
struct Q80Rows {
    uint32_t q[2][2 * kQ80Blocks];   // [row][2b + h]
    uint32_t d[2][kQ80Blocks / 2];   // [row][m]: the f16 scales of blocks 2m, 2m + 1
};

// Block b's qs start 2 bytes into it: 4-aligned for odd b, 2 mod 4 for even b (34b + 2). A partial
// last step (rows of k % 256 != 0) has `blocks` < 8 blocks, an even number: the rest read as zeros
// (never past the row: the next row's bytes, or the end of the tensor), and their activations are
// zeros too (quantize_columns), so they add nothing.
__device__ __forceinline__ void load_q80_row(uint32_t (&q)[2 * kQ80Blocks], uint32_t (&d)[kQ80Blocks / 2], const uint8_t * p, int t,
                                             int blocks) {
#pragma unroll
    for (int b = 0; b < kQ80Blocks; ++b) {
        const uint8_t * qs = p + kQ80Bytes * b + 2 + 8 * t;
        if (b >= blocks) {
            q[2 * b] = q[2 * b + 1] = 0;
        } else if (b % 2) {
            q[2 * b] = ldg_u32(qs);
            q[2 * b + 1] = ldg_u32(qs + 4);
        } else {
            const uint32_t lo = ldg_u16(qs), mid = ldg_u32(qs + 2), hi = ldg_u16(qs + 6);
            q[2 * b] = __byte_perm(lo, mid, 0x5410);
            q[2 * b + 1] = __byte_perm(mid, hi, 0x5432);
        }
    }
    // d of block 2m leads its 4-aligned word; d of block 2m + 1 is the high half of the word 32
    // bytes further (its block starts at 34)
#pragma unroll
    for (int m = 0; m < kQ80Blocks / 2; ++m) {
        d[m] = 2 * m < blocks ? __byte_perm(ldg_u32(p + 2 * kQ80Bytes * m), ldg_u32(p + 2 * kQ80Bytes * m + 32), 0x7610) : 0u;
    }
}

struct Q80Blocks {
    static constexpr int kBytes = kQ80Blocks * kQ80Bytes;
    static constexpr bool kPartialSteps = false;
    using Rows = Q80Rows;
    static __device__ __forceinline__ void load(Rows & r, const uint8_t * a, const uint8_t * b, int t, int blocks) {
        load_q80_row(r.q[0], r.d[0], a, t, blocks);
        load_q80_row(r.q[1], r.d[1], b, t, blocks);
    }
};

// Four int8 values as two exact half2: (e0, e2) and (e1, e3), the xh layout's nibble-pair order.
// Biased to unsigned (q + 128), placed under 0x64 as 1024 + q + 128, then 1152 taken off.
__device__ __forceinline__ void int8x4_to_half2x2(uint32_t w, uint32_t & even, uint32_t & odd) {
    const uint32_t u = w ^ 0x80808080u;
    const __half2 k1152 = __float2half2_rn(1152.0f);
    even = half2_bits(__hsub2(bits_half2(__byte_perm(u, 0x64646464u, 0x4240)), k1152));
    odd = half2_bits(__hsub2(bits_half2(__byte_perm(u, 0x64646464u, 0x4341)), k1152));
}

// Formats of 32-value blocks with a scale each (Q8_0, Q4_1): per pair of blocks 2j, 2j + 1 of the
// step, the quad's values as exact f16 times every column, two m16n8k16 mma per word (h = 0, 1) into
// each block's own sum, and the sums times their scales d in f32 into acc. words(j, u, r, h, lo, hi)
// gives row r's word h of block 2j + u as its (e0, e2) and (e1, e3) half2; scales(j, r) the float2 d
// of blocks 2j, 2j + 1 of row r.
template <int NT, class Words, class Scales>
__device__ __forceinline__ void multiply_scaled_blocks(float (&acc)[NT][4], const QuantizedCols & cols, int64_t i, int g, int t,
                                                       Words words, Scales scales) {
    constexpr int n_pad = 8 * NT;
    bool live[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) live[nt] = nt * 8 + g < cols.n;
    const uint4 * xh = cols.xh + (i * 8 * n_pad + g) * 4 + t;   // + ((2j + h) * n_pad + nt * 8) * 4
#pragma unroll
    for (int j = 0; j < 4; ++j) {   // blocks 2j (u = 0) and 2j + 1 (u = 1)
        float c[2][NT][4] = {};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint32_t a[2][4];   // [u][mma register]: rows g, g + 8 of (e0, e2), then (e1, e3)
#pragma unroll
            for (int u = 0; u < 2; ++u) {
#pragma unroll
                for (int r = 0; r < 2; ++r) words(j, u, r, h, a[u][r], a[u][2 + r]);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint4 bx = live[nt] ? xh[((2 * j + h) * n_pad + nt * 8) * 4] : make_uint4(0, 0, 0, 0);
                mma_f16_k16(c[0][nt], a[0][0], a[0][1], a[0][2], a[0][3], bx.x, bx.y);
                mma_f16_k16(c[1][nt], a[1][0], a[1][1], a[1][2], a[1][3], bx.z, bx.w);
            }
        }
        float2 d[2];   // [row]: d of blocks 2j, 2j + 1
#pragma unroll
        for (int r = 0; r < 2; ++r) d[r] = scales(j, r);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nt][e] += d[e / 2].x * c[0][nt][e] + d[e / 2].y * c[1][nt][e];
        }
    }
}

// Q8_0 on f16 tensor cores: q as exact f16, d per block in f32 (multiply_scaled_blocks), as Q6KHalf
// does per group.
struct Q80Half : Q80Blocks {

    template <int NT>
    static __device__ __forceinline__ void multiply(const Rows & cur, float (&acc)[NT][4], const QuantizedCols & cols, int64_t i,
                                                    int g, int t) {
        multiply_scaled_blocks<NT>(
            acc, cols, i, g, t,
            [&](int j, int u, int r, int h, uint32_t & lo, uint32_t & hi) { int8x4_to_half2x2(cur.q[r][2 * (2 * j + u) + h], lo, hi); },
            [&](int j, int r) { return __half22float2(bits_half2(cur.d[r][j])); });
    }
};

// Q8_0 rows of k % 256 != 0: a kernel of its own takes the partial last step after its loop over
// whole ones, so that the kernels of whole steps keep their registers.
struct Q80HalfPartial : Q80Half {
    static constexpr bool kPartialSteps = true;
};

// ---- Q4_1: y = d*q + m per 32-value block (SmolLM2's matrices) --------------------------------------
// A step is 8 blocks of 20 bytes, as Q8_0's. In xh_index's layout thread t of a quad holds values
// [8t, 8t + 8) of each block: for t = 0, 1 the low nibbles of qs bytes [8t, 8t + 8), for t = 2, 3
// the high nibbles of bytes [8(t - 2), +8). Word h of block b is 4 of those bytes, so the same bytes
// serve threads t and t + 2, shifted by 4 bits.
struct Q41Rows {
    uint32_t q[2][2 * kQ80Blocks];   // [row][2b + h]: qs bytes [8(t % 2) + 4h, +4) of block b
    uint32_t dm[2][kQ80Blocks];      // [row][b]: d (low half) and m (high half) of block b
};

// A partial last step has `blocks` < 8 blocks (rows of k % 256 != 0, k a multiple of 64): the rest
// read as zeros, never past the row, and meet zero activations (quantize_columns).
__device__ __forceinline__ void load_q41_row(uint32_t (&q)[2 * kQ80Blocks], uint32_t (&dm)[kQ80Blocks], const uint8_t * p, int t,
                                             int blocks) {
#pragma unroll
    for (int b = 0; b < kQ80Blocks; ++b) {
        if (b >= blocks) {
            q[2 * b] = q[2 * b + 1] = dm[b] = 0;
            continue;
        }
        const uint8_t * blk = p + kQ41Bytes * b;
        dm[b] = ldg_u32(blk);
        q[2 * b] = ldg_u32(blk + 4 + 8 * (t % 2));
        q[2 * b + 1] = ldg_u32(blk + 8 + 8 * (t % 2));
    }
}

struct Q41Blocks {
    static constexpr int kBytes = kQ80Blocks * kQ41Bytes;
    static constexpr bool kPartialSteps = false;
    using Rows = Q41Rows;
    static __device__ __forceinline__ void load(Rows & r, const uint8_t * a, const uint8_t * b, int t, int blocks) {
        load_q41_row(r.q[0], r.dm[0], a, t, blocks);
        load_q41_row(r.q[1], r.dm[1], b, t, blocks);
    }
};

// Q4_1 on f16 tensor cores: q as exact f16 (1024 + q with 1024 taken off), d per block in f32
// (multiply_scaled_blocks, as Q80Half); the m term, the sum over the step's 8 blocks of m * (the
// block's activation sum), is one m16n8k8 mma as Q4KHalf's minimums (m and the sums in f16, as
// ggml's q8_1 sums).
struct Q41Half : Q41Blocks {

    template <int NT>
    static __device__ __forceinline__ void multiply(const Rows & cur, float (&acc)[NT][4], const QuantizedCols & cols, int64_t i,
                                                    int g, int t) {
        constexpr int n_pad = 8 * NT;
        const __half2 k1024 = __float2half2_rn(1024.0f);
        const int shift = 4 * (t / 2);   // threads 2, 3 take the high nibbles
        multiply_scaled_blocks<NT>(
            acc, cols, i, g, t,
            [&](int j, int u, int r, int h, uint32_t & lo, uint32_t & hi) {
                const uint32_t w = cur.q[r][2 * (2 * j + u) + h] >> shift;
                lo = half2_bits(__hsub2(bits_half2(masked_into_half2<0x000F000Fu>(w)), k1024));
                hi = half2_bits(__hsub2(bits_half2(masked_into_half2<0x000F000Fu>(w >> 8)), k1024));
            },
            [&](int j, int r) { return make_float2(f16_bits(cur.dm[r][2 * j] & 0xffffu), f16_bits(cur.dm[r][2 * j + 1] & 0xffffu)); });
        bool live[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) live[nt] = nt * 8 + g < cols.n;
        // m of blocks 2t, 2t + 1 for rows g and g + 8 (m16n8k8's A) times the blocks' sums
        // (selected, not indexed by t: an index known only at run time would put dm in local memory)
        uint32_t am[2] = {0u, 0u};
#pragma unroll
        for (int tt = 0; tt < 4; ++tt) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (tt == t) am[r] = __byte_perm(cur.dm[r][2 * tt], cur.dm[r][2 * tt + 1], 0x7632);
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            float ms[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const uint32_t sums = live[nt] ? cols.xsum[(i * n_pad + nt * 8 + g) * 4 + t] : 0u;
            mma_f16_k8(ms, am[0], am[1], sums);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nt][e] += ms[e];
        }
    }
};

// Q4_1 rows of k % 256 != 0 (SmolLM2's k = 576): the partial last step in a kernel of its own.
struct Q41HalfPartial : Q41Half {
    static constexpr bool kPartialSteps = true;
};

} // namespace
} // namespace luce::cuda
