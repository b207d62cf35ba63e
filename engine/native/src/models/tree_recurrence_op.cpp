#include "tree_recurrence_op.h"
#include "tree_nodes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace luce {
namespace {

constexpr const char * kMarkerName = "luce tree recurrence";

const float * at(const ggml_tensor * t, int64_t i1, int64_t i2) {
    return reinterpret_cast<const float *>(static_cast<const char *>(t->data) + i1 * t->nb[1] + i2 * t->nb[2]);
}

// The CPU op: heads split over the threads; each walks the visits with its own state stack. The
// state is kept transposed as ggml keeps it (column c of head h contiguous), and each node computes
// what ggml's gated_delta_net computes for one token: decay, S^T k, the delta rule, S^T q.
void tree_recurrence_cpu(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *g = dst->src[3], *beta = dst->src[4],
                      *state = dst->src[5], *visits = dst->src[6];
    const int64_t S = v->ne[0], H = v->ne[1], n = v->ne[2], Hk = q->ne[1];
    const float scale = 1.0f / std::sqrt(float(S));
    const int32_t * plan = static_cast<const int32_t *>(visits->data);
    int slots = 0;
    for (int64_t i = 0; i < n; ++i) slots = std::max(slots, plan[3 * i + 2] + 1);
    std::vector<float> s(static_cast<size_t>(S * S)), stack(static_cast<size_t>(slots * S * S)), delta(static_cast<size_t>(S));
    for (int64_t h = ith; h < H; h += nth) {
        const float * committed = static_cast<const float *>(state->data) + h * S * S;
        for (int64_t vis = 0; vis < n; ++vis) {
            const int32_t node = plan[3 * vis], load = plan[3 * vis + 1], save = plan[3 * vis + 2];
            if (load == kTreeLoadCommitted) std::memcpy(s.data(), committed, size_t(S * S) * sizeof(float));
            if (load >= 0) std::memcpy(s.data(), &stack[size_t(load) * size_t(S * S)], size_t(S * S) * sizeof(float));
            const float * qn = at(q, h % Hk, node);
            const float * kn = at(k, h % Hk, node);
            const float * vn = at(v, h, node);
            const float decay = std::exp(static_cast<const float *>(g->data)[node * H + h]);
            const float b = static_cast<const float *>(beta->data)[node * H + h];
            for (float & x : s) x *= decay;
            for (int64_t c = 0; c < S; ++c) {
                const float * col = &s[size_t(c * S)];
                float kv = 0.0f;
                for (int64_t i = 0; i < S; ++i) kv += col[i] * kn[i];
                delta[size_t(c)] = (vn[c] - kv) * b;
            }
            float * out = static_cast<float *>(dst->data) + node * S * H + h * S;
            for (int64_t c = 0; c < S; ++c) {
                float * col = &s[size_t(c * S)];
                float o = 0.0f;
                for (int64_t i = 0; i < S; ++i) {
                    col[i] += kn[i] * delta[size_t(c)];
                    o += col[i] * qn[i];
                }
                out[c] = o * scale;
            }
            if (save >= 0) std::memcpy(&stack[size_t(save) * size_t(S * S)], s.data(), size_t(S * S) * sizeof(float));
        }
    }
}

} // namespace

ggml_tensor * tree_recurrence_node(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * g,
                                   ggml_tensor * beta, ggml_tensor * state, ggml_tensor * visits, bool on_cpu) {
    const int64_t S = v->ne[0], H = v->ne[1], n = v->ne[2];
    if (on_cpu) {
        ggml_tensor * args[7] = {q, k, v, g, beta, state, visits};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, S * H, n, 1, 1, args, 7, tree_recurrence_cpu, GGML_N_TASKS_MAX, nullptr);
    }
    ggml_tensor * r = ggml_gated_delta_net(ctx, q, k, v, g, beta, state, 1);   // [S·H, n + S]
    r->src[kTreeVisitsSrc] = visits;
    ggml_set_name(r, kMarkerName);
    return ggml_view_2d(ctx, r, S * H, n, r->nb[1], 0);
}

bool is_tree_recurrence_node(const ggml_tensor * t) {
    return t->op == GGML_OP_GATED_DELTA_NET && t->src[kTreeVisitsSrc] && std::strcmp(t->name, kMarkerName) == 0;
}

} // namespace luce
