// tree_recurrence.cu — see tree_recurrence.h. Built with -use_fast_math, as ggml-cuda is (CMakeLists.txt):
// expf and the contractions into fma must round as in ggml's gated_delta_net kernel.
#include "tree_recurrence.h"

#include <cuda_runtime.h>

namespace luce::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;   // as ggml's launch: a warp per state column, 4 columns a block

template <int width>
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = width / 2; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset, width);
    return x;
}

// grid (H, 1, S / kWarpsPerBlock), block (min(32, S), kWarpsPerBlock). Each warp owns one column of
// one head's state (stored transposed, as ggml keeps it: column c is contiguous), each lane
// rows_per_lane of its rows; the warp walks every node of the tree in the plan's order.
template <int S>
__global__ void __launch_bounds__((S < 32 ? S : 32) * kWarpsPerBlock, 2)
tree_gated_delta_net(TreeRecurrence r) {
    constexpr int warp = S < 32 ? S : 32;
    constexpr int rows_per_lane = S / warp;
    const int h = int(blockIdx.x);
    const int lane = int(threadIdx.x);
    const int col = int(blockIdx.z) * kWarpsPerBlock + int(threadIdx.y);
    const int64_t head_state = int64_t(h) * S * S + int64_t(col) * S;   // this column, in a [S, S, H] state
    const int64_t stack_slot = int64_t(r.H) * S * S;
    const int qk_head = h % r.Hk;

    float s[rows_per_lane];
    for (int vis = 0; vis < r.n; ++vis) {
        const int node = r.plan[3 * vis], load = r.plan[3 * vis + 1], save = r.plan[3 * vis + 2];
        if (load != -1) {   // -2: the committed state; a slot: a branch point's
            const float * from = load == -2 ? r.state + head_state : r.stack + load * stack_slot + head_state;
#pragma unroll
            for (int j = 0; j < rows_per_lane; ++j) s[j] = from[j * warp + lane];
        }
        const float * q = r.q + int64_t(node) * r.qk_node_stride + int64_t(qk_head) * r.qk_head_stride;
        const float * k = r.k + int64_t(node) * r.qk_node_stride + int64_t(qk_head) * r.qk_head_stride;
        const float * v = r.v + int64_t(node) * r.v_node_stride + int64_t(h) * r.v_head_stride;
        const float beta_val = r.beta[int64_t(node) * r.H + h];

        float k_reg[rows_per_lane];
        float q_reg[rows_per_lane];
#pragma unroll
        for (int j = 0; j < rows_per_lane; ++j) {
            k_reg[j] = k[j * warp + lane];
            q_reg[j] = q[j * warp + lane];
        }
        // ggml's order: decay, S^T k, the delta rule, then S^T q on the updated column
        const float g_val = expf(r.g[int64_t(node) * r.H + h]);
        float kv_shard = 0.0f;
#pragma unroll
        for (int j = 0; j < rows_per_lane; ++j) {
            kv_shard += s[j] * k_reg[j];
        }
        float kv_col = warp_sum<warp>(kv_shard);
        float delta_col = (v[col] - g_val * kv_col) * beta_val;
        float attn_partial = 0.0f;
#pragma unroll
        for (int j = 0; j < rows_per_lane; ++j) {
            s[j] = g_val * s[j] + k_reg[j] * delta_col;
            attn_partial += s[j] * q_reg[j];
        }
        float attn_col = warp_sum<warp>(attn_partial);
        if (lane == 0) r.out[(int64_t(node) * r.H + h) * S + col] = attn_col * r.scale;
        if (save >= 0) {
            float * to = r.stack + save * stack_slot + head_state;
#pragma unroll
            for (int j = 0; j < rows_per_lane; ++j) to[j * warp + lane] = s[j];
        }
    }
}

template <int S>
int launch(const TreeRecurrence & r, cudaStream_t stream) {
    constexpr int warp = S < 32 ? S : 32;
    const dim3 grid(unsigned(r.H), 1, unsigned(S / kWarpsPerBlock));
    const dim3 block(warp, kWarpsPerBlock, 1);
    tree_gated_delta_net<S><<<grid, block, 0, stream>>>(r);
    return int(cudaGetLastError());
}

} // namespace

int tree_recurrence(const TreeRecurrence & r, void * stream) {
    if (r.n <= 0) return 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (r.S) {
        case 16: return launch<16>(r, s);
        case 32: return launch<32>(r, s);
        case 64: return launch<64>(r, s);
        case 128: return launch<128>(r, s);
        default: return int(cudaErrorInvalidValue);
    }
}

} // namespace luce::cuda
