// small_batch_runner_cuda.cpp — the CUDA implementation of small_batch_runner.h.
#include "small_batch_runner.h"

#include "small_batch_gemm.h"
#include "tree_recurrence.h"

#include "api_guard.h"
#include "graph_views.h"
#include "tree_recurrence_op.h"

#include "ggml.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// ggml-backend.h leaves ggml_backend_event opaque. The pinned ggml (llama-cpp-python 0.3.36,
// ggml-backend-impl.h) defines it as below, and its CUDA backend keeps a cudaEvent_t in `context`.
// Only cuda_event() reads it, and make_small_batch_runner() checks the layout before use.
struct ggml_backend_event {
    ggml_backend_dev_t device;
    void * context;
};

// The same header's backend object, and the first members of the CUDA backend's context
// (ggml-cuda/common.cuh, ggml_backend_cuda_context), to find the stream ggml computes on. Only
// ggml_compute_stream() reads them, and it checks each step (see there).
struct ggml_backend_layout {
    void * guid;
    void * iface[16];   // struct ggml_backend_i: 16 function pointers
    ggml_backend_dev_t device;
    void * context;
};
struct ggml_cuda_context_head {
    int device;
    std::string name;
    cudaEvent_t copy_event;
    cudaStream_t streams[16][8];   // [GGML_CUDA_MAX_DEVICES][GGML_CUDA_MAX_STREAMS], created on first use
};

namespace luce {
namespace {

constexpr int kMinTokens = kSmallBatchMinTokens;

cudaEvent_t cuda_event(ggml_backend_event_t ev) { return static_cast<cudaEvent_t>(ev->context); }

// The stream ggml's CUDA backend computes on, or null when it cannot be found for sure. Our kernels
// queued there need no events between ggml's pieces and ours. The layout above is trusted only when
// the backend's device and its context's name (the very string ggml_backend_name() returns) are where
// it says; the stream is then proven to be ggml's: while it is being captured, an event that ggml
// records on its own stream must pull `other`, which waits on that event, into the capture.
cudaStream_t ggml_compute_stream(ggml_backend_t backend, int device, ggml_backend_event_t probe, ggml_backend_event_t back,
                                 cudaStream_t other) {
    const auto * b = reinterpret_cast<const ggml_backend_layout *>(backend);
    if (b->device != ggml_backend_get_device(backend) || !b->context) return nullptr;
    const auto * head = static_cast<const ggml_cuda_context_head *>(b->context);
    if (head->device != device || head->name.c_str() != ggml_backend_name(backend)) return nullptr;
    ggml_backend_synchronize(backend);   // creates the stream if no work ran yet
    cudaStream_t s = head->streams[device][0];
    if (!s) return nullptr;
    cudaSetDevice(device);
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    ggml_backend_event_record(probe, backend);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const bool joined = cudaStreamWaitEvent(other, cuda_event(probe), 0) == cudaSuccess &&
                        cudaStreamIsCapturing(other, &status) == cudaSuccess && status == cudaStreamCaptureStatusActive;
    if (joined) {   // the capture must end with `other` joined back
        cudaEventRecord(cuda_event(back), other);
        cudaStreamWaitEvent(s, cuda_event(back), 0);
    }
    cudaGraph_t g = nullptr;
    const bool ended = cudaStreamEndCapture(s, &g) == cudaSuccess;
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    // leave both events recorded outside any capture, and nothing pending
    cudaEventRecord(cuda_event(probe), other);
    cudaEventRecord(cuda_event(back), other);
    const bool idle = cudaStreamSynchronize(other) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
    cudaGetLastError();
    return joined && ended && idle ? s : nullptr;
}

static_assert(cuda::kTypeQ80 == GGML_TYPE_Q8_0 && cuda::kTypeQ4K == GGML_TYPE_Q4_K && cuda::kTypeQ6K == GGML_TYPE_Q6_K,
              "small_batch_gemm.h's type numbers are ggml's");

const ggml_tensor * storage(const ggml_tensor * t) { return t->view_src ? t->view_src : t; }

// Names the key nodes of the pieces captured into a step graph, unique in the process (see Piece).
std::atomic<unsigned long long> g_step_capture_serial{0};

// A matmul our kernels compute exactly as ggml defines it: quantized 2D weights in device memory
// with aligned rows, f32 activations and output with contiguous columns, kMinTokens..max_tokens columns.
bool replaceable(const ggml_tensor * t, KernelScope scope, int max_tokens) {
    if (t->op != GGML_OP_MUL_MAT) return false;
    const ggml_tensor * w = t->src[0];
    const ggml_tensor * x = t->src[1];
    if (!cuda::small_gemm_supports(int(w->type)) || x->type != GGML_TYPE_F32 || t->type != GGML_TYPE_F32) return false;
    if (w->ne[2] != 1 || w->ne[3] != 1 || x->ne[2] != 1 || x->ne[3] != 1) return false;
    if (x->ne[1] < kMinTokens || x->ne[1] > max_tokens || !small_batch_kernels_take(w, scope, x->ne[1]) || x->ne[0] != w->ne[0]) return false;
    if (w->nb[0] != ggml_type_size(w->type) || x->nb[0] != sizeof(float) || t->nb[0] != sizeof(float)) return false;
    if (x->nb[1] % sizeof(float) != 0 || t->nb[1] % sizeof(float) != 0) return false;
    // Q4_K: 16-byte block headers; Q8_0, Q4_1: 4-byte words at known offsets of 272- / 160-byte steps; Q6_K: 2-byte fields
    const size_t align = w->type == GGML_TYPE_Q4_K ? 16 : w->type == GGML_TYPE_Q8_0 || w->type == GGML_TYPE_Q4_1 ? 4 : 2;
    if (reinterpret_cast<uintptr_t>(w->data) % align != 0 || w->nb[1] % align != 0) return false;
    const ggml_backend_buffer_t wbuf = storage(w)->buffer;
    return wbuf && !ggml_backend_buffer_is_host(wbuf) && w->data && x->data && t->data;
}

bool on_device(const ggml_tensor * t) {
    const ggml_backend_buffer_t buf = storage(t)->buffer;
    return buf && !ggml_backend_buffer_is_host(buf) && t->data;
}

// A tree recurrence node (tree_recurrence_op.h) the tree kernel computes: f32 q, k, v with
// contiguous rows, contiguous g, beta and state [S, S, H, 1], the visits I32 [3 n], all on the device.
bool tree_replaceable(const ggml_tensor * t) {
    if (!is_tree_recurrence_node(t)) return false;
    const ggml_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2], *g = t->src[3], *beta = t->src[4], *state = t->src[5],
                      *visits = t->src[kTreeVisitsSrc];
    const int64_t S = v->ne[0], H = v->ne[1], n = v->ne[2];
    for (const ggml_tensor * x : {q, k, v, g, beta, state}) {
        if (x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) || !on_device(x)) return false;
    }
    return cuda::tree_recurrence_supports(S) && n >= 1 && n <= kTreeNodesMax && v->ne[3] == 1 && q->ne[3] == 1 &&
           q->ne[0] == S && k->ne[0] == S && q->ne[1] == k->ne[1] && q->ne[1] > 0 && H % q->ne[1] == 0 && q->ne[2] == n &&
           q->nb[1] == k->nb[1] && q->nb[2] == k->nb[2] && q->nb[1] % sizeof(float) == 0 && q->nb[2] % sizeof(float) == 0 &&
           v->nb[1] % sizeof(float) == 0 && v->nb[2] % sizeof(float) == 0 &&
           ggml_is_contiguous(g) && ggml_is_contiguous(beta) && ggml_nelements(g) == H * n && ggml_nelements(beta) == H * n &&
           ggml_is_contiguous(state) && ggml_nelements(state) == S * S * H && t->type == GGML_TYPE_F32 && on_device(t) &&
           visits->type == GGML_TYPE_I32 && ggml_nelements(visits) == 3 * n && on_device(visits);
}

cuda::TreeRecurrence tree_of(const ggml_tensor * t, float * stack) {
    const ggml_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    cuda::TreeRecurrence r{};
    r.q = static_cast<const float *>(q->data);
    r.k = static_cast<const float *>(k->data);
    r.v = static_cast<const float *>(v->data);
    r.qk_head_stride = int64_t(q->nb[1] / sizeof(float));
    r.qk_node_stride = int64_t(q->nb[2] / sizeof(float));
    r.v_head_stride = int64_t(v->nb[1] / sizeof(float));
    r.v_node_stride = int64_t(v->nb[2] / sizeof(float));
    r.g = static_cast<const float *>(t->src[3]->data);
    r.beta = static_cast<const float *>(t->src[4]->data);
    r.state = static_cast<const float *>(t->src[5]->data);
    r.out = static_cast<float *>(t->data);
    r.plan = static_cast<const int32_t *>(t->src[kTreeVisitsSrc]->data);
    r.stack = stack;
    r.S = int(v->ne[0]);
    r.H = int(v->ne[1]);
    r.Hk = int(q->ne[1]);
    r.n = int(v->ne[2]);
    r.scale = 1.0f / std::sqrt(float(v->ne[0]));   // as ggml's host code computes it
    return r;
}

cuda::SmallGemm gemm_of(const ggml_tensor * t, int n_sm) {
    const ggml_tensor * w = t->src[0];
    const ggml_tensor * x = t->src[1];
    cuda::SmallGemm g{};
    g.type = int(w->type);
    g.w = w->data;
    g.nrows = w->ne[1];
    g.k = w->ne[0];
    g.row_bytes = w->nb[1];
    g.x = static_cast<const float *>(x->data);
    g.x_stride = int64_t(x->nb[1] / sizeof(float));
    g.n = int(x->ne[1]);
    g.y = static_cast<float *>(t->data);
    g.y_stride = int64_t(t->nb[1] / sizeof(float));
    g.n_sm = n_sm;
    return g;
}

class CudaSmallBatchRunner final : public SmallBatchRunner {
    // ggml's pieces are views_ (graph_views.h: ggml fuses within them as in the whole graph). For
    // the capture of a step graph they go behind their key nodes: ggml keeps a CUDA graph per first
    // node and replays it once it has seen the same nodes twice, and a replay (or ggml's own capture)
    // inside our capture is not allowed. Key nodes renamed before each capture make ggml see new
    // nodes, so it launches their kernels one by one, into our capture.
    struct Piece {
        int begin, end;   // node range [begin, end)
        bool ours;        // our matmuls, or ggml's nodes
        int view;         // ggml's: the index in views_
    };

public:
    CudaSmallBatchRunner(ggml_backend_t backend, int device, int n_sm, ggml_backend_event_t to_ours, ggml_backend_event_t to_ggml,
                         cudaStream_t stream, bool step_graphs, KernelScope scope, int max_tokens)
        : backend_(backend), device_(device), n_sm_(n_sm), to_ours_(to_ours), to_ggml_(to_ggml), stream_(stream),
          step_graphs_(step_graphs), scope_(scope), max_tokens_(max_tokens) {
        // Debug switch (like ggml's GGML_CUDA_DISABLE_GRAPHS, read once here): LUCE_SMALL_BATCH_CHECK=1
        // compares each of our matmuls with ggml's on a graph's first compute (see check_against_ggml).
        const char * c = std::getenv("LUCE_SMALL_BATCH_CHECK");
        check_ = c && std::string(c) == "1";
        // ggml's stream when it can be found: on the H200, 16-token verify 19.26 against 19.64 ms with
        // a stream of our own (bench/RESULTS.md)
        ggml_stream_ = ggml_compute_stream(backend, device, to_ours, to_ggml, stream);
    }

    ~CudaSmallBatchRunner() override {
        if (check_ctx_) ggml_free(check_ctx_);
        cudaSetDevice(device_);
        drop_step_graph();
        if (scratch_) cudaFree(scratch_);
        if (stack_) cudaFree(stack_);
        if (stream_) cudaStreamDestroy(stream_);
        ggml_backend_event_free(to_ours_);
        ggml_backend_event_free(to_ggml_);
    }

    bool wants(int n) const override { return n >= kMinTokens && n <= max_tokens_; }
    bool takes_tree_nodes(int64_t S, int n) const override { return cuda::tree_recurrence_supports(S) && n >= 1 && n <= kTreeNodesMax; }

    void place_input(ggml_backend_sched_t sched, ggml_tensor * input) override {
        if (input) ggml_backend_sched_set_tensor_backend(sched, input, backend_);
    }

    bool prepare(ggml_backend_sched_t sched, ggml_cgraph * gf, bool capture_alone) override {
        pieces_.clear();
        n_replaced_ = 0;
        drop_step_graph();
        capture_next_ = false;
        const int n_nodes = ggml_graph_n_nodes(gf);
        if (n_nodes == 0 || ggml_backend_sched_get_n_splits(sched) != 1 ||
            ggml_backend_sched_get_tensor_backend(sched, ggml_graph_node(gf, 0)) != backend_) {
            return false;
        }
        size_t need = 0, stack_need = 0;
        int n_trees = 0;
        for (int i = 0; i < n_nodes; ++i) {
            const ggml_tensor * t = ggml_graph_node(gf, i);
            const bool tree = tree_replaceable(t);
            // a tree node this runner cannot compute leaves the graph to ggml, which would run a chain
            if (!tree && is_tree_recurrence_node(t)) return false;
            const bool ours = tree || replaceable(t, scope_, max_tokens_);
            if (tree) {
                ++n_trees;
                const ggml_tensor * v = t->src[2];
                stack_need = std::max(stack_need, tree_nodes_stack_bound(int(v->ne[2]), v->ne[0], v->ne[1]));
            } else if (ours) {
                ++n_replaced_;
                need = std::max(need, cuda::small_gemm_scratch_bytes(t->src[0]->ne[0], int(t->src[1]->ne[1])));
            }
            if (pieces_.empty() || pieces_.back().ours != ours) pieces_.push_back({i, i, ours, -1});
            pieces_.back().end = i + 1;
        }
        // Without a matmul of ours a batch is still worth taking when it can be captured: ggml's own
        // CUDA graphs stop at batches over one token, so a dense verify (SmolLM2's Q4_1, F16) would
        // otherwise pay every launch of every step.
        if (n_replaced_ == 0 && n_trees == 0 && !(capture_alone && step_graphs_ && ggml_stream_ && !check_)) return false;
        n_replaced_ += n_trees;
        std::vector<std::pair<int, int>> ranges;
        for (Piece & p : pieces_) {
            if (p.ours) continue;
            p.view = int(ranges.size());
            ranges.push_back({p.begin, p.end});
        }
        if (!views_.build(gf, ranges, /*keyed=*/true)) return false;
        if (check_) {   // one-node graphs for ggml's results
            if (check_ctx_) ggml_free(check_ctx_);
            ggml_init_params ip{size_t(n_replaced_) * ggml_graph_overhead_custom(1, false) + 1024, nullptr, true};
            check_ctx_ = ggml_init(ip);
            if (!check_ctx_) return false;
        }
        checked_ = false;
        if (need > scratch_bytes_) {
            cudaSetDevice(device_);
            if (scratch_) cudaFree(scratch_);
            scratch_ = nullptr;
            scratch_bytes_ = 0;
            if (cudaMalloc(&scratch_, need) != cudaSuccess || cudaMemset(scratch_, 0, need) != cudaSuccess) {   // zero counters
                cudaGetLastError();
                if (scratch_) cudaFree(scratch_);
                scratch_ = nullptr;
                return false;   // the scheduler computes this graph instead
            }
            scratch_bytes_ = need;
        }
        if (stack_need > stack_bytes_) {
            cudaSetDevice(device_);
            if (stack_) cudaFree(stack_);
            stack_ = nullptr;
            stack_bytes_ = 0;
            if (cudaMalloc(&stack_, stack_need) != cudaSuccess) {
                cudaGetLastError();
                stack_ = nullptr;
                return false;
            }
            stack_bytes_ = stack_need;
        }
        return true;
    }

    // The first compute of a prepared graph runs in pieces (ggml's memory pool grows to what the
    // graph needs), the second captures the step graph, the rest replay it.
    ggml_status compute(ggml_cgraph * gf) override {
        ggml_status st;
        if (step_exec_) {
            ran_ = Ran::replayed;
            st = launch_step_graph();
        } else if (capture_next_) {
            st = capture_step_graph(gf);
        } else {
            ran_ = Ran::pieces;
            st = launch_pieces(gf, false);
            capture_next_ = st == GGML_STATUS_SUCCESS && step_graphs_ && ggml_stream_ && !check_;
        }
        // on success and failure alike nothing may still run when the caller reads or rebuilds
        cudaSetDevice(device_);
        cudaStreamSynchronize(stream_);
        ggml_backend_synchronize(backend_);
        if (st != GGML_STATUS_SUCCESS) return st;
        return cudaGetLastError() == cudaSuccess ? GGML_STATUS_SUCCESS : GGML_STATUS_FAILED;
    }

    Ran last_ran() const override { return ran_; }

    // Captures every piece on ggml's stream as one CUDA graph and launches it. Where the capture
    // fails, the pieces run as before and this graph is not captured again.
    ggml_status capture_step_graph(ggml_cgraph * gf) {
        capture_next_ = false;
        ran_ = Ran::pieces;
        const unsigned long long serial = ++g_step_capture_serial;
        for (size_t i = 0; i < views_.size(); ++i) ggml_format_name(views_.key(i), "luce step graph %llu", serial);
        cudaSetDevice(device_);
        if (cudaStreamBeginCapture(ggml_stream_, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
            cudaGetLastError();
            return launch_pieces(gf, false);
        }
        const ggml_status queued = launch_pieces(gf, true);
        cudaGraph_t graph = nullptr;
        const bool ended = cudaStreamEndCapture(ggml_stream_, &graph) == cudaSuccess && graph;
        cudaGraphExec_t exec = nullptr;
        const bool made = queued == GGML_STATUS_SUCCESS && ended && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
        if (graph) cudaGraphDestroy(graph);
        if (!made) {
            if (exec) cudaGraphExecDestroy(exec);
            cudaGetLastError();
            return launch_pieces(gf, false);
        }
        step_exec_ = exec;
        ran_ = Ran::captured;
        return launch_step_graph();
    }

    ggml_status launch_step_graph() {
        cudaSetDevice(device_);
        return cudaGraphLaunch(step_exec_, ggml_stream_) == cudaSuccess ? GGML_STATUS_SUCCESS : GGML_STATUS_FAILED;
    }

    void drop_step_graph() {
        if (!step_exec_) return;
        cudaSetDevice(device_);
        cudaGraphExecDestroy(step_exec_);
        step_exec_ = nullptr;
    }

    // Queues every piece: ggml's on its stream; ours there too when it was found (stream order alone
    // orders them), else on stream_, ordered by two events. capturing: ggml's pieces behind their key
    // nodes (only ever with ggml's stream found).
    ggml_status launch_pieces(ggml_cgraph * gf, bool capturing) {
        const bool own_stream = !ggml_stream_;
        for (const Piece & p : pieces_) {
            if (!p.ours) {
                ggml_cgraph * g = capturing ? views_.keyed_view(size_t(p.view)) : views_.view(size_t(p.view));
                const ggml_status st = ggml_backend_graph_compute_async(backend_, g);
                if (st != GGML_STATUS_SUCCESS) return st;
                continue;
            }
            // our stream starts when ggml's has produced the inputs; ggml's continues after ours
            if (own_stream) ggml_backend_event_record(to_ours_, backend_);
            cudaSetDevice(device_);
            if (own_stream && cudaStreamWaitEvent(stream_, cuda_event(to_ours_), 0) != cudaSuccess) return GGML_STATUS_FAILED;
            if (launch_matmuls(gf, p, own_stream ? stream_ : ggml_stream_) != GGML_STATUS_SUCCESS) return GGML_STATUS_FAILED;
            if (own_stream) {
                if (cudaEventRecord(cuda_event(to_ggml_), stream_) != cudaSuccess) return GGML_STATUS_FAILED;
                ggml_backend_event_wait(backend_, to_ggml_);
            }
            if (check_ && !checked_) check_against_ggml(gf, p);
        }
        checked_ = true;
        return GGML_STATUS_SUCCESS;
    }

    // Our matmuls of piece p on `stream`.
    ggml_status launch_matmuls(ggml_cgraph * gf, const Piece & p, cudaStream_t stream) {
        const ggml_tensor * quantized = nullptr;   // consecutive matmuls of one input share its quantization
        for (int i = p.begin; i < p.end; ++i) {
            const ggml_tensor * t = ggml_graph_node(gf, i);
            if (is_tree_recurrence_node(t)) {
                if (cuda::tree_recurrence(tree_of(t, static_cast<float *>(stack_)), stream) != 0) return GGML_STATUS_FAILED;
                continue;
            }
            const cuda::SmallGemm g = gemm_of(t, n_sm_);
            if (t->src[1] != quantized) {
                if (cuda::small_gemm_quantize(g, scratch_, stream) != 0) return GGML_STATUS_FAILED;
                quantized = t->src[1];
            }
            if (cuda::small_gemm_multiply(g, scratch_, stream) != 0) return GGML_STATUS_FAILED;
        }
        return GGML_STATUS_SUCCESS;
    }

    int n_replaced() const override { return n_replaced_; }

    // LUCE_SMALL_BATCH_CHECK=1 (a debug switch, slow): on a graph's first compute, each of our matmuls
    // is recomputed by ggml, which keeps its result, and the relative difference goes to stderr.
    void check_against_ggml(ggml_cgraph * gf, const Piece & p) {
        ggml_backend_synchronize(backend_);
        for (int i = p.begin; i < p.end; ++i) {
            ggml_tensor * t = ggml_graph_node(gf, i);
            if (is_tree_recurrence_node(t)) continue;   // ggml would compute a chain over the nodes
            const size_t n = size_t(t->ne[0]) * size_t(t->ne[1]);
            std::vector<float> ours(n), ref(n);
            ggml_backend_tensor_get(t, ours.data(), 0, n * sizeof(float));
            ggml_cgraph * one = ggml_new_graph_custom(check_ctx_, 1, false);
            ggml_graph_add_node(one, t);
            ggml_backend_graph_compute(backend_, one);
            ggml_backend_tensor_get(t, ref.data(), 0, n * sizeof(float));
            double diff = 0, scale = 0;
            for (size_t e = 0; e < n; ++e) {
                diff = std::max(diff, double(std::fabs(ours[e] - ref[e])));
                scale = std::max(scale, double(std::fabs(ref[e])));
            }
            std::fprintf(stderr, "luce small-batch check: %-28s %s [%lld x %lld] x %lld cols: max diff %.3e of max %.3e (%.2e)\n",
                         t->name, ggml_type_name(t->src[0]->type), (long long) t->src[0]->ne[0], (long long) t->src[0]->ne[1],
                         (long long) t->ne[1], diff, scale, scale > 0 ? diff / scale : diff);
        }
    }
    size_t scratch_bytes() const override { return scratch_bytes_; }

private:
    GraphViews views_;
    ggml_context * check_ctx_ = nullptr;   // LUCE_SMALL_BATCH_CHECK's one-node graphs
    ggml_backend_t backend_;
    int device_;
    int n_sm_;   // multiprocessors: the kernels' grids are sized by them
    ggml_backend_event_t to_ours_, to_ggml_;
    cudaStream_t stream_;
    void * scratch_ = nullptr;
    size_t scratch_bytes_ = 0;
    void * stack_ = nullptr;   // the tree kernel's state stack
    size_t stack_bytes_ = 0;
    std::vector<Piece> pieces_;
    int n_replaced_ = 0;
    bool check_ = false, checked_ = false;
    cudaStream_t ggml_stream_ = nullptr;   // ggml's, where ours run when found
    bool step_graphs_;
    KernelScope scope_;
    int max_tokens_;
    bool capture_next_ = false;             // the next compute captures the step graph
    cudaGraphExec_t step_exec_ = nullptr;   // the prepared graph as one CUDA graph, once captured
    Ran ran_ = Ran::pieces;

};

// The CUDA device index of a ggml device of the CUDA registry, or -1.
int cuda_device_index(ggml_backend_dev_t dev) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    if (!reg || std::strcmp(ggml_backend_reg_name(reg), "CUDA") != 0) return -1;
    for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) {
        if (ggml_backend_reg_dev_get(reg, i) == dev) return int(i);
    }
    return -1;
}

} // namespace

std::unique_ptr<SmallBatchRunner> make_small_batch_runner(ggml_backend_t backend, bool step_graphs, KernelScope scope, int max_tokens) {
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    const int device = dev ? cuda_device_index(dev) : -1;
    if (device < 0) return nullptr;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major * 10 + prop.minor < cuda::kSmallGemmMinCC) {
        cudaGetLastError();
        return nullptr;
    }
    ggml_backend_event_t a = ggml_backend_event_new(dev);
    ggml_backend_event_t b = ggml_backend_event_new(dev);
    // the layout check: both fields as ggml-backend-impl.h has them, and a live CUDA event inside
    const bool layout_ok = a && b && a->device == dev && b->device == dev && a->context && b->context &&
                           cudaEventQuery(cuda_event(a)) == cudaSuccess && cudaEventQuery(cuda_event(b)) == cudaSuccess;
    cudaStream_t stream = nullptr;
    if (layout_ok) {
        cudaSetDevice(device);
        if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) stream = nullptr;
    }
    if (!layout_ok || !stream) {
        cudaGetLastError();
        if (a) ggml_backend_event_free(a);
        if (b) ggml_backend_event_free(b);
        return nullptr;
    }
    max_tokens = std::clamp(max_tokens, kMinTokens, cuda::kSmallGemmMaxCols);
    return std::make_unique<CudaSmallBatchRunner>(backend, device, prop.multiProcessorCount, a, b, stream, step_graphs, scope, max_tokens);
}

} // namespace luce

extern "C" luce_status luce_cuda_small_gemm(int32_t device, int32_t ggml_type, const void * w, int64_t nrows, int64_t k,
                                            const float * x, int32_t n, float * y, int32_t row_tiles, int32_t k_splits,
                                            int32_t blocks_per_sm) {
    using luce::Error;
    return luce::guarded([&] {
        REQUIRE(w && x && y && nrows > 0 && k > 0, "weights, activations and output are required");
        REQUIRE(luce::cuda::small_gemm_supports(ggml_type), "the small-batch kernels take Q4_K, Q6_K, Q8_0 and Q4_1 weights");
        REQUIRE(luce::cuda::small_gemm_takes(ggml_type, k), luce::cuda::small_gemm_k_multiple(ggml_type) == 64 ? "k must be a multiple of 64 for Q8_0 and Q4_1"
                                                                                                              : "k must be a multiple of 256 for Q4_K and Q6_K");
        REQUIRE(n >= 1 && n <= luce::cuda::kSmallGemmMaxCols, "n must be 1..32");
        cudaDeviceProp prop{};
        if (cudaSetDevice(device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
            prop.major * 10 + prop.minor < luce::cuda::kSmallGemmMinCC) {
            cudaGetLastError();
            throw Error(LUCE_ERR_UNSUPPORTED, "CUDA device " + std::to_string(device) + " cannot run the small-batch kernels");
        }
        const size_t row_bytes = luce::cuda::small_gemm_row_bytes(ggml_type, k);
        const size_t w_bytes = row_bytes * size_t(nrows), x_bytes = sizeof(float) * size_t(k) * size_t(n),
                     y_bytes = sizeof(float) * size_t(nrows) * size_t(n);
        const size_t s_bytes = luce::cuda::small_gemm_scratch_bytes(k, n);
        void *dw = nullptr, *dx = nullptr, *dy = nullptr, *ds = nullptr;
        auto release = [&] { for (void * p : {dw, dx, dy, ds}) if (p) cudaFree(p); };
        bool ok = cudaMalloc(&dw, w_bytes) == cudaSuccess && cudaMalloc(&dx, x_bytes) == cudaSuccess &&
                  cudaMalloc(&dy, y_bytes) == cudaSuccess && cudaMalloc(&ds, s_bytes) == cudaSuccess && cudaMemset(ds, 0, s_bytes) == cudaSuccess &&
                  cudaMemcpy(dw, w, w_bytes, cudaMemcpyHostToDevice) == cudaSuccess &&
                  cudaMemcpy(dx, x, x_bytes, cudaMemcpyHostToDevice) == cudaSuccess;
        if (ok) {
            luce::cuda::SmallGemm g{ggml_type, dw, nrows, k, row_bytes, static_cast<const float *>(dx), k, n,
                                    static_cast<float *>(dy), nrows, prop.multiProcessorCount};
            const luce::cuda::SmallGemmGeometry geometry{row_tiles, k_splits, blocks_per_sm};
            // twice on one scratch (a split call that left its counters set would spoil the second),
            // the output poisoned with NaN before each, so an output the kernel leaves unwritten shows
            ok = luce::cuda::small_gemm_quantize(g, ds, nullptr) == 0;
            for (int pass = 0; ok && pass < 2; ++pass) {
                ok = cudaMemset(dy, 0xff, y_bytes) == cudaSuccess && luce::cuda::small_gemm_multiply(g, ds, nullptr, geometry) == 0;
            }
            ok = ok &&
                 cudaMemcpy(y, dy, y_bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
        }
        const cudaError_t err = cudaGetLastError();
        release();
        if (!ok) throw Error(LUCE_ERR_DEVICE, std::string("small-batch GEMM failed: ") + cudaGetErrorString(err));
    });
}
