// repack_bench.cu — issue 17's experiment: the current small-batch Q4_K kernel (ggml's block layout,
// engine/native/cuda/small_batch_gemm.cu, its own geometry choice) against a kernel on repacked
// weights (repack_q4k.cuh), on the 27B's Q4_K shapes at 1, 2, 4, 8, 16 columns. Prints the copy
// ceiling, then per shape and column count the GB/s of weights of both, the new kernel's best launch
// (variant x blocks an SM), and the max error of both against a float64 host reference computed from
// the ORIGINAL Q4_K bytes and the activations rounded as the current kernel rounds them (q8_1 values
// q * d in f16, f16 sums of the float values). Exits 1 on a wrong result.
//
//   bash bench/gpu/build_repack_bench.sh && ./.device/bin/repack_bench
//
// Weights are random blocks (d, dmin in [1e-3, 1e-2]); each shape is copied until the copies exceed
// the L2 cache 4 times, and the timed calls rotate among them.
#include "small_batch_gemm.h"
#include "repack_q4k.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(x)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            std::exit(2);                                                                         \
        }                                                                                         \
    } while (0)
#include "bench_timing.cuh"   // after CHECK

namespace {

struct Shape {
    const char * name;
    int64_t rows, k;
};

// The 27B's Q4_K matmuls as the engine runs them (fused qkv+gate and gate+up; attention out has the
// DeltaNet out's shape)
const Shape kShapes[] = {
    {"deltanet qkv+gate", 16384, 5120}, {"ffn gate+up", 34816, 5120}, {"ffn down", 5120, 17408},
    {"attn q", 12288, 5120},            {"attn k", 1024, 5120},       {"deltanet/attn out", 5120, 6144},
};
const int kCols[] = {1, 2, 4, 8, 16};
constexpr int kMaxCols = 16;

struct Rng {   // splitmix64: fast enough for 100 MB of random bytes
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
    float normal() {   // Box-Muller
        const double u = std::max(uniform(), 1e-300), v = uniform();
        return float(std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v));
    }
};

uint16_t f16_bits(float v) {
    const __half h = __float2half_rn(v);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}
float f16_value(uint16_t b) {
    __half h;
    std::memcpy(&h, &b, 2);
    return __half2float(h);
}

std::vector<uint8_t> random_q4k(const Shape & s, Rng & rng) {
    const size_t nb = size_t(s.rows) * size_t(s.k / 256);
    std::vector<uint8_t> w(nb * 144);
    for (size_t i = 0; i + 8 <= w.size(); i += 8) {
        const uint64_t r = rng.next();
        std::memcpy(w.data() + i, &r, 8);
    }
    for (size_t i = 0; i < nb; ++i) {
        const uint16_t d = f16_bits(float(1e-3 + 9e-3 * rng.uniform())), dm = f16_bits(float(1e-3 + 9e-3 * rng.uniform()));
        std::memcpy(w.data() + i * 144, &d, 2);
        std::memcpy(w.data() + i * 144 + 2, &dm, 2);
    }
    return w;
}

// The activations as the kernels take them, from the float inputs: q8_1 per 32 values (scale
// amax / 127, round to nearest even), the value q * d rounded to f16, and the f16 of the 32 float
// values' sum added in the device's butterfly order (quantize_columns' shuffle tree).
struct HostActs {
    std::vector<float> xh;     // [col][k]
    std::vector<float> xsum;   // [col][k / 32]
};

HostActs host_quantize(const std::vector<float> & x, int64_t k, int n) {
    HostActs h;
    h.xh.resize(size_t(n) * size_t(k));
    h.xsum.resize(size_t(n) * size_t(k / 32));
    for (int c = 0; c < n; ++c) {
        for (int64_t b = 0; b < k / 32; ++b) {
            const float * v = x.data() + size_t(c) * size_t(k) + size_t(b) * 32;
            float amax = 0.0f;
            for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(v[l]));
            const float d = amax / 127.0f;
            for (int l = 0; l < 32; ++l) {
                const float q = amax == 0.0f ? 0.0f : std::nearbyint(v[l] / d);
                h.xh[size_t(c) * size_t(k) + size_t(b) * 32 + l] = f16_value(f16_bits(q * d));
            }
            float s[32];
            for (int l = 0; l < 32; ++l) s[l] = v[l];
            for (int o = 16; o > 0; o >>= 1) {
                float t[32];
                for (int l = 0; l < 32; ++l) t[l] = s[l] + s[l ^ o];
                std::memcpy(s, t, sizeof s);
            }
            h.xsum[size_t(c) * size_t(k / 32) + size_t(b)] = f16_value(f16_bits(s[0]));
        }
    }
    return h;
}

// y[col][row] for the given rows in float64, from ggml's Q4_K bytes: per 32-value sub-block,
// d * sc * sum(q * xh) - dmin * m * xsum (the Q4_K value d * sc * q - dmin * m times the activations,
// with the sums term as the kernels take it).
std::vector<double> host_reference(const std::vector<uint8_t> & w, const Shape & s, const HostActs & a, int n,
                                   const std::vector<int64_t> & rows) {
    const int64_t nsb = s.k / 256, row_bytes = nsb * 144;
    std::vector<double> ref(size_t(n) * rows.size(), 0.0);
    for (size_t ri = 0; ri < rows.size(); ++ri) {
        for (int64_t i = 0; i < nsb; ++i) {
            const uint8_t * blk = w.data() + rows[ri] * row_bytes + i * 144;
            uint16_t db, dmb;
            std::memcpy(&db, blk, 2);
            std::memcpy(&dmb, blk + 2, 2);
            const double d = f16_value(db), dmin = f16_value(dmb);
            const uint8_t * sc = blk + 4;
            for (int j = 0; j < 8; ++j) {
                int scj, mj;   // ggml's get_scale_min_k4
                if (j < 4) {
                    scj = sc[j] & 63;
                    mj = sc[j + 4] & 63;
                } else {
                    scj = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
                    mj = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
                }
                int q[32];
                for (int l = 0; l < 32; ++l) q[l] = k17::q4k_nibble(blk, 32 * j + l);
                for (int c = 0; c < n; ++c) {
                    const float * xh = a.xh.data() + size_t(c) * size_t(s.k) + size_t(i) * 256 + 32 * j;
                    double dot = 0.0;
                    for (int l = 0; l < 32; ++l) dot += double(q[l]) * double(xh[l]);
                    ref[size_t(c) * rows.size() + ri] += d * scj * dot - dmin * mj * double(a.xsum[size_t(c) * size_t(s.k / 32) + i * 8 + j]);
                }
            }
        }
    }
    return ref;
}

// max over columns of max |y - ref| / max |ref| on the sampled rows (inf if any is not finite)
double ref_error(const std::vector<float> & y, int64_t nrows, const std::vector<double> & ref, const std::vector<int64_t> & rows, int n) {
    double worst = 0.0;
    for (int c = 0; c < n; ++c) {
        double diff = 0.0, scale = 0.0;
        for (size_t ri = 0; ri < rows.size(); ++ri) {
            const float v = y[size_t(c) * size_t(nrows) + size_t(rows[ri])];
            if (!std::isfinite(v)) return INFINITY;
            const double r = ref[size_t(c) * rows.size() + ri];
            diff = std::max(diff, std::fabs(double(v) - r));
            scale = std::max(scale, std::fabs(r));
        }
        worst = std::max(worst, scale > 0 ? diff / scale : diff);
    }
    return worst;
}

// every output: max |a - b| / max |b| (inf if a has a non-finite value: an unwritten output)
double full_diff(const std::vector<float> & a, const std::vector<float> & b, size_t count) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < count; ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        diff = std::max(diff, double(std::fabs(a[i] - b[i])));
        scale = std::max(scale, double(std::fabs(b[i])));
    }
    return scale > 0 ? diff / scale : diff;
}


// the read ceiling: 16-byte loads, 4 in flight a thread, folded so they are not removed
__global__ void read_all(const uint4 * __restrict__ p, size_t n, uint32_t * out) {
    uint32_t x = 0;
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < 4; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) x ^= p[i].x;
    if (x == 0x12345678u) *out = x;
}

// The new kernel's variants: SUB (subnormal scaling, no bias registers) x NOALLOC (weights skip L1)
// x PF (L2 prefetch of the unit 3 ahead)
struct Variant {
    const char * name;
    bool sub, noalloc;
    int pf;
};
const Variant kVariants[] = {{"b", false, false, 0}, {"b-nl1", false, true, 0}, {"b-pf", false, false, 3}, {"b-nl1-pf", false, true, 3},
                             {"s", true, false, 0},  {"s-nl1", true, true, 0},   {"s-pf", true, false, 3},  {"s-nl1-pf", true, true, 3}};
constexpr int kNumVariants = 8;

template <int NT, bool SUB, bool NOALLOC, int PF>
struct Kernel {
    static const void * fn() { return (const void *) k17::gemm_k17<NT, SUB, NOALLOC, PF>; }
    static cudaError_t launch(const void * w, int64_t rows, int64_t k, const k17::Acts & a, float * y, int blocks, void * partial,
                              uint32_t * counters) {
        return k17::launch_k17<NT, SUB, NOALLOC, PF>(w, rows, k, a, y, rows, blocks, partial, counters, nullptr);
    }
};

// calls F::template call<Kernel<...>>() for variant v at NT column tiles
template <int NT, class F>
auto with_variant(int v, F && f) {
    switch (v) {
        case 0: return f(Kernel<NT, false, false, 0>{});
        case 1: return f(Kernel<NT, false, true, 0>{});
        case 2: return f(Kernel<NT, false, false, 3>{});
        case 3: return f(Kernel<NT, false, true, 3>{});
        case 4: return f(Kernel<NT, true, false, 0>{});
        case 5: return f(Kernel<NT, true, true, 0>{});
        case 6: return f(Kernel<NT, true, false, 3>{});
        default: return f(Kernel<NT, true, true, 3>{});
    }
}

cudaError_t launch_new(int v, int n, const void * w, int64_t rows, int64_t k, const k17::Acts & a, float * y, int blocks, void * partial,
                       uint32_t * counters) {
    auto go = [&](auto kern) { return decltype(kern)::launch(w, rows, k, a, y, blocks, partial, counters); };
    return n <= 8 ? with_variant<1>(v, go) : with_variant<2>(v, go);
}

template <int NT>
int occupancy(int v) {
    const void * f = with_variant<NT>(v, [](auto kern) { return decltype(kern)::fn(); });
    int occ = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, f, 32 * k17::kWarps, 0));
    cudaFuncAttributes attr{};
    CHECK(cudaFuncGetAttributes(&attr, f));
    std::printf("  k17 NT=%d %-9s: %d registers, %zu bytes local, %d blocks of %d threads an SM\n", NT, kVariants[v].name, attr.numRegs,
                attr.localSizeBytes, occ, 32 * k17::kWarps);
    return occ;
}

struct Row {
    std::string shape;
    int n;
    double cur_gbps, best_gbps[kNumVariants];
    int best_blocks[kNumVariants];
    double cur_err, new_err, new_vs_cur;
};

} // namespace

int main() {
    const auto t_start = std::chrono::steady_clock::now();
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    std::printf("%s: %d SMs, L2 %d MB, CC %d.%d\n", prop.name, sms, prop.l2CacheSize >> 20, prop.major, prop.minor);
    if (prop.major < 8) {
        std::fprintf(stderr, "needs compute capability 8.0+\n");
        return 2;
    }
    bool wrong = false;

    // ---- ceilings: device-to-device copy (read + write) and a plain 16-byte read ----
    double copy_gbps = 0, read_gbps = 0;
    {
        const size_t bytes = size_t(2) << 30;
        void *src, *dst;
        uint32_t * sink;
        CHECK(cudaMalloc(&src, bytes));
        CHECK(cudaMalloc(&dst, bytes));
        CHECK(cudaMalloc(&sink, 4));
        CHECK(cudaMemset(src, 1, bytes));
        float ms = time_calls(1, 10, [&](int) { CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); });
        copy_gbps = 2.0 * double(bytes) / (ms * 1e6);
        ms = time_calls(1, 10, [&](int) { read_all<<<sms * 8, 256>>>(static_cast<const uint4 *>(src), bytes / 16, sink); });
        read_gbps = double(bytes) / (ms * 1e6);
        std::printf("copy ceiling: %.0f GB/s (read + write); read-only kernel: %.0f GB/s\n", copy_gbps, read_gbps);
        CHECK(cudaFree(src));
        CHECK(cudaFree(dst));
        CHECK(cudaFree(sink));
    }
    int occ[2][kNumVariants];
    for (int v = 0; v < kNumVariants; ++v) {
        occ[0][v] = occupancy<1>(v);
        occ[1][v] = occupancy<2>(v);
    }

    Rng rng{20261204};
    std::vector<Row> table;
    for (const Shape & s : kShapes) {
        const auto t_shape = std::chrono::steady_clock::now();
        const std::vector<uint8_t> orig = random_q4k(s, rng);
        std::vector<uint8_t> rp(orig.size());
        k17::repack_q4k_host(orig.data(), rp.data(), s.rows, s.k);
        const size_t bytes = orig.size();
        const int copies = int(std::max<size_t>(3, (size_t(4) * size_t(prop.l2CacheSize)) / bytes + 1));
        std::vector<void *> dorig(copies), drp(copies);
        for (int c = 0; c < copies; ++c) {
            CHECK(cudaMalloc(&dorig[c], bytes));
            CHECK(cudaMalloc(&drp[c], bytes));
            CHECK(cudaMemcpy(dorig[c], orig.data(), bytes, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(drp[c], rp.data(), bytes, cudaMemcpyHostToDevice));
        }
        std::vector<float> hx(size_t(kMaxCols) * size_t(s.k));
        for (auto & v : hx) v = rng.normal();
        const HostActs ha = host_quantize(hx, s.k, kMaxCols);
        // sampled rows: the first and last tiles, and 32 others
        std::vector<int64_t> rows;
        for (int r = 0; r < 16; ++r) rows.push_back(r), rows.push_back(s.rows - 16 + r);
        for (int r = 0; r < 32; ++r) rows.push_back(int64_t(rng.next() % uint64_t(s.rows)));
        const std::vector<double> ref = host_reference(orig, s, ha, kMaxCols, rows);   // columns are independent: n <= 16 reuse it

        float *dx, *dy;
        CHECK(cudaMalloc(&dx, hx.size() * 4));
        CHECK(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
        const size_t y_count = size_t(kMaxCols) * size_t(s.rows);
        CHECK(cudaMalloc(&dy, y_count * 4));
        void * scratch;   // the current kernel's
        const size_t sb = luce::cuda::small_gemm_scratch_bytes(s.k, kMaxCols);
        CHECK(cudaMalloc(&scratch, sb));
        CHECK(cudaMemset(scratch, 0, sb));
        __half *xq, *xsum;   // the new kernel's activations (16 columns' room)
        CHECK(cudaMalloc(&xq, size_t(kMaxCols) * size_t(s.k) * 2));
        CHECK(cudaMalloc(&xsum, size_t(kMaxCols) * size_t(s.k / 32) * 2));
        const int max_blocks = sms * 16;
        void * partial;
        uint32_t * counters;
        CHECK(cudaMalloc(&partial, k17::partial_bytes(int64_t(max_blocks) * k17::kWarps, 2)));
        CHECK(cudaMalloc(&counters, size_t(s.rows / 16) * 4));
        CHECK(cudaMemset(counters, 0, size_t(s.rows / 16) * 4));
        std::vector<float> y_cur(y_count), y_new(y_count);
        const double gb = double(bytes) / 1e9;

        for (int n : kCols) {
            Row row{s.name, n, 0, {}, {}, 0, 0, 0};
            // the current kernel, with the geometry it picks
            luce::cuda::SmallGemm g{};
            g.type = luce::cuda::kTypeQ4K;
            g.w = dorig[0];
            g.nrows = s.rows;
            g.k = s.k;
            g.row_bytes = size_t(s.k / 256) * 144;
            g.x = dx;
            g.x_stride = s.k;
            g.n = n;
            g.y = dy;
            g.y_stride = s.rows;
            g.n_sm = sms;
            CHECK(cudaMemset(dy, 0xff, y_count * 4));   // NaN: unwritten outputs show
            CHECK(cudaError_t(luce::cuda::small_gemm_quantize(g, scratch, nullptr)));
            CHECK(cudaError_t(luce::cuda::small_gemm_multiply(g, scratch, nullptr)));
            CHECK(cudaDeviceSynchronize());
            CHECK(cudaMemcpy(y_cur.data(), dy, y_count * 4, cudaMemcpyDeviceToHost));
            row.cur_err = ref_error(y_cur, s.rows, ref, rows, n);
            float ms = time_calls(copies, 10, [&](int c) {
                g.w = dorig[c];
                CHECK(cudaError_t(luce::cuda::small_gemm_multiply(g, scratch, nullptr)));
            });
            row.cur_gbps = gb / (ms * 1e-3);

            // the new kernel's activations, checked value by value against the host's rounding
            const int nt = (n + 7) / 8, n_pad = 8 * nt;
            const int64_t pairs = (s.k / 32) * n;
            k17::quantize_k17<<<unsigned((pairs + 7) / 8), 256>>>(dx, s.k, n, n_pad, s.k, xq, xsum);
            CHECK(cudaGetLastError());
            CHECK(cudaDeviceSynchronize());
            {
                std::vector<__half> hq(size_t(n_pad) * size_t(s.k)), hs(size_t(n_pad) * size_t(s.k / 32));
                CHECK(cudaMemcpy(hq.data(), xq, hq.size() * 2, cudaMemcpyDeviceToHost));
                CHECK(cudaMemcpy(hs.data(), xsum, hs.size() * 2, cudaMemcpyDeviceToHost));
                int64_t bad = 0;
                for (int c = 0; c < n; ++c) {
                    for (int64_t v = 0; v < s.k; ++v) {
                        const int64_t i = v / 256;
                        const float dev = __half2float(hq[size_t(k17::xq_half_index(i, int(v % 256 / 32), int(v % 32), c, n_pad))]);
                        bad += dev != ha.xh[size_t(c) * size_t(s.k) + size_t(v)];
                    }
                    for (int64_t b = 0; b < s.k / 32; ++b) {
                        bad += __half2float(hs[size_t((b / 8 * n_pad + c) * 8 + b % 8)]) != ha.xsum[size_t(c) * size_t(s.k / 32) + size_t(b)];
                    }
                }
                if (bad) {
                    std::printf("%s n=%d: %lld activations differ from the host's rounding  <-- WRONG\n", s.name, n, (long long) bad);
                    wrong = true;
                }
            }
            const k17::Acts acts{reinterpret_cast<const uint4 *>(xq), reinterpret_cast<const uint32_t *>(xsum), n_pad, n};
            std::string sweep;
            for (int v = 0; v < kNumVariants; ++v) {
                const int o = occ[nt - 1][v];
                std::vector<int> bs;
                for (int b : {2, 3, 4, 6, 8, o}) {
                    if (b >= 1 && b <= o && b <= 16 && std::find(bs.begin(), bs.end(), b) == bs.end()) bs.push_back(b);
                }
                for (int b : bs) {
                    CHECK(cudaMemset(dy, 0xff, y_count * 4));
                    CHECK(launch_new(v, n, drp[0], s.rows, s.k, acts, dy, sms * b, partial, counters));
                    CHECK(cudaDeviceSynchronize());
                    CHECK(cudaMemcpy(y_new.data(), dy, y_count * 4, cudaMemcpyDeviceToHost));
                    const double err = ref_error(y_new, s.rows, ref, rows, n);
                    const double vs = full_diff(y_new, y_cur, size_t(n) * size_t(s.rows));
                    row.new_err = std::max(row.new_err, err);
                    row.new_vs_cur = std::max(row.new_vs_cur, vs);
                    if (!(err < 1e-3) || !(vs < 1e-3)) {
                        std::printf("%s n=%d %s x%d: error %.2e against the reference, %.2e against the current kernel  <-- WRONG\n", s.name,
                                    n, kVariants[v].name, b, err, vs);
                        wrong = true;
                    }
                    ms = time_calls(copies, 10, [&](int c) { CHECK(launch_new(v, n, drp[c], s.rows, s.k, acts, dy, sms * b, partial, counters)); });
                    const double gbps = gb / (ms * 1e-3);
                    char buf[48];
                    std::snprintf(buf, sizeof buf, " %s/%d:%.0f", kVariants[v].name, b, gbps);
                    sweep += buf;
                    if (gbps > row.best_gbps[v]) {
                        row.best_gbps[v] = gbps;
                        row.best_blocks[v] = b;
                    }
                }
            }
            if (!(row.cur_err < 1e-3)) {
                std::printf("%s n=%d: the current kernel is %.2e off the reference  <-- WRONG (reference or kernel)\n", s.name, n, row.cur_err);
                wrong = true;
            }
            std::printf("%-18s n=%2d cur %.0f |%s\n", s.name, n, row.cur_gbps, sweep.c_str());
            table.push_back(row);
        }
        for (int c = 0; c < copies; ++c) {
            CHECK(cudaFree(dorig[c]));
            CHECK(cudaFree(drp[c]));
        }
        CHECK(cudaFree(dx));
        CHECK(cudaFree(dy));
        CHECK(cudaFree(scratch));
        CHECK(cudaFree(xq));
        CHECK(cudaFree(xsum));
        CHECK(cudaFree(partial));
        CHECK(cudaFree(counters));
        std::printf("  (%s: %.1f MB, %d copies, %.1f s)\n", s.name, double(bytes) / 1e6, copies,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t_shape).count());
        std::fflush(stdout);
    }

    std::printf("\nGB/s of weights (Q4_K, 4.5 bits a weight, same bytes in both layouts); copy ceiling %.0f, read %.0f GB/s\n", copy_gbps,
                read_gbps);
    std::printf("new kernel: best launch of each variant (blocks an SM after /); x cur and %%copy: the best variant; errors: max |y - ref| / max |ref| per column, all variants\n");
    std::printf("%-18s %3s %6s", "shape", "n", "cur");
    for (const Variant & v : kVariants) std::printf(" %8s", v.name);
    std::printf(" %6s %6s %9s %9s %9s\n", "x cur", "%copy", "err cur", "err new", "new~cur");
    for (const Row & r : table) {
        double best = 0;
        for (double b : r.best_gbps) best = std::max(best, b);
        std::printf("%-18s %3d %6.0f", r.shape.c_str(), r.n, r.cur_gbps);
        for (int v = 0; v < kNumVariants; ++v) std::printf(" %6.0f/%d", r.best_gbps[v], r.best_blocks[v]);
        std::printf(" %6.2f %5.0f%% %9.1e %9.1e %9.1e\n", best / r.cur_gbps, 100.0 * best / copy_gbps, r.cur_err, r.new_err, r.new_vs_cur);
    }
    std::printf("variants: b = bias (1024 + q, HFMA2), s = subnormal (q 2^-24, HMUL2); nl1 = weights skip L1; pf = L2 prefetch 3 units ahead\n");
    std::printf("total %.1f s; %s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(),
                wrong ? "WRONG RESULTS (see above)" : "all results within 1e-3 of the reference");
    return wrong ? 1 : 0;
}
