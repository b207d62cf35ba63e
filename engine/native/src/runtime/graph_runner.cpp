// graph_runner.cpp — see graph_runner.h.
#include "graph_runner.h"
#include "device.h"

#include <algorithm>
#include <cmath>

namespace luce {

GraphRunner::GraphRunner(ggml_backend_dev_t dev, int n_threads, size_t max_nodes, int n_kinds, bool stop_on_cancel)
    : max_nodes_(max_nodes), device_name_(ggml_backend_dev_name(dev)) {
    backends_ = init_backends(dev, n_threads, backend_, cpu_backend_);
    scheds_.assign(size_t(std::max(n_kinds, 1)), nullptr);
    if (stop_on_cancel) {
        auto abort_cb = [](void * flag) { return static_cast<std::atomic<bool> *>(flag)->load(); };
        set_backend_abort(cpu_backend_ ? cpu_backend_ : backend_, abort_cb, &cancel_);
    }
}

GraphRunner::~GraphRunner() {
    for (ggml_backend_sched_t s : scheds_) if (s) ggml_backend_sched_free(s);
    if (cpu_backend_) ggml_backend_free(cpu_backend_);
    if (backend_) ggml_backend_free(backend_);
}

ggml_backend_sched_t GraphRunner::sched(int kind) {
    ggml_backend_sched_t & s = scheds_.at(size_t(kind));
    if (!s) {
        s = ggml_backend_sched_new(backends_.data(), nullptr, int(backends_.size()), max_nodes_, false, true);
        if (!s) throw Error(LUCE_ERR_DEVICE, "cannot create a graph scheduler on " + device_name_);
    }
    return s;
}

void GraphRunner::reserve(ggml_cgraph * gf, int kind, const std::string & what) {
    if (!ggml_backend_sched_reserve(sched(kind), gf)) {
        throw Error(LUCE_ERR_MEMORY, "cannot reserve compute buffers for " + what + " on " + device_name_);
    }
}

void GraphRunner::allocate(ggml_cgraph * gf, int kind, const std::string & what) {
    if (!ggml_backend_sched_alloc_graph(sched(kind), gf)) {
        throw Error(LUCE_ERR_MEMORY, "cannot allocate compute buffers for " + what + " on " + device_name_);
    }
}

ggml_status GraphRunner::compute_status(ggml_cgraph * gf, int kind) {
    const ggml_status st = ggml_backend_sched_graph_compute(sched(kind), gf);
    if (st == GGML_STATUS_ABORTED) cancel_.store(false);   // the request stopped this graph
    return st;
}

void GraphRunner::throw_on(ggml_status st, const char * what) {
    if (st == GGML_STATUS_ABORTED) {
        cancel_.store(false);
        throw Error(LUCE_ERR_CANCELLED, "cancelled");
    }
    if (st != GGML_STATUS_SUCCESS) throw Error(LUCE_ERR_COMPUTE, std::string(what) + " failed on " + device_name_);
}

void GraphRunner::compute(ggml_cgraph * gf, int kind, const char * what) {
    throw_on(compute_status(gf, kind), what);
}

void GraphRunner::release(int kind) {
    ggml_backend_sched_t & s = scheds_.at(size_t(kind));
    if (s) ggml_backend_sched_free(s);
    s = nullptr;
}

uint64_t GraphRunner::compute_bytes() const {
    uint64_t bytes = 0;
    for (ggml_backend_sched_t s : scheds_) {
        if (!s) continue;
        for (int i = 0; i < ggml_backend_sched_get_n_backends(s); ++i) {
            bytes += ggml_backend_sched_get_buffer_size(s, ggml_backend_sched_get_backend(s, i));
        }
    }
    return bytes;
}

namespace {

// One row per thread at a time: the lowest index of the row's maximum, or -1 when a value is NaN
// or infinite (the sum over the row is then not finite, as the GPU graphs' check has it). Eight
// independent lanes so that the pass is not one long dependency chain.
void lowest_argmax_rows(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor * x = dst->src[0];
    const int64_t V = x->ne[0], n = x->ne[1];
    for (int64_t r = ith; r < n; r += nth) {
        const float * row = reinterpret_cast<const float *>(static_cast<const char *>(x->data) + r * x->nb[1]);
        float best[8], sum[8];
        for (int l = 0; l < 8; ++l) best[l] = -INFINITY, sum[l] = 0.0f;
        int64_t i = 0;
        for (; i + 8 <= V; i += 8) {
            for (int l = 0; l < 8; ++l) {
                const float v = row[i + l];
                best[l] = v > best[l] ? v : best[l];
                sum[l] += v;
            }
        }
        for (; i < V; ++i) {
            best[0] = row[i] > best[0] ? row[i] : best[0];
            sum[0] += row[i];
        }
        float m = best[0], s = sum[0];
        for (int l = 1; l < 8; ++l) m = best[l] > m ? best[l] : m, s += sum[l];
        int32_t at = -1;
        if (std::isfinite(s)) {
            for (int64_t j = 0; j < V; ++j) {
                if (row[j] == m) { at = int32_t(j); break; }
            }
        }
        static_cast<int32_t *>(dst->data)[r] = at;
    }
}

} // namespace

// Argmax per row with ties going to the lowest id, as the host sampler and llama.cpp's greedy
// sampler do. ggml's argmax returns the last of tied maxima on the CPU and any of them on a GPU
// (random-weight files have many exact ties), so on a GPU the tied ids are ranked by the ramp
// n_vocab - i and the unique best of that ranking is taken: six passes over the vocabulary, which
// on the CPU cost ~3% of a SmolLM2 decode step (perf, against llama-bench), hence one pass there.
ggml_tensor * greedy_argmax(ggml_context * ctx, ggml_tensor * logits, ggml_tensor * ramp, bool on_cpu) {
    if (on_cpu) {
        ggml_tensor * args[1] = {logits};
        return ggml_custom_4d(ctx, GGML_TYPE_I32, logits->ne[1], 1, 1, 1, args, 1, lowest_argmax_rows, GGML_N_TASKS_MAX, nullptr);
    }
    ggml_tensor * best = ggml_argmax(ctx, logits);   // I32 [n]: one of the maxima
    const int64_t V = logits->ne[0], n = logits->ne[1];
    ggml_tensor * max_l = ggml_get_rows(ctx, ggml_reshape_3d(ctx, logits, 1, V, n), ggml_reshape_2d(ctx, best, 1, n));   // [1, 1, n]
    ggml_tensor * below = ggml_step(ctx, ggml_neg(ctx, ggml_sub(ctx, logits, ggml_reshape_2d(ctx, max_l, 1, n))));   // 0 iff tied
    ggml_tensor * tied_rank = ggml_mul(ctx, ggml_scale_bias(ctx, below, -1.0f, 1.0f), ramp);   // n_vocab - i at ties, else 0
    return ggml_argmax(ctx, tied_rank);
}

void causal_mask(std::vector<uint16_t> & buf, int n_kv, int n_rows, int n_visible) {
    const uint16_t zero = ggml_fp32_to_fp16(0.0f), neg_inf = ggml_fp32_to_fp16(-INFINITY);
    buf.resize(size_t(n_kv) * size_t(n_rows));
    for (int i = 0; i < n_rows; ++i) {
        uint16_t * row = buf.data() + size_t(i) * size_t(n_kv);
        const int visible = std::clamp(n_visible + i, 0, n_kv);
        std::fill(row, row + visible, zero);
        std::fill(row + visible, row + n_kv, neg_inf);
    }
}

void tree_mask(std::vector<uint16_t> & buf, int n_kv, int n_rows, int n_past, const int32_t * parents) {
    const uint16_t zero = ggml_fp32_to_fp16(0.0f), neg_inf = ggml_fp32_to_fp16(-INFINITY);
    buf.resize(size_t(n_kv) * size_t(n_rows));
    for (int i = 0; i < n_rows; ++i) {
        uint16_t * row = buf.data() + size_t(i) * size_t(n_kv);
        std::fill(row, row + n_past, zero);
        std::fill(row + n_past, row + n_kv, neg_inf);
        for (int j = i; j >= 0; j = parents[j]) row[n_past + j] = zero;
    }
}

} // namespace luce
