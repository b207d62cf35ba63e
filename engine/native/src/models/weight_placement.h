// weight_placement.h — the declared weights of a model or a draft put where they run: on a CPU
// with mmap a buffer that is a window onto the file's mapping (nothing copied), elsewhere a buffer
// of the device that the file's bytes are copied into, in the layout weight_fusion.h planned.
#pragma once

#include "weight_fusion.h"

#include <string>
#include <vector>

namespace luce {

// Bytes and parameters of the declared weights.
void count_weights(const std::vector<TensorLoader::Entry> & entries, uint64_t & bytes, uint64_t & n_params);

// The weight buffer (usage WEIGHTS). `layout` (device copies only) says which tensors own memory
// and what goes where; `what` names the weights in errors ("weights", "draft weights"), `hint`
// ends the message when they do not fit the device. Throws luce::Error through f.fail().
ggml_backend_buffer_t place_weights(const GgufFile & f, ggml_backend_dev_t dev, bool use_mmap,
                                    const std::vector<TensorLoader::Entry> & entries, const WeightLayout & layout,
                                    uint64_t weight_bytes, const std::string & what, const std::string & hint);

} // namespace luce
