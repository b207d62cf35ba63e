// archs.cpp — the architecture table (arch.h).
#include "arch.h"

namespace luce {

static const ArchOps * const k_archs[] = {&k_arch_llama, &k_arch_qwen3, &k_arch_qwen35};

const ArchOps * find_arch(const std::string & name) {
    for (const ArchOps * a : k_archs) if (name == a->name) return a;
    return nullptr;
}

std::string supported_archs() {
    std::string s;
    for (const ArchOps * a : k_archs) s += (s.empty() ? "" : ", ") + std::string(a->name);
    return s;
}

std::unique_ptr<ForwardGraph> build_graph(const Model & m, const ContextState & kv, GraphShape shape) {
    return m.ops->build_graph(m, kv, shape);
}

} // namespace luce
