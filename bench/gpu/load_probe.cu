// load_probe.cu — where the small-batch GEMM's bandwidth goes: its kernel with the arithmetic taken
// out (the loaded words only folded together), beside a plain linear read of the same bytes, on the
// 27B's largest Q4_K shape. If the loads alone are slow, the access pattern is the limit; if they
// are fast, the arithmetic is. Built like small_gemm_bench.cu (it includes the kernel source).
#include "small_batch_gemm.cu"

#include <cstdio>
#include <vector>

namespace luce::cuda {
namespace {

// The Q4_K loads of Q4KHalf with a fold instead of the mma
struct Q4KLoadOnly : Q4KBlocks {
    template <int NT>
    static __device__ __forceinline__ void multiply(const Rows & cur, float (&acc)[NT][4], const QuantizedCols &, int64_t, int, int) {
        uint32_t x = 0;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            x ^= cur.head[r].x ^ cur.head[r].y ^ cur.head[r].z ^ cur.head[r].w;
#pragma unroll
            for (int j = 0; j < 4; ++j) x ^= cur.qs[r][j].x ^ cur.qs[r][j].y;
        }
        acc[0][0] += __uint_as_float(x & 0x3fffffffu);
    }
};

// every thread reads 16-byte words, the warp 512 consecutive bytes a load, UNROLL loads in flight
template <int UNROLL>
__global__ void __launch_bounds__(256) linear_read(const uint4 * __restrict__ p, size_t n, float * out) {
    uint32_t x = 0;
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = p[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (x == 0x12345678u) out[0] = 1.0f;
}

} // namespace
} // namespace luce::cuda

using namespace luce::cuda;

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

template <class F>
float time_ms(int copies, F && f) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int c = 0; c < copies; ++c) f(c);
    std::vector<float> v;
    for (int r = 0; r < 11; ++r) {
        cudaEventRecord(a);
        for (int c = 0; c < copies; ++c) f(c);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float t;
        cudaEventElapsedTime(&t, a, b);
        v.push_back(t / copies);
    }
    std::sort(v.begin(), v.end());
    return v[5];
}

int main() {
    const int64_t rows = 34816, k = 5120;   // ffn gate+up
    const size_t row_bytes = size_t(k / 256) * 144, bytes = row_bytes * size_t(rows);
    const int copies = 5;
    std::vector<void *> w(copies);
    for (auto & p : w) {
        CK(cudaMalloc(&p, bytes));
        CK(cudaMemset(p, 0x11, bytes));
    }
    float * out;
    CK(cudaMalloc(&out, size_t(rows) * 16 * 4));
    void * scratch;
    const size_t sb = small_gemm_scratch_bytes(k, 16);
    CK(cudaMalloc(&scratch, sb));
    CK(cudaMemset(scratch, 0, sb));
    const ScratchParts parts = scratch_parts(scratch, k, 1, 8);
    const double gb = double(bytes) / 1e9;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);

    auto gemm_like = [&](auto kernel, int R, int blocks_hint) {
        (void) blocks_hint;
        const dim3 grid(unsigned((rows + 16 * R - 1) / (16 * R)), 1);
        return time_ms(copies, [&](int c) {
            kernel<<<grid, 256>>>(static_cast<const uint8_t *>(w[c]), row_bytes, rows, k / 256, k / 256, parts.cols, out, rows,
                                  parts.partial, parts.counters);
        });
    };
    std::printf("%-40s %8s\n", "kernel (ffn gate+up, 34816 x 5120 Q4_K)", "GB/s");
    std::printf("%-40s %8.0f\n", "gemm n=1, R=1", gb / (gemm_like(gemm_small<Q4KHalf, 1, 1, true, 2>, 1, 0) * 1e-3));
    std::printf("%-40s %8.0f\n", "gemm n=1, R=4", gb / (gemm_like(gemm_small<Q4KHalf, 1, 4, true, 2>, 4, 0) * 1e-3));
    std::printf("%-40s %8.0f\n", "loads only, R=1, depth 2", gb / (gemm_like(gemm_small<Q4KLoadOnly, 1, 1, true, 2>, 1, 0) * 1e-3));
    std::printf("%-40s %8.0f\n", "loads only, R=4, depth 2", gb / (gemm_like(gemm_small<Q4KLoadOnly, 1, 4, true, 2>, 4, 0) * 1e-3));
    std::printf("%-40s %8.0f\n", "loads only, R=8, depth 2", gb / (gemm_like(gemm_small<Q4KLoadOnly, 1, 8, true, 2>, 8, 0) * 1e-3));
    std::printf("%-40s %8.0f\n", "loads only, R=1, no prefetch, 3 blocks/SM", gb / (gemm_like(gemm_small<Q4KLoadOnly, 1, 1, false, 3>, 1, 0) * 1e-3));
    std::printf("%-40s %8.0f\n", "loads only, R=1, no prefetch, 4 blocks/SM", gb / (gemm_like(gemm_small<Q4KLoadOnly, 1, 1, false, 4>, 1, 0) * 1e-3));
    for (int blocks_per_sm : {2, 4, 8}) {
        const unsigned grid = unsigned(sms * blocks_per_sm);
        const size_t n16 = bytes / 16;
        const float ms1 = time_ms(copies, [&](int c) { linear_read<1><<<grid, 256>>>(static_cast<const uint4 *>(w[c]), n16, out); });
        const float ms4 = time_ms(copies, [&](int c) { linear_read<4><<<grid, 256>>>(static_cast<const uint4 *>(w[c]), n16, out); });
        std::printf("linear read, %d blocks/SM, 1 / 4 in flight   %6.0f %6.0f\n", blocks_per_sm, gb / (ms1 * 1e-3), gb / (ms4 * 1e-3));
    }
    CK(cudaGetLastError());
    return 0;
}
