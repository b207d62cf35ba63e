// tree_recurrence_check.cu — the hybrid tree verify's recurrence kernel (engine/native/cuda/
// tree_recurrence.h) alone on this GPU, without the engine (bench/gpu suite `tree_kernel`):
//   1. every node's output against a float64 recurrence along its root path, on the host;
//   2. every node's output against the same kernel run as a chain over that node's path (the
//      state stack must not change a bit);
//   3. the time of one launch per DeltaNet layer (48, the 27B's: H = 48, S = 128, Hk = 16) for trees
//      and chains of 16, 23 and 33 nodes (CUDA events, median of 20).
// Build: bash bench/gpu/build_tree_recurrence_check.sh [OUT]; run: OUT (exit status 1 on a mismatch).
#include "tree_nodes.h"
#include "tree_recurrence.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

using luce::cuda::TreeRecurrence;

namespace {

constexpr int S = 128, H = 48, HK = 16, LAYERS = 48;

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); std::exit(2); } } while (0)

struct Inputs {   // n nodes: q, k [S, HK, n] (L2-normed per head), v [S, H, n], g, beta [H, n]
    int n;
    std::vector<float> q, k, v, g, beta;
};

Inputs random_inputs(int n, std::mt19937 & rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    Inputs in{n, std::vector<float>(size_t(S) * HK * n), std::vector<float>(size_t(S) * HK * n), std::vector<float>(size_t(S) * H * n),
              std::vector<float>(size_t(H) * n), std::vector<float>(size_t(H) * n)};
    for (auto * x : {&in.q, &in.k}) {
        for (size_t r = 0; r < x->size() / S; ++r) {
            double ss = 0;
            for (int i = 0; i < S; ++i) ss += double((*x)[r * S + i] = nd(rng)) * (*x)[r * S + i];
            for (int i = 0; i < S; ++i) (*x)[r * S + i] = float((*x)[r * S + i] / std::sqrt(ss));
        }
    }
    for (float & x : in.v) x = nd(rng);
    for (float & x : in.g) x = -std::log1p(std::exp(nd(rng)));   // log decay < 0, as softplus(.) * a with a = -1
    for (float & x : in.beta) x = 1.0f / (1.0f + std::exp(-nd(rng)));
    return in;
}

// The inputs of the nodes `pick`, in that order (a path as a chain).
Inputs gather(const Inputs & in, const std::vector<int> & pick) {
    Inputs out{int(pick.size()), {}, {}, {}, {}, {}};
    for (int node : pick) {
        out.q.insert(out.q.end(), in.q.begin() + size_t(node) * S * HK, in.q.begin() + size_t(node + 1) * S * HK);
        out.k.insert(out.k.end(), in.k.begin() + size_t(node) * S * HK, in.k.begin() + size_t(node + 1) * S * HK);
        out.v.insert(out.v.end(), in.v.begin() + size_t(node) * S * H, in.v.begin() + size_t(node + 1) * S * H);
        out.g.insert(out.g.end(), in.g.begin() + size_t(node) * H, in.g.begin() + size_t(node + 1) * H);
        out.beta.insert(out.beta.end(), in.beta.begin() + size_t(node) * H, in.beta.begin() + size_t(node + 1) * H);
    }
    return out;
}

struct Device {   // device copies of one Inputs, the state, the outputs, the visits and the stack
    float *q, *k, *v, *g, *beta, *state, *out, *stack;
    int32_t * plan;
    int n, slots;
};

template <class T>
T * upload(const std::vector<T> & x) {
    T * d = nullptr;
    CHECK(cudaMalloc(&d, x.size() * sizeof(T)));
    CHECK(cudaMemcpy(d, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

Device to_device(const Inputs & in, const std::vector<float> & state, const luce::TreeNodes & plan) {
    Device d{upload(in.q), upload(in.k), upload(in.v), upload(in.g), upload(in.beta), upload(state), nullptr, nullptr,
             upload(plan.visits), in.n, std::max(plan.slots, 1)};
    CHECK(cudaMalloc(&d.out, size_t(S) * H * in.n * sizeof(float)));
    CHECK(cudaMalloc(&d.stack, luce::cuda::tree_recurrence_stack_bytes(d.slots, S, H)));
    return d;
}

void release(Device & d) {
    for (void * p : {(void *) d.q, (void *) d.k, (void *) d.v, (void *) d.g, (void *) d.beta, (void *) d.state, (void *) d.out,
                     (void *) d.stack, (void *) d.plan}) cudaFree(p);
}

TreeRecurrence call_of(const Device & d) {
    TreeRecurrence r{};
    r.q = d.q;
    r.k = d.k;
    r.v = d.v;
    r.qk_head_stride = S;
    r.qk_node_stride = int64_t(S) * HK;
    r.v_head_stride = S;
    r.v_node_stride = int64_t(S) * H;
    r.g = d.g;
    r.beta = d.beta;
    r.state = d.state;
    r.out = d.out;
    r.plan = d.plan;
    r.stack = d.stack;
    r.S = S;
    r.H = H;
    r.Hk = HK;
    r.n = d.n;
    r.scale = 1.0f / std::sqrt(float(S));
    return r;
}

std::vector<float> run(const Device & d) {
    CHECK(cudaMemset(d.out, 0xff, size_t(S) * H * d.n * sizeof(float)));   // NaN: an unwritten output shows
    if (luce::cuda::tree_recurrence(call_of(d), nullptr) != 0) { std::printf("launch failed\n"); std::exit(2); }
    CHECK(cudaDeviceSynchronize());
    std::vector<float> out(size_t(S) * H * d.n);
    CHECK(cudaMemcpy(out.data(), d.out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
}

std::vector<int> path_of(const std::vector<int32_t> & parents, int node) {
    std::vector<int> p;
    for (int v = node; v >= 0; v = parents[size_t(v)]) p.push_back(v);
    std::reverse(p.begin(), p.end());
    return p;
}

// node's output [S, H] by a float64 recurrence along its path (the committed state, then each node)
std::vector<double> reference(const Inputs & in, const std::vector<float> & state, const std::vector<int> & path) {
    std::vector<double> out(size_t(S) * H);
    std::vector<double> st(size_t(S) * S);
    for (int h = 0; h < H; ++h) {
        for (size_t i = 0; i < st.size(); ++i) st[i] = state[size_t(h) * S * S + i];   // [col][row]
        for (int node : path) {
            const float * q = &in.q[(size_t(node) * HK + h % HK) * S];
            const float * k = &in.k[(size_t(node) * HK + h % HK) * S];
            const float * v = &in.v[(size_t(node) * H + h) * S];
            const double decay = std::exp(double(in.g[size_t(node) * H + h])), b = in.beta[size_t(node) * H + h];
            for (int c = 0; c < S; ++c) {
                double * col = &st[size_t(c) * S];
                double kv = 0;
                for (int i = 0; i < S; ++i) kv += (col[i] *= decay) * k[i];
                const double delta = (v[c] - kv) * b;
                double o = 0;
                for (int i = 0; i < S; ++i) o += (col[i] += k[i] * delta) * q[i];
                out[size_t(h) * S + c] = o / std::sqrt(double(S));
            }
        }
    }
    return out;
}

luce::TreeNodes chain_plan(int n) {
    std::vector<int32_t> parents(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) parents[size_t(i)] = i - 1;
    return luce::tree_nodes(parents.data(), n, 4);
}

// a DDTree-like shape: each node's parent among the last few nodes (best-first trees grow along
// their likeliest paths)
std::vector<int32_t> tree_parents(int n, std::mt19937 & rng) {
    std::vector<int32_t> p(size_t(n), -1);
    for (int i = 1; i < n; ++i) p[size_t(i)] = std::max(0, i - 1 - int(rng() % 4));
    return p;
}

float time_layers(const Device & d) {   // ms of LAYERS launches, median of 20
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    const TreeRecurrence r = call_of(d);
    for (int l = 0; l < LAYERS; ++l) luce::cuda::tree_recurrence(r, nullptr);   // warm-up
    std::vector<float> ms;
    for (int rep = 0; rep < 20; ++rep) {
        CHECK(cudaEventRecord(a));
        for (int l = 0; l < LAYERS; ++l) luce::cuda::tree_recurrence(r, nullptr);
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float t = 0;
        CHECK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

} // namespace

int main() {
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, S = %d, H = %d, Hk = %d\n", prop.name, S, H, HK);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.1f);
    std::vector<float> state(size_t(S) * S * H);
    for (float & x : state) x = nd(rng);
    bool ok = true;
    for (int n : {16, 23, 33}) {
        const std::vector<int32_t> parents = tree_parents(n, rng);
        const luce::TreeNodes plan = luce::tree_nodes(parents.data(), n, 4);
        const Inputs in = random_inputs(n, rng);
        Device tree = to_device(in, state, plan);
        const std::vector<float> got = run(tree);
        double worst = 0;
        int same_as_chain = 0;
        for (int node = 0; node < n; ++node) {
            const std::vector<int> path = path_of(parents, node);
            const std::vector<double> want = reference(in, state, path);
            double scale = 0, diff = 0;
            for (size_t i = 0; i < want.size(); ++i) {
                scale = std::max(scale, std::fabs(want[i]));
                diff = std::max(diff, std::fabs(want[i] - double(got[size_t(node) * S * H + i])));
            }
            worst = std::max(worst, diff / scale);
            Device chain = to_device(gather(in, path), state, chain_plan(int(path.size())));
            const std::vector<float> by_chain = run(chain);
            same_as_chain += std::memcmp(&by_chain[(path.size() - 1) * S * H], &got[size_t(node) * S * H], sizeof(float) * S * H) == 0;
            release(chain);
        }
        const bool pass = worst < 1e-4 && same_as_chain == n;
        ok &= pass;
        Device chain_n = to_device(in, state, chain_plan(n));
        std::printf("n = %2d (%d stack slots): max rel diff against float64 %.2e; outputs equal to the chain of the node's path: "
                    "%d / %d nodes; %d layers: tree %.3f ms, chain of %d %.3f ms  %s\n",
                    n, plan.slots, worst, same_as_chain, n, LAYERS, time_layers(tree), n, time_layers(chain_n), pass ? "ok" : "MISMATCH");
        release(tree);
        release(chain_n);
    }
    return ok ? 0 : 1;
}
