// small_gemm_bench.cu — the small-batch GEMM (engine/native/cuda/small_batch_gemm.cu) on the 27B's
// matrix shapes, every launch geometry, 1..32 columns: weight bandwidth against the copy ceiling,
// and each geometry's output against the one-split geometry's (same arithmetic, other summation
// order). With OLD_GEMM defined, also the kernel of an earlier commit, compiled in a namespace of its
// own (see bench/gpu/suite_kernels.sh), as the before column.
//
//   nvcc -arch=sm_90 -O3 -std=c++17 -I engine/native/cuda bench/gpu/small_gemm_bench.cu \
//        engine/native/cuda/small_batch_gemm.cu -o small_gemm_bench && ./small_gemm_bench [csv [name part]]
//
// Weights are random blocks (f16 scales in a sane range); every shape is copied until the copies
// exceed the L2 cache several times, and the timed calls rotate among them.
#include "small_batch_gemm.h"
#ifdef OLD_GEMM
#define luce luce_old
#include OLD_GEMM
#undef luce
#endif

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define CHECK(x)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            std::exit(1);                                                                         \
        }                                                                                         \
    } while (0)
#include "bench_timing.cuh"   // after CHECK

namespace {

struct Shape {
    const char * name;
    int type;   // 8 Q8_0, 12 Q4_K, 14 Q6_K
    int64_t rows, k;
};

// The 27B's matmuls as the engine runs them (fused projections: qkv+gate, gate+up)
const Shape kShapes[] = {
    {"deltanet qkv+gate", 12, 16384, 5120}, {"deltanet qkv (q6)", 14, 10240, 5120}, {"deltanet out", 12, 5120, 6144},
    {"ffn gate+up", 12, 34816, 5120},       {"ffn down", 12, 5120, 17408},          {"ffn down (q6)", 14, 5120, 17408},
    {"attn q", 12, 12288, 5120},            {"attn k", 12, 1024, 5120},             {"attn out", 12, 5120, 6144},
    {"output (q6)", 14, 248320, 5120},
    // the DFlash draft's (Q8_0; fc takes the 5 captured layers' features)
    {"draft fc (q8)", 8, 5120, 25600},      {"draft q (q8)", 8, 4096, 5120},        {"draft k (q8)", 8, 1024, 5120},
    {"draft out (q8)", 8, 5120, 4096},      {"draft gate (q8)", 8, 17408, 5120},    {"draft down (q8)", 8, 5120, 17408},
    // SmolLM2-135M's output matrix and its shipped draft (Q8_0, k = 576 / 2880: a partial last step)
    {"smol output (q8)", 8, 49152, 576},    {"smol draft fc (q8)", 8, 576, 2880},   {"smol draft q (q8)", 8, 576, 576},
    {"smol draft k (q8)", 8, 192, 576},     {"smol draft gate (q8)", 8, 1536, 576}, {"smol draft down (q8)", 8, 576, 1536},
};

size_t row_bytes(const Shape & s) { return luce::cuda::small_gemm_row_bytes(s.type, s.k); }
int64_t n_steps(const Shape & s) { return (s.k + 255) / 256; }   // 256-value steps, the last maybe partial

uint16_t f16(float v) {
    const __half h = __float2half(v);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}

std::vector<uint8_t> random_weights(const Shape & s, std::mt19937 & rng) {
    std::vector<uint8_t> w(size_t(s.rows) * row_bytes(s));
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> d(1e-3f, 1e-2f);
    for (auto & b : w) b = uint8_t(byte(rng));
    const bool q80 = s.type == 8;   // blocks of 34 bytes, each led by its d; K-quants: superblocks
    const size_t bb = q80 ? 34 : luce::cuda::small_gemm_step_bytes(s.type), nb = w.size() / bb;
    for (size_t i = 0; i < nb; ++i) {
        uint8_t * blk = w.data() + i * bb;
        const uint16_t dd = f16(d(rng)), dm = f16(d(rng));
        if (q80) {
            std::memcpy(blk, &dd, 2);
        } else if (s.type == 12) {
            std::memcpy(blk, &dd, 2);
            std::memcpy(blk + 2, &dm, 2);
        } else {
            std::memcpy(blk + 208, &dd, 2);
        }
    }
    return w;
}


double rel_diff(const std::vector<float> & a, const std::vector<float> & ref) {
    double d = 0, m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        d = std::max(d, double(std::fabs(a[i] - ref[i])));
        m = std::max(m, double(std::fabs(ref[i])));
    }
    return m > 0 ? d / m : d;
}

float f32_of_f16(uint16_t b) {
    __half h;
    std::memcpy(&h, &b, 2);
    return __half2float(h);
}

// Q8_0 against the host: the first rows of y = W x in double, with x quantized to int8 per 32
// values (scale amax/127) and rounded to f16 as the kernels take it. Relative to the largest output.
double q80_reference_diff(const std::vector<uint8_t> & w, const Shape & s, const std::vector<float> & x, int n,
                          const std::vector<float> & y) {
    const int64_t rows = std::min<int64_t>(s.rows, 64), nb = s.k / 32;
    std::vector<double> xq(size_t(n) * size_t(s.k));
    for (int c = 0; c < n; ++c) {
        for (int64_t b = 0; b < nb; ++b) {
            const float * v = x.data() + size_t(c) * size_t(s.k) + size_t(b) * 32;
            float amax = 0;
            for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(v[l]));
            const float d = amax / 127.0f;
            for (int l = 0; l < 32; ++l) {
                const float q = amax == 0 ? 0.0f : std::nearbyint(v[l] / d);
                xq[size_t(c) * size_t(s.k) + size_t(b) * 32 + l] = double(__half2float(__float2half_rn(q * d)));
            }
        }
    }
    double diff = 0, scale = 0;
    const size_t row_bytes = size_t(nb) * 34;
    for (int c = 0; c < n; ++c) {
        for (int64_t r = 0; r < rows; ++r) {
            double acc = 0;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t * blk = w.data() + size_t(r) * row_bytes + size_t(b) * 34;
                uint16_t db;
                std::memcpy(&db, blk, 2);
                const double d = f32_of_f16(db);
                for (int l = 0; l < 32; ++l) acc += d * double(int8_t(blk[2 + l])) * xq[size_t(c) * size_t(s.k) + size_t(b) * 32 + l];
            }
            const float got = y[size_t(c) * size_t(s.rows) + size_t(r)];
            if (!std::isfinite(got)) return INFINITY;
            diff = std::max(diff, std::fabs(double(got) - acc));
            scale = std::max(scale, std::fabs(acc));
        }
    }
    return scale > 0 ? diff / scale : diff;
}

} // namespace

// --one TYPE ROWS K N ROW_TILES K_SPLITS BLOCKS_PER_SM: that one call, timed (for a profiler)
int run_one(char ** a) {
    const Shape s{"one", std::atoi(a[0]), std::atoll(a[1]), std::atoll(a[2])};
    const int n = std::atoi(a[3]);
    const luce::cuda::SmallGemmGeometry geo{std::atoi(a[4]), std::atoi(a[5]), std::atoi(a[6])};
    std::mt19937 rng(99);
    const std::vector<uint8_t> host_w = random_weights(s, rng);
    const int copies = int(std::max<size_t>(1, (size_t(400) << 20) / host_w.size() + 1));
    std::vector<void *> dw(copies);
    for (auto & p : dw) {
        CHECK(cudaMalloc(&p, host_w.size()));
        CHECK(cudaMemcpy(p, host_w.data(), host_w.size(), cudaMemcpyHostToDevice));
    }
    std::vector<float> hx(size_t(n) * size_t(s.k));
    std::normal_distribution<float> nd;
    for (auto & v : hx) v = nd(rng);
    float *dx, *dy;
    void * scratch;
    CHECK(cudaMalloc(&dx, hx.size() * 4));
    CHECK(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&dy, size_t(n) * size_t(s.rows) * 4));
    const size_t sb = luce::cuda::small_gemm_scratch_bytes(s.k, n);
    CHECK(cudaMalloc(&scratch, sb));
    CHECK(cudaMemset(scratch, 0, sb));
    luce::cuda::SmallGemm g{s.type, dw[0], s.rows, s.k, row_bytes(s), dx, s.k, n, dy, s.rows};
    CHECK(cudaError_t(luce::cuda::small_gemm_quantize(g, scratch, nullptr)));
    const float ms = time_calls(copies, 5, [&](int c) {
        g.w = dw[c];
        CHECK(cudaError_t(luce::cuda::small_gemm_multiply(g, scratch, nullptr, geo)));
    });
    std::printf("one: %.0f GB/s\n", double(host_w.size()) / 1e9 / (ms * 1e-3));
    return 0;
}

int main(int argc, char ** argv) {
    if (argc == 9 && std::strcmp(argv[1], "--one") == 0) return run_one(argv + 2);
    FILE * csv = argc > 1 ? std::fopen(argv[1], "w") : nullptr;
    const char * only = argc > 2 ? argv[2] : nullptr;   // shapes whose name contains this
    if (csv) std::fprintf(csv, "shape,type,rows,k,n,row_tiles,k_splits,depth,us,gbps,rel_diff\n");
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s: %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

    // the copy ceiling: bytes read plus written
    {
        const size_t bytes = size_t(2) << 30;
        void *src, *dst;
        CHECK(cudaMalloc(&src, bytes));
        CHECK(cudaMalloc(&dst, bytes));
        CHECK(cudaMemset(src, 1, bytes));
        const float ms = time_calls(1, 10, [&](int) { CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); });
        std::printf("copy ceiling: %.0f GB/s (read + write)\n", 2.0 * double(bytes) / (ms * 1e6));
        cudaFree(src);
        cudaFree(dst);
    }

    std::mt19937 rng(1234);
    const int cols[] = {1, 4, 16, 24, 32};   // 24, 32: what a tree of budget 22 or 32 would verify
    const int depths[] = {2, 3, 4};   // blocks per SM
    const int tiles[] = {1, 2, 4, 8};
    const int splits[] = {1, 2, 3, 4, 6, 8, 12, 16};
    struct Row {
        std::string shape;
        int n;
        double old_gbps, auto_gbps, best_gbps, best_at_depth[3];
        luce::cuda::SmallGemmGeometry best, chosen;
        double worst_diff;
    };
    std::vector<Row> table;

    for (const Shape & s : kShapes) {
        if (only && !std::strstr(s.name, only)) continue;
        const std::vector<uint8_t> host_w = random_weights(s, rng);
        const size_t w_bytes = host_w.size();
        const int copies = int(std::max<size_t>(1, (size_t(400) << 20) / w_bytes + 1));
        std::vector<void *> dw(copies);
        for (auto & p : dw) {
            CHECK(cudaMalloc(&p, w_bytes));
            CHECK(cudaMemcpy(p, host_w.data(), w_bytes, cudaMemcpyHostToDevice));
        }
        const int nmax = 32;
        std::vector<float> hx(size_t(nmax) * size_t(s.k));
        std::normal_distribution<float> nd;
        for (auto & v : hx) v = nd(rng);
        float *dx, *dy;
        CHECK(cudaMalloc(&dx, hx.size() * 4));
        CHECK(cudaMemcpy(dx, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMalloc(&dy, size_t(nmax) * size_t(s.rows) * 4));
        void * scratch;
        const size_t sb = luce::cuda::small_gemm_scratch_bytes(s.k, nmax);
        CHECK(cudaMalloc(&scratch, sb));
        CHECK(cudaMemset(scratch, 0, sb));
#ifdef OLD_GEMM
        void * old_scratch;
        const size_t osb = luce_old::cuda::small_gemm_scratch_bytes(s.k, nmax);
        CHECK(cudaMalloc(&old_scratch, osb));
        CHECK(cudaMemset(old_scratch, 0, osb));
#endif
        for (int n : cols) {
            luce::cuda::SmallGemm g{};
            g.type = s.type;
            g.w = dw[0];
            g.nrows = s.rows;
            g.k = s.k;
            g.row_bytes = row_bytes(s);
            g.x = dx;
            g.x_stride = s.k;
            g.n = n;
            g.y = dy;
            g.y_stride = s.rows;
            g.n_sm = prop.multiProcessorCount;
            const double gb = double(w_bytes) / 1e9;
            Row row{s.name, n, 0, 0, 0, {0, 0, 0}, {}, luce::cuda::small_gemm_geometry(g), 0};
            CHECK(cudaMemset(dy, 0xff, size_t(n) * size_t(s.rows) * 4));   // NaN: unwritten outputs show
            CHECK(cudaError_t(luce::cuda::small_gemm_quantize(g, scratch, nullptr)));
            CHECK(cudaError_t(luce::cuda::small_gemm_multiply(g, scratch, nullptr, {1, 1})));
            std::vector<float> ref(size_t(n) * size_t(s.rows)), out(ref.size());
            CHECK(cudaMemcpy(ref.data(), dy, ref.size() * 4, cudaMemcpyDeviceToHost));
            if (s.type == 8) {   // no earlier kernel to compare with: the host's double
                const double e = q80_reference_diff(host_w, s, hx, n, ref);
                std::printf("%s n=%d: %.2e of the largest output against the host reference%s\n", s.name, n, e,
                            e < 1e-3 ? "" : "  <-- WRONG");
                row.worst_diff = std::max(row.worst_diff, e);
            }
#ifdef OLD_GEMM
            if (luce_old::cuda::small_gemm_supports(s.type)) {
                luce_old::cuda::SmallGemm og{s.type, dw[0], s.rows, s.k, g.row_bytes, dx, s.k, n, dy, s.rows};
                CHECK(cudaError_t(luce_old::cuda::small_gemm_quantize(og, old_scratch, nullptr)));
                CHECK(cudaMemset(dy, 0xff, ref.size() * 4));
                CHECK(cudaError_t(luce_old::cuda::small_gemm_multiply(og, old_scratch, nullptr)));
                CHECK(cudaMemcpy(out.data(), dy, out.size() * 4, cudaMemcpyDeviceToHost));
                row.worst_diff = std::max(row.worst_diff, rel_diff(out, ref));
                const float ms = time_calls(copies, 15, [&](int c) {
                    og.w = dw[c];
                    luce_old::cuda::small_gemm_multiply(og, old_scratch, nullptr);
                });
                row.old_gbps = gb / (ms * 1e-3);
            }
#endif
            for (int di = 0; di < 3; ++di)
            for (int rt : tiles) {
                for (int ksp : splits) {
                    if (ksp > n_steps(s)) continue;
                    const luce::cuda::SmallGemmGeometry geo{rt, ksp, depths[di]};
                    CHECK(cudaMemset(dy, 0xff, ref.size() * 4));
                    g.w = dw[0];
                    CHECK(cudaError_t(luce::cuda::small_gemm_multiply(g, scratch, nullptr, geo)));
                    CHECK(cudaDeviceSynchronize());
                    CHECK(cudaMemcpy(out.data(), dy, out.size() * 4, cudaMemcpyDeviceToHost));
                    const double diff = rel_diff(out, ref);
                    const float ms = time_calls(copies, 15, [&](int c) {
                        g.w = dw[c];
                        luce::cuda::small_gemm_multiply(g, scratch, nullptr, geo);
                    });
                    const double gbps = gb / (ms * 1e-3);
                    row.worst_diff = std::max(row.worst_diff, diff);
                    row.best_at_depth[di] = std::max(row.best_at_depth[di], gbps);
                    if (gbps > row.best_gbps) {
                        row.best_gbps = gbps;
                        row.best = geo;
                    }
                    if (rt == row.chosen.row_tiles && ksp == row.chosen.k_splits && depths[di] == row.chosen.blocks_per_sm) {
                        row.auto_gbps = gbps;
                    }
                    if (csv) std::fprintf(csv, "%s,%d,%lld,%lld,%d,%d,%d,%d,%.2f,%.1f,%.3g\n", s.name, s.type, (long long) s.rows,
                                          (long long) s.k, n, rt, ksp, depths[di], ms * 1e3, gbps, diff);
                }
            }
            if (row.auto_gbps == 0) {   // the chosen geometry was reduced to one outside the sweep
                const float ms = time_calls(copies, 15, [&](int c) {
                    g.w = dw[c];
                    luce::cuda::small_gemm_multiply(g, scratch, nullptr);
                });
                row.auto_gbps = gb / (ms * 1e-3);
            }
            table.push_back(row);
            if (csv) std::fflush(csv);
        }
        // the quantization, once per input (K values, 16 columns)
        {
            luce::cuda::SmallGemm g{};
            g.k = s.k;
            g.x = dx;
            g.x_stride = s.k;
            g.n = 16;
            const float ms = time_calls(1, 15, [&](int) { luce::cuda::small_gemm_quantize(g, scratch, nullptr); });
            std::printf("quantize k=%lld n=16: %.2f us\n", (long long) s.k, ms * 1e3);
        }
        for (void * p : dw) cudaFree(p);
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(scratch);
#ifdef OLD_GEMM
        cudaFree(old_scratch);
#endif
    }

    std::printf("\n%-20s %3s %6s %6s %6s %6s %6s %6s %-9s %-9s %8s\n", "shape", "n", "old", "auto", "best", "b2", "b3", "b4", "best",
                "auto", "max diff");
    for (const Row & r : table) {
        std::printf("%-20s %3d %6.0f %6.0f %6.0f %6.0f %6.0f %6.0f %dx%dx%-5d %dx%dx%-5d %8.1e\n", r.shape.c_str(), r.n, r.old_gbps,
                    r.auto_gbps, r.best_gbps, r.best_at_depth[0], r.best_at_depth[1], r.best_at_depth[2], r.best.row_tiles,
                    r.best.k_splits, r.best.blocks_per_sm, r.chosen.row_tiles, r.chosen.k_splits, r.chosen.blocks_per_sm, r.worst_diff);
    }
    std::printf("(GB/s of weights; geometry = row tiles x K splits x blocks per SM)\n");
    if (csv) std::fclose(csv);
    return 0;
}
