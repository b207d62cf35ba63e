// graph_runner.h — what every context that computes graphs shares (the target Engine, the DFlash
// DraftContext, the PFlash Scorer): the model's device and a CPU fallback for the ops it lacks,
// one scheduler per graph kind, graphs kept while their shape key repeats (with build and reuse
// counts), the cancel exchange and the compute memory held. The contexts are policies over it:
// which graph a call needs, what its inputs hold, what its outputs mean.
#pragma once

#include "error.h"
#include "runtime.h"

#include "ggml-backend.h"
#include "ggml.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace luce {

class GraphRunner {
public:
    // n_kinds: graph kinds whose compute buffers must not evict each other (the draft's inject and
    // block graphs), each with a scheduler of its own. stop_on_cancel: a cancel also stops a CPU
    // graph between its nodes (not for graphs that update state in place, which would be left half
    // done).
    GraphRunner(ggml_backend_dev_t dev, int n_threads, size_t max_nodes, int n_kinds = 1, bool stop_on_cancel = true);
    ~GraphRunner();
    GraphRunner(const GraphRunner &) = delete;
    GraphRunner & operator=(const GraphRunner &) = delete;

    ggml_backend_t backend() const { return backend_; }           // the model's device
    ggml_backend_t cpu_backend() const { return cpu_backend_; }   // null when the device is the CPU
    bool on_cpu() const { return cpu_backend_ == nullptr; }
    const std::string & device_name() const { return device_name_; }
    ggml_backend_sched_t sched(int kind = 0);   // created on first use, again after release()

    // Sizes kind's compute buffers for gf, the largest graph it will run; throws LUCE_ERR_MEMORY
    // ("cannot reserve compute buffers for <what> on <device>").
    void reserve(ggml_cgraph * gf, int kind, const std::string & what);
    // Allocates gf's compute on kind's scheduler; throws LUCE_ERR_MEMORY.
    void allocate(ggml_cgraph * gf, int kind, const std::string & what);
    // Computes an allocated graph. ABORTED after a cancel stopped it (the request is then used up).
    ggml_status compute_status(ggml_cgraph * gf, int kind = 0);
    // The same, throwing LUCE_ERR_CANCELLED, or LUCE_ERR_COMPUTE ("<what> failed on <device>");
    // throw_on does that for a status computed elsewhere (a graph run in pieces).
    void compute(ggml_cgraph * gf, int kind, const char * what);
    void throw_on(ggml_status st, const char * what);
    // Frees kind's scheduler and its compute buffers (a scorer call gives them back when it ends).
    void release(int kind);
    uint64_t compute_bytes() const;   // compute buffers held, over all kinds and backends

    // A graph kept while its key repeats; G has a `gf`.
    template <class G, class Key> struct Cached {
        std::unique_ptr<G> graph;
        Key key{};
        void reset() { graph.reset(); }
    };
    // The cached graph for `key`: reused, or rebuilt (build() returns a unique_ptr<G>) and
    // allocated on kind's scheduler; before_alloc(G &) runs between the two (placing inputs).
    // describe() names the graph in an error (called only then: this runs every step). Returns
    // true when it was rebuilt.
    template <class G, class Key, class Describe, class Build, class BeforeAlloc>
    bool use(Cached<G, Key> & slot, const Key & key, int kind, Describe && describe, Build && build,
             BeforeAlloc && before_alloc) {
        if (slot.graph && slot.key == key) {
            n_reuses_++;
            return false;
        }
        slot.reset();
        std::unique_ptr<G> g = build();
        ggml_backend_sched_reset(sched(kind));
        before_alloc(*g);
        allocate(g->gf, kind, describe());
        slot.graph = std::move(g);
        slot.key = key;
        n_builds_++;
        return true;
    }
    template <class G, class Key, class Describe, class Build>
    bool use(Cached<G, Key> & slot, const Key & key, int kind, Describe && describe, Build && build) {
        return use(slot, key, kind, describe, build, [](G &) {});
    }
    int64_t n_builds() const { return n_builds_; }
    int64_t n_reuses() const { return n_reuses_; }

    void cancel() { cancel_.store(true); }
    void clear_cancel() { cancel_.store(false); }
    void throw_if_cancelled() { luce::throw_if_cancelled(cancel_); }

private:
    ggml_backend_t backend_ = nullptr, cpu_backend_ = nullptr;
    std::vector<ggml_backend_t> backends_;      // scheduler order: the device, then the CPU
    std::vector<ggml_backend_sched_t> scheds_;  // per kind; null until used
    size_t max_nodes_ = 0;
    std::string device_name_;
    std::atomic<bool> cancel_{false};
    int64_t n_builds_ = 0, n_reuses_ = 0;
};

// A causal F16 mask [n_kv, n_rows] in buf: row i sees columns [0, n_visible + i), the rest is -inf.
void causal_mask(std::vector<uint16_t> & buf, int n_kv, int n_rows, int n_visible);
// A tree verify's mask: row i sees the n_past context columns, then column n_past + j iff j is i or
// an ancestor of i (parents[0] = -1, parents[i] < i).
void tree_mask(std::vector<uint16_t> & buf, int n_kv, int n_rows, int n_past, const int32_t * parents);

} // namespace luce
