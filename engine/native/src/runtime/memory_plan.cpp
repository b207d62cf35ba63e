// memory_plan.cpp — see memory_plan.h.
#include "memory_plan.h"
#include "device.h"

namespace luce {

void update_plan_totals(luce_memory_plan & p, bool on_cpu) {
    p.total = p.weights + p.kv_cache + p.recurrent + p.compute + p.outputs;
    p.device_need = p.total - (on_cpu ? 0 : p.outputs);   // off the CPU the logits live in host memory
}

void finish_plan(luce_memory_plan & p, ggml_backend_dev_t dev, bool weights_resident) {
    const bool on_cpu = device_is_cpu(dev);
    update_plan_totals(p, on_cpu);
    size_t free_b = 0, total_b = 0;
    ggml_backend_dev_memory(dev, &free_b, &total_b);
    p.device_free = free_b;
    // Mapped weights on the CPU are page cache, which the free memory already counts.
    p.device_budget = free_b + (weights_resident && !on_cpu ? p.weights : 0);
}

} // namespace luce
