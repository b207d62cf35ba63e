// bench_timing.cuh — the GPU benches' timing: ms per call by CUDA events, median of rounds.
// Include after defining CHECK(cuda call) (each bench exits with its own code on a CUDA error).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

inline float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// ms per call of f(copy), rotating over the copies; median of `reps` rounds of all copies
template <class F>
float time_calls(int copies, int reps, F && f) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int c = 0; c < copies; ++c) f(c);   // warm-up
    CHECK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int r = 0; r < reps; ++r) {
        CHECK(cudaEventRecord(a));
        for (int c = 0; c < copies; ++c) f(c);
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float t = 0;
        CHECK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t / float(copies));
    }
    CHECK(cudaGetLastError());
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    return median(ms);
}
