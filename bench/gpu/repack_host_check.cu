// repack_host_check.cu — checks repack_q4k.cuh's layouts without a GPU: the kernel's per-lane reads
// (nibble masks, scale bytes, activation words, mma fragment places) replayed on the host in float64
// against the dequantized ggml rows, and the stream-K ownership arithmetic of finish_tile (every
// (tile, superblock) summed exactly once, every partial tile's counter target right).
//   nvcc -std=c++17 -O2 bench/gpu/repack_host_check.cu -o /tmp/repack_host_check && /tmp/repack_host_check
#include "repack_q4k.cuh"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

uint32_t prmt(uint32_t x, uint32_t y, uint32_t s) {   // __byte_perm
    const uint64_t v = (uint64_t(y) << 32) | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) r |= uint32_t((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}

// byte_pair: (byte b, byte b + 1) of w as the two halves' values
void byte_pair(uint32_t w, uint32_t b, double & lo, double & hi) {
    const uint32_t v = prmt(w, 0x64646464u, 0x4040u + b + ((b + 1) << 8));
    lo = double(v & 0xff) + ((v >> 8) & 0xff) * 256.0 - 0x6400;   // 1024 + byte, minus 1024
    hi = double((v >> 16) & 0xff) + ((v >> 24) & 0xff) * 256.0 - 0x6400;
}

int check_layout(int64_t rows, int64_t k, int n, std::mt19937 & rng) {
    const int64_t nsb = k / 256;
    std::vector<uint8_t> w(size_t(rows * nsb * 144)), rp(w.size());
    for (auto & b : w) b = uint8_t(rng());
    k17::repack_q4k_host(w.data(), rp.data(), rows, k);
    // activations: arbitrary distinct values in the kernel's layout
    const int n_pad = 8 * ((n + 7) / 8);
    std::vector<double> x(size_t(n) * size_t(k)), xs(size_t(n) * size_t(k / 32));
    std::vector<double> xq(size_t(n_pad) * size_t(k), 0.0), xsum(size_t(n_pad) * size_t(k / 32), 0.0);
    std::uniform_real_distribution<double> u(-1, 1);
    for (int c = 0; c < n; ++c) {
        for (int64_t v = 0; v < k; ++v) {
            x[size_t(c * k + v)] = u(rng);
            xq[size_t(k17::xq_half_index(v / 256, int(v % 256 / 32), int(v % 32), c, n_pad))] = x[size_t(c * k + v)];
        }
        for (int64_t b = 0; b < k / 32; ++b) {
            xs[size_t(c * (k / 32) + b)] = u(rng);
            xsum[size_t((b / 8 * n_pad + c) * 8 + b % 8)] = xs[size_t(c * (k / 32) + b)];
        }
    }
    double worst = 0;
    for (int64_t tile = 0; tile < rows / 16; ++tile) {
        std::vector<double> y(size_t(16) * n_pad, 0.0);   // [row][col]
        for (int64_t i = 0; i < nsb; ++i) {
            const uint8_t * unit = rp.data() + (tile * nsb + i) * k17::kUnitBytes;
            double A[16][256] = {}, B[256][16] = {}, Am[16][8] = {}, Bm[8][16] = {}, dd[16], dm[16];
            for (int lane = 0; lane < 32; ++lane) {
                const int g = lane / 4, t = lane % 4;
                uint32_t head[2][4];
                std::memcpy(head[0], unit + 16 * g, 16);
                std::memcpy(head[1], unit + 16 * (g + 8), 16);
                uint32_t sc[2][2], mn[2][2];
                for (int r = 0; r < 2; ++r) {
                    sc[r][0] = head[r][1] & 0x3f3f3f3fu;
                    mn[r][0] = head[r][2] & 0x3f3f3f3fu;
                    sc[r][1] = (head[r][3] & 0x0f0f0f0fu) | ((head[r][1] >> 2) & 0x30303030u);
                    mn[r][1] = ((head[r][3] >> 4) & 0x0f0f0f0fu) | ((head[r][2] >> 2) & 0x30303030u);
                    uint16_t db = uint16_t(head[r][0]), dmb = uint16_t(head[r][0] >> 16);
                    __half h;
                    std::memcpy(&h, &db, 2);
                    dd[g + 8 * r] = __half2float(h);
                    std::memcpy(&h, &dmb, 2);
                    dm[g + 8 * r] = __half2float(h);
                }
                for (int c = 0; c < 4; ++c) {
                    uint32_t q4[4];
                    std::memcpy(q4, unit + 256 + (c * 32 + lane) * 16, 16);
                    double s_lo[2], s_hi[2];
                    for (int r = 0; r < 2; ++r) byte_pair(sc[r][c / 2], 2 * (c % 2), s_lo[r], s_hi[r]);
                    for (int p = 0; p < 2; ++p) {
                        for (int e = 0; e < 2; ++e) {
                            const int kk = 4 * c + 2 * p + e;   // chunk: mma k slots 16kk..16kk+15 of this superblock
                            const uint32_t wd = q4[2 * p + e], w8 = wd >> 8;
                            const double s0 = p ? s_hi[0] : s_lo[0], s1 = p ? s_hi[1] : s_lo[1];
                            // a0..a3 as the kernel forms them (exact integers q * sc)
                            const double a[4][2] = {{double(wd & 15) * s0, double((wd >> 16) & 15) * s0},
                                                    {double((wd >> 4) & 15) * s1, double((wd >> 20) & 15) * s1},
                                                    {double(w8 & 15) * s0, double((w8 >> 16) & 15) * s0},
                                                    {double((w8 >> 4) & 15) * s1, double((w8 >> 20) & 15) * s1}};
                            for (int h = 0; h < 2; ++h) {
                                A[g][16 * kk + 2 * t + h] = a[0][h];
                                A[g + 8][16 * kk + 2 * t + h] = a[1][h];
                                A[g][16 * kk + 2 * t + 8 + h] = a[2][h];
                                A[g + 8][16 * kk + 2 * t + 8 + h] = a[3][h];
                            }
                            // B fragment of column g (+ 8 nt): uint4 P = 2c + p, words (x, y) or (z, w)
                            for (int nt = 0; nt < n_pad / 8; ++nt) {
                                const int64_t base = ((((i * 8 + 2 * c + p) * n_pad + nt * 8 + g) * 4 + t) * 8) + 4 * e;
                                for (int h = 0; h < 2; ++h) {
                                    B[16 * kk + 2 * t + h][nt * 8 + g] = xq[size_t(base + h)];
                                    B[16 * kk + 2 * t + 8 + h][nt * 8 + g] = xq[size_t(base + 2 + h)];
                                }
                            }
                        }
                    }
                }
                for (int r = 0; r < 2; ++r) {
                    double lo, hi;
                    byte_pair(t < 2 ? mn[r][0] : mn[r][1], 2 * (t % 2), lo, hi);
                    Am[g + 8 * r][2 * t] = lo;
                    Am[g + 8 * r][2 * t + 1] = hi;
                }
                for (int nt = 0; nt < n_pad / 8; ++nt) {
                    const int64_t base = ((i * n_pad + nt * 8 + g) * 4 + t) * 2;
                    Bm[2 * t][nt * 8 + g] = xsum[size_t(base)];
                    Bm[2 * t + 1][nt * 8 + g] = xsum[size_t(base + 1)];
                }
            }
            for (int r = 0; r < 16; ++r) {
                for (int c = 0; c < n_pad; ++c) {
                    double s = 0, m = 0;
                    for (int kk = 0; kk < 256; ++kk) s += A[r][kk] * B[kk][c];
                    for (int j = 0; j < 8; ++j) m += Am[r][j] * Bm[j][c];
                    y[size_t(r * n_pad + c)] += dd[r] * s - dm[r] * m;
                }
            }
        }
        // against ggml's dequantization of the original rows
        for (int r = 0; r < 16; ++r) {
            const int64_t row = tile * 16 + r;
            for (int c = 0; c < n; ++c) {
                double ref = 0;
                for (int64_t i = 0; i < nsb; ++i) {
                    const uint8_t * blk = w.data() + (row * nsb + i) * 144;
                    uint16_t db, dmb;
                    std::memcpy(&db, blk, 2);
                    std::memcpy(&dmb, blk + 2, 2);
                    __half h;
                    std::memcpy(&h, &db, 2);
                    const double d = __half2float(h);
                    std::memcpy(&h, &dmb, 2);
                    const double dmin = __half2float(h);
                    const uint8_t * s = blk + 4;
                    for (int j = 0; j < 8; ++j) {
                        const int scj = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
                        const int mj = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
                        for (int l = 0; l < 32; ++l) ref += d * scj * k17::q4k_nibble(blk, 32 * j + l) * x[size_t(c * k + i * 256 + 32 * j + l)];
                        ref -= dmin * mj * xs[size_t(c * (k / 32) + i * 8 + j)];
                    }
                }
                worst = std::max(worst, std::fabs(y[size_t(r * n_pad + c)] - ref) / (std::fabs(ref) + 1e-9));
            }
        }
    }
    std::printf("layout %lld x %lld, %d columns: max relative difference %.2e %s\n", (long long) rows, (long long) k, n, worst,
                worst < 1e-9 ? "ok" : "WRONG");
    return worst < 1e-9 ? 0 : 1;
}

// finish_tile's arithmetic for `tiles` x `nsb` units over `warps` warps: each unit in exactly one
// warp's range, each tile's part count equal to the warps that touch it, slots distinct.
int check_stream_k(int64_t tiles, int64_t nsb, int64_t warps) {
    const int64_t units = tiles * nsb;
    auto start = [&](int64_t p) { return units * p / warps; };
    std::vector<int> seen(size_t(units), 0), parts_touch(size_t(tiles), 0);
    for (int64_t p = 0; p < warps; ++p) {
        const int64_t f0 = start(p), f1 = start(p + 1);
        int64_t last_tile = -1;
        for (int64_t f = f0; f < f1; ++f) {
            ++seen[size_t(f)];
            if (((f + 1) * warps - 1) / units != p) return std::printf("stream-K: owner of %lld wrong\n", (long long) f), 1;
            if (f / nsb != last_tile) ++parts_touch[size_t(f / nsb)], last_tile = f / nsb;
        }
        // a warp's middle tiles must be whole
        for (int64_t tl = f0 / nsb + 1; f1 > f0 && tl < (f1 - 1) / nsb; ++tl) {
            if (tl * nsb < f0 || (tl + 1) * nsb > f1) return std::printf("stream-K: middle tile split\n"), 1;
        }
    }
    for (int64_t f = 0; f < units; ++f) {
        if (seen[size_t(f)] != 1) return std::printf("stream-K: unit %lld seen %d times\n", (long long) f, seen[size_t(f)]), 1;
    }
    for (int64_t tile = 0; tile < tiles; ++tile) {
        const int64_t pf = ((tile * nsb + 1) * warps - 1) / units, pl = (((tile + 1) * nsb) * warps - 1) / units;
        int parts = 0;
        for (int64_t q = pf; q <= pl; ++q) parts += start(q) < start(q + 1);
        if (parts != parts_touch[size_t(tile)]) return std::printf("stream-K: tile %lld parts %d, touched by %d\n", (long long) tile, parts, parts_touch[size_t(tile)]), 1;
    }
    return 0;
}

} // namespace

int main() {
    std::mt19937 rng(7);
    int bad = 0;
    bad += check_layout(32, 512, 3, rng);
    bad += check_layout(16, 1024, 16, rng);
    bad += check_layout(48, 256, 9, rng);
    int sk = 0;
    const int64_t shapes[][2] = {{2176, 20}, {1024, 20}, {320, 68}, {768, 20}, {64, 20}, {320, 24}, {5, 3}, {1, 1}};
    for (auto & s : shapes) {
        for (int64_t warps : {4, 132 * 8, 132 * 12, 132 * 16, 132 * 24, 132 * 32, 132 * 64}) sk += check_stream_k(s[0], s[1], warps);
    }
    std::printf("stream-K ownership: %s\n", sk ? "WRONG" : "ok");
    return bad + sk ? 1 : 0;
}
