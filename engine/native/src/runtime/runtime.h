// runtime.h — what every runner (Engine, DraftContext, Scorer) shares: timing, the attended-length
// granularity, the cancel exchange and the device-side greedy argmax.
#pragma once

#include "error.h"

#include "ggml.h"

#include <atomic>
#include <chrono>

namespace luce {

using clock_type = std::chrono::steady_clock;
inline double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// Cache and attended-key lengths come in steps of this (as llama.cpp's get_n_kv), so a graph is
// reused while the context grows within a step.
constexpr int kCtxPad = 256;
inline int round_up(int x, int to) { return (x + to - 1) / to * to; }

// Verifies of this many widths keep a graph each (Engine's verify slots): `--spec auto` alternates
// chains and trees of a few widths, and one graph for all rebuilt (on a GPU recaptured) it at every
// change of mode, 7-13 ms against a 1.2 ms step (SmolLM2, H100).
constexpr int kVerifyGraphs = 3;

// A cancel requested from another thread (luce_*_cancel) stops the caller here, once.
inline void throw_if_cancelled(std::atomic<bool> & flag) {
    if (flag.exchange(false)) throw Error(LUCE_ERR_CANCELLED, "cancelled");
}

// Argmax per row of logits [V, n] with ties going to the lowest id, as the host sampler and
// llama.cpp's greedy sampler do; ramp is [V] = V - i (graph_runner.cpp). on_cpu: the graph runs on
// the CPU backend, where one pass of our own does it and gives -1 for a row that is not finite
// (then logits_finite() is not needed).
ggml_tensor * greedy_argmax(ggml_context * ctx, ggml_tensor * logits, ggml_tensor * ramp, bool on_cpu);

} // namespace luce
