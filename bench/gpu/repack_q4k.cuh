// repack_q4k.cuh — an experiment for issue 17: Q4_K weights repacked at load into a layout made for
// the small-batch kernel (1..16 columns), and that kernel. Standalone: bench/gpu/repack_bench.cu
// includes it; nothing in the engine uses it yet.
//
// Layout ("Q4_K tiles"): rows in tiles of 16; per (tile, superblock) 2,304 bytes = 16 x 144, so the
// repacked matrix has the original's byte count and each tile keeps the bytes its 16 rows had (a
// tile can be repacked in place, one tile at a time):
//   [0, 256)     the 16 rows' heads as ggml has them (d, dmin, 12 bytes of 6-bit scales/minimums)
//   [256, 2304)  the 16 x 256 nibbles as [c = 0..3][lane = 0..31][16 bytes]: what mma lane
//                (g = lane / 4, t = lane % 4) needs, so a warp loads a superblock's nibbles with
//                four fully coalesced 16-byte loads. Word e of lane's 16 bytes c is chunk k = 4c + e
//                (values 16k..16k+15 of the superblock, sub-block k / 2), nibbles:
//                  bits  0-3 / 16-19: row g,     values 16k + 2t, 16k + 2t + 1    (mma a0)
//                  bits  4-7 / 20-23: row g + 8, the same values                  (mma a1)
//                  bits  8-11 / 24-27: row g,    values 16k + 8 + 2t, + 9         (mma a2)
//                  bits 12-15 / 28-31: row g + 8, the same                        (mma a3)
//                so the two nibbles of an mma register sit at the same place in each 16-bit half:
//                one AND (and one shift for the upper byte) per register.
// Tiles follow each other, superblocks inside a tile: unit f = tile * n_super + superblock lies at
// f * 2304, and the kernel gives each warp a contiguous range of units (stream-K), so every warp
// reads one sequential stretch of memory and every warp gets the same number of bytes.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace k17 {

constexpr int kQK = 256;
constexpr int kBlockBytes = 144;          // ggml Q4_K superblock of one row
constexpr int kUnitBytes = 16 * 144;      // one tile's superblock
constexpr int kUnitWords = kUnitBytes / 16;
constexpr int kWarps = 4;                 // warps per block (each independent)

// ---- host: ggml Q4_K (rows x k, row-major) -> Q4_K tiles. rows % 16 == 0, k % 256 == 0. ----------
// nibble v of a ggml block: qs[32 * (v / 64) + v % 32], low nibble for v % 64 < 32
inline int q4k_nibble(const uint8_t * blk, int v) { return (blk[16 + 32 * (v / 64) + v % 32] >> (4 * ((v / 32) % 2))) & 15; }

inline void repack_q4k_host(const uint8_t * src, uint8_t * dst, int64_t rows, int64_t k) {
    const int64_t nsb = k / kQK, row_bytes = nsb * kBlockBytes;
    for (int64_t tile = 0; tile < rows / 16; ++tile) {
        for (int64_t i = 0; i < nsb; ++i) {
            uint8_t * u = dst + (tile * nsb + i) * kUnitBytes;
            const uint8_t * blk[16];
            for (int r = 0; r < 16; ++r) {
                blk[r] = src + (tile * 16 + r) * row_bytes + i * kBlockBytes;
                std::memcpy(u + 16 * r, blk[r], 16);
            }
            for (int c = 0; c < 4; ++c) {
                for (int lane = 0; lane < 32; ++lane) {
                    const int g = lane / 4, t = lane % 4;
                    for (int e = 0; e < 4; ++e) {
                        const int kk = 4 * c + e, v0 = 16 * kk + 2 * t;
                        // (row, value) of nibble n of the word, n = 0..7 from bit 0 up
                        const int row_of[8] = {g, g + 8, g, g + 8, g, g + 8, g, g + 8};
                        const int val_of[8] = {v0, v0, v0 + 8, v0 + 8, v0 + 1, v0 + 1, v0 + 9, v0 + 9};
                        uint32_t word = 0;
                        for (int n = 0; n < 8; ++n) word |= uint32_t(q4k_nibble(blk[row_of[n]], val_of[n])) << (4 * n);
                        std::memcpy(u + 256 + (c * 32 + lane) * 16 + 4 * e, &word, 4);
                    }
                }
            }
        }
    }
}

// ---- activations: q8_1 rounding exactly as small_batch_gemm.cu's quantize_columns ----------------
// xq: [superblock][sub-block P (8)][column (n_pad)][t (4)] uint4 = the B fragments of chunks 2P and
// 2P + 1 for lane t: (x[32P + 2t], +1), (x[32P + 8 + 2t], +1), (x[32P + 16 + 2t], +1), (x[32P + 24 + 2t], +1).
// xsum: [superblock][column][8] f16 sums of the float values (as the current kernel's).
__host__ __device__ inline int64_t xq_half_index(int64_t i, int sb, int l, int col, int n_pad) {
    const int t = (l % 16 % 8) / 2, word = (l % 16) / 8 + 2 * (l / 16), half = l % 2;
    return (((i * 8 + sb) * n_pad + col) * 4 + t) * 8 + word * 2 + half;
}

__global__ void quantize_k17(const float * __restrict__ x, int64_t x_stride, int n, int n_pad, int64_t k, __half * __restrict__ xq,
                             __half * __restrict__ xsum) {
    const int64_t pair = int64_t(blockIdx.x) * 8 + threadIdx.x / 32;   // (32-block, column), column fastest
    const int lane = threadIdx.x % 32;
    if (pair >= (k / 32) * n) return;
    const int col = int(pair % n);
    const int64_t b = pair / n;
    const float v = x[col * x_stride + b * 32 + lane];
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const int q = amax == 0.0f ? 0 : __float2int_rn(v / d);
    float sum = v;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    xq[xq_half_index(b / 8, int(b % 8), lane, col, n_pad)] = __float2half_rn(float(q) * d);
    if (lane == 0) xsum[((b / 8) * n_pad + col) * 8 + b % 8] = __float2half_rn(sum);
}

// ---- device helpers ------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t h2u(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __half2 u2h(uint32_t u) { return *reinterpret_cast<__half2 *>(&u); }

// (w & MASK) | OR in one LOP3 (C++ gives two)
template <uint32_t MASK, uint32_t OR>
__device__ __forceinline__ uint32_t and_or(uint32_t w) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "n"(MASK), "n"(OR));
    return r;
}

__device__ __forceinline__ void mma_k16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_k8(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}

// Weight loads: 16 bytes, read once. NOALLOC keeps them out of L1, which then holds the activations.
template <bool NOALLOC>
__device__ __forceinline__ uint4 load_w(const uint4 * p) {
    if (!NOALLOC) return __ldg(p);
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

struct Unit {          // one lane's part of one (tile, superblock)
    uint4 head[2];     // rows g, g + 8
    uint4 q[4];
};

template <bool NOALLOC>
__device__ __forceinline__ void load_unit(Unit & u, const uint4 * p, int g, int lane) {
    u.head[0] = load_w<NOALLOC>(p + g);
    u.head[1] = load_w<NOALLOC>(p + g + 8);
#pragma unroll
    for (int c = 0; c < 4; ++c) u.q[c] = load_w<NOALLOC>(p + 16 + 32 * c + lane);
}

// 6-bit scales / minimums of a head, 4 a word (ggml's get_scale_min_k4 for all 8 sub-blocks)
__device__ __forceinline__ void unpack_scales(const uint4 & h, uint32_t (&sc)[2], uint32_t (&mn)[2]) {
    sc[0] = h.y & 0x3f3f3f3fu;
    mn[0] = h.z & 0x3f3f3f3fu;
    sc[1] = (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
    mn[1] = ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
}

__device__ __forceinline__ uint32_t word_of(const uint4 & v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// bytes b, b + 1 of w (each < 1024) as an exact half2
__device__ __forceinline__ __half2 byte_pair(uint32_t w, uint32_t b) {
    return __hsub2(u2h(__byte_perm(w, 0x64646464u, 0x4040u + b + ((b + 1) << 8))), __float2half2_rn(1024.0f));
}

// Multiplies one unit with every column. The weights enter the mma as exact f16 integers q * sc, so
// one mma chain spans the superblock and d applies once (as Q4KHalf does). At one column tile two
// chains (even / odd chunks) halve the dependent mma latency; at two the tiles are two chains already
// (and the registers are short).
//   SUB = false: 1024 + q placed under an f16 exponent, then one HFMA2 (x sc, - 1024 sc) per register.
//   SUB = true:  q placed in an f16 with a zero exponent is the subnormal q * 2^-24; one HMUL2 by sc
//                gives q * sc * 2^-24 exactly (at most 945 units; row g + 8's nibbles sit 4 bits up,
//                16 q sc 2^-24, still exact), and 2^24 / 2^20 goes into d. No bias registers.
template <int NT, bool SUB>
__device__ __forceinline__ void multiply_unit(const Unit & u, float (&acc)[NT][4], const uint4 * __restrict__ xq,
                                              const uint32_t * __restrict__ xs, const bool (&live)[NT], int n_pad, int t) {
    float d[2], dmin[2];
    uint32_t sc[2][2], mn[2][2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        d[r] = __half2float(__ushort_as_half(uint16_t(u.head[r].x & 0xffffu)));
        dmin[r] = __half2float(__ushort_as_half(uint16_t(u.head[r].x >> 16)));
        unpack_scales(u.head[r], sc[r], mn[r]);
    }
    if (SUB) {
        d[0] *= 16777216.0f;   // 2^24
        d[1] *= 1048576.0f;    // 2^20
    }
    constexpr int CH = NT == 1 ? 2 : 1;
    float s[CH][NT][4] = {};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        // sub-blocks 2c, 2c + 1: rows g (scale[0]) and g + 8 (scale[1]); bias only for !SUB
        __half2 scale[2], bias[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) scale[r] = byte_pair(sc[r][c / 2], 2 * (c % 2));
        if (!SUB) {
            scale[1] = __hmul2(scale[1], __float2half2_rn(1.0f / 16.0f));   // row g + 8's nibbles are 16 q
            bias[0] = __hmul2(scale[0], __float2half2_rn(-1024.0f));
            bias[1] = __hmul2(scale[1], __float2half2_rn(-1024.0f));
        }
#pragma unroll
        for (int p = 0; p < 2; ++p) {   // sub-block P = 2c + p: chunks 4c + 2p, 4c + 2p + 1
            uint4 bx[NT];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) bx[nt] = live[nt] ? xq[((2 * c + p) * n_pad + nt * 8) * 4] : make_uint4(0, 0, 0, 0);
            const __half2 s0 = p ? __high2half2(scale[0]) : __low2half2(scale[0]);
            const __half2 s1 = p ? __high2half2(scale[1]) : __low2half2(scale[1]);
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const uint32_t w = word_of(u.q[c], 2 * p + e), w8 = w >> 8;
                uint32_t a[4];
                if (SUB) {
                    a[0] = h2u(__hmul2(u2h(w & 0x000F000Fu), s0));
                    a[1] = h2u(__hmul2(u2h(w & 0x00F000F0u), s1));
                    a[2] = h2u(__hmul2(u2h(w8 & 0x000F000Fu), s0));
                    a[3] = h2u(__hmul2(u2h(w8 & 0x00F000F0u), s1));
                } else {
                    const __half2 b0 = p ? __high2half2(bias[0]) : __low2half2(bias[0]);
                    const __half2 b1 = p ? __high2half2(bias[1]) : __low2half2(bias[1]);
                    a[0] = h2u(__hfma2(u2h(and_or<0x000F000Fu, 0x64006400u>(w)), s0, b0));
                    a[1] = h2u(__hfma2(u2h(and_or<0x00F000F0u, 0x64006400u>(w)), s1, b1));
                    a[2] = h2u(__hfma2(u2h(and_or<0x000F000Fu, 0x64006400u>(w8)), s0, b0));
                    a[3] = h2u(__hfma2(u2h(and_or<0x00F000F0u, 0x64006400u>(w8)), s1, b1));
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    mma_k16(s[e % CH][nt], a[0], a[1], a[2], a[3], e ? bx[nt].z : bx[nt].x, e ? bx[nt].w : bx[nt].y);
                }
            }
        }
    }
    // minimums: m of sub-blocks 2t, 2t + 1 of rows g, g + 8 times the columns' sums of those sub-blocks
    uint32_t am[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) am[r] = h2u(byte_pair(t < 2 ? mn[r][0] : mn[r][1], 2 * (t % 2)));   // a run-time index would put mn in local memory
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        float m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_k8(m, am[0], am[1], live[nt] ? xs[nt * 8 * 4] : 0u);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] += d[e / 2] * (CH == 2 ? s[0][nt][e] + s[CH - 1][nt][e] : s[0][nt][e]) - dmin[e / 2] * m[e];
    }
}

struct Acts {
    const uint4 * xq;
    const uint32_t * xsum;
    int n_pad, n;
};

// Where warp p's range of units starts (units * p / warps)
__device__ __forceinline__ int64_t range_start(int64_t units, int64_t p, int64_t warps) { return units * p / warps; }

// A tile's sums once a warp has its part: all of it (`whole`) -> y; a part -> the warp's partial slot
// (two a warp: its first tile and its last), and the warp that arrives last at the tile's counter adds
// the parts in warp order (deterministic) and writes y. The 64-bit divisions run only for parts.
template <int NT>
__device__ __forceinline__ void finish_tile(const float (&acc)[NT][4], int64_t tile, bool whole, bool first, int64_t p, int64_t units,
                                            int64_t warps, int64_t nsb, int n, float * __restrict__ y, int64_t y_stride,
                                            float4 * __restrict__ partial, uint32_t * __restrict__ counters, int lane) {
    const int g = lane / 4, t = lane % 4;
    float out[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) out[nt][e] = acc[nt][e];
    }
    if (!whole) {
        // the warps that own a part of this tile: owner(f) = ((f + 1) * warps - 1) / units
        const int64_t pf = ((tile * nsb + 1) * warps - 1) / units, pl = (((tile + 1) * nsb) * warps - 1) / units;
        const int slot_here = first ? 0 : 1;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            __stcg(partial + ((p * 2 + slot_here) * NT + nt) * 32 + lane, make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]));
        }
        int parts = 0;   // warps with a non-empty range in [pf, pl]
        for (int64_t q = pf; q <= pl; ++q) parts += range_start(units, q, warps) < range_start(units, q + 1, warps);
        __threadfence();
        __syncwarp();
        unsigned last = 0;
        if (lane == 0) last = atomicAdd(counters + tile, 1u) == unsigned(parts - 1);
        last = __shfl_sync(0xffffffffu, last, 0);
        if (!last) return;
        __threadfence();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) out[nt][e] = 0.0f;
        }
        for (int64_t q = pf; q <= pl; ++q) {
            const int64_t q0 = range_start(units, q, warps);
            if (q0 == range_start(units, q + 1, warps)) continue;
            const int slot = int(tile != q0 / nsb);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const float4 v = __ldcg(partial + ((q * 2 + slot) * NT + nt) * 32 + lane);
                out[nt][0] += v.x;
                out[nt][1] += v.y;
                out[nt][2] += v.z;
                out[nt][3] += v.w;
            }
        }
        if (lane == 0) counters[tile] = 0;   // ready for the next call
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = nt * 8 + 2 * t + e % 2;
            const int64_t row = tile * 16 + g + 8 * (e / 2);
            if (col < n) y[col * y_stride + row] = out[nt][e];
        }
    }
}

// The kernel: a persistent grid; warp p of all of them owns units [units p / warps, units (p+1) / warps)
// and streams them, loading unit f + 1 while it multiplies unit f (two register sets, used in turn).
// PF > 1: also asks L2 for unit f + PF (18 lanes, a 128-byte line each), which costs no registers
// and keeps more bytes in flight than 16 warps' register sets hold.
template <int NT, bool SUB, bool NOALLOC, int PF>
__global__ void __launch_bounds__(32 * kWarps, 4) gemm_k17(const uint4 * __restrict__ w, int64_t tiles, int64_t nsb, const Acts a,
                                                           float * __restrict__ y, int64_t y_stride, float4 * __restrict__ partial,
                                                           uint32_t * __restrict__ counters) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int64_t warps = int64_t(gridDim.x) * kWarps, p = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    const int64_t units = tiles * nsb;
    const int64_t f0 = range_start(units, p, warps), f1 = range_start(units, p + 1, warps);
    if (f0 == f1) return;
    bool live[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) live[nt] = nt * 8 + g < a.n;
    const uint4 * xq = a.xq + int64_t(g) * 4 + t;            // + (sb * 8 * n_pad) * 4
    const uint32_t * xs = a.xsum + int64_t(g) * 4 + t;       // + sb * n_pad * 4
    float acc[NT][4] = {};
    Unit buf[2];
    load_unit<NOALLOC>(buf[0], w + f0 * kUnitWords, g, lane);
    // one unit: prefetch the next into the other set, multiply, finish the tile at its end
    const int first_tile = int(f0 / nsb);
    int tile = first_tile, sb = int(f0 - int64_t(first_tile) * nsb);   // of unit f, kept without dividing
    auto step = [&](Unit & cur, Unit & nxt, int64_t f) {
        if (f + 1 < f1) load_unit<NOALLOC>(nxt, w + (f + 1) * kUnitWords, g, lane);
        if (PF > 1 && f + PF < f1 && lane < kUnitBytes / 128) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char *>(w + (f + PF) * kUnitWords) + 128 * lane));
        }
        multiply_unit<NT, SUB>(cur, acc, xq + int64_t(sb) * 8 * a.n_pad * 4, xs + int64_t(sb) * a.n_pad * 4, live, a.n_pad, t);
        if (sb == nsb - 1 || f + 1 == f1) {
            const bool whole = int64_t(tile) * nsb >= f0 && int64_t(tile + 1) * nsb <= f1;
            finish_tile<NT>(acc, tile, whole, tile == first_tile, p, units, warps, nsb, a.n, y, y_stride, partial, counters, lane);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
            }
            ++tile;
            sb = 0;
        } else {
            ++sb;
        }
    };
    for (int64_t f = f0; f < f1; f += 2) {
        step(buf[0], buf[1], f);
        if (f + 1 < f1) step(buf[1], buf[0], f + 1);
    }
}

// Scratch of a call: the partial slots (2 a warp) and one counter a tile (zeroed once).
inline size_t partial_bytes(int64_t warps, int nt) { return size_t(warps) * 2 * nt * 32 * sizeof(float4); }

template <int NT, bool SUB, bool NOALLOC, int PF>
cudaError_t launch_k17(const void * w, int64_t rows, int64_t k, const Acts & a, float * y, int64_t y_stride, int blocks, void * partial,
                       uint32_t * counters, cudaStream_t s) {
    gemm_k17<NT, SUB, NOALLOC, PF><<<blocks, 32 * kWarps, 0, s>>>(static_cast<const uint4 *>(w), rows / 16, k / kQK, a, y, y_stride,
                                                               static_cast<float4 *>(partial), counters);
    return cudaGetLastError();
}

} // namespace k17
