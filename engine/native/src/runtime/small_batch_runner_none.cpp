// small_batch_runner_none.cpp — builds without the CUDA toolkit (or on a ggml without CUDA) have no
// small-batch kernels: every graph goes to ggml's scheduler.
#include "small_batch_runner.h"

#include "api_guard.h"

namespace luce {

std::unique_ptr<SmallBatchRunner> make_small_batch_runner(ggml_backend_t, bool, KernelScope, int) { return nullptr; }

} // namespace luce

extern "C" luce_status luce_cuda_small_gemm(int32_t, int32_t, const void *, int64_t, int64_t, const float *, int32_t, float *,
                                            int32_t, int32_t, int32_t) {
    return luce::guarded([] { throw luce::Error(LUCE_ERR_UNSUPPORTED, "this luce build has no CUDA kernels"); });
}
