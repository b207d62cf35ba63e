// memory_plan.h — the one "does it fit" rule of every plan (luce_memory_plan): what the device
// must hold against what it can give, the same for the engine, the scorer and luce-chat --plan.
#pragma once

#include "luce.h"

#include "ggml-backend.h"

namespace luce {

// Sets total, device_free, device_need and device_budget from the plan's rows. weights_resident:
// the weights are already in device memory (a loaded model on a GPU), so the budget counts them.
void finish_plan(luce_memory_plan & plan, ggml_backend_dev_t dev, bool weights_resident);
// Recomputes total and need after a row changed (a measured compute buffer).
void update_plan_totals(luce_memory_plan & plan, bool on_cpu);
inline bool plan_fits(const luce_memory_plan & p) { return p.device_free == 0 || p.device_need <= p.device_budget; }
// What is left of the budget for rows that grow with the context, given what does not.
inline uint64_t plan_spare(const luce_memory_plan & p, uint64_t fixed) { return p.device_budget > fixed ? p.device_budget - fixed : 0; }

} // namespace luce
