// weight_fusion.h — projections that read the same input and share a weight type, stored back to
// back in one device tensor so that a layer runs one matmul instead of several.
//
// Why: at the batch sizes of speculative verification (≈16 rows) every ggml-cuda matmul pays a
// fixed cost (activation quantization, stream-k fix-up, launch) on top of reading its weights;
// the small DeltaNet projections (beta, alpha: 48 rows each) cost about as much as large ones.
// Fusing [qkv | gate | beta | alpha] and [ffn_gate | ffn_up] removes three of those per layer.
//
// Only for weights copied into a buffer (devices, or no mmap): mmap'd CPU weights stay views of
// the file. Each part stays reachable as a view of the fused tensor (same name, same data), so
// code that reads a part directly keeps working. On a CPU the fused matmul computes every output
// row exactly as the separate ones do.
#pragma once

#include "model.h"

#include <vector>

namespace luce {

struct WeightUpload {        // bytes of one file tensor into (part of) an allocated tensor
    ggml_tensor * dst;
    size_t dst_offset, file_offset, nbytes;
};

struct WeightLayout {
    std::vector<ggml_tensor *> alloc;     // tensors that own memory in the weight buffer
    std::vector<ggml_tensor *> views;     // fused parts: views to initialise after allocation
    std::vector<WeightUpload> uploads;
};

// Fuses where it helps (hybrid models; `enable` false: a plain layout) and rewires m.layers.
WeightLayout plan_weight_layout(Model & m, const std::vector<TensorLoader::Entry> & entries, bool enable);
// Every file tensor as it is (what a draft gets).
WeightLayout plain_weight_layout(const std::vector<TensorLoader::Entry> & entries);

// Output rows [offset, offset + rows) of a fused projection's result [total, n], as a [rows, n] view.
ggml_tensor * fused_rows(ggml_context * ctx, ggml_tensor * out, int64_t offset, int64_t rows);

} // namespace luce
