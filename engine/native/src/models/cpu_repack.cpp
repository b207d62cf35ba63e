#include "cpu_repack.h"

#include "device.h"
#include "error.h"

#include "ggml-alloc.h"
#include "ggml-cpu.h"

#include <cstring>

namespace luce {
namespace {

ggml_backend_buffer_type_t repack_buffer_type(ggml_backend_dev_t dev) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    auto extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
        reg ? ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts") : nullptr);
    if (!extra) return nullptr;
    for (ggml_backend_buffer_type_t * b = extra(dev); b && *b; ++b) {
        if (std::strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
    }
    return nullptr;
}

// The question llama.cpp asks of a weight: would the device run a matmul reading it from a buffer
// of this type? (The repack type answers for its own tensor types and shapes.)
bool runs_matmul_from(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft, ggml_backend_buffer_t probe, ggml_tensor * w) {
    ggml_init_params ip{ggml_tensor_overhead() * 4, nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    if (!ctx) return false;
    ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w->ne[0], 1);
    ggml_tensor * op = ggml_mul_mat(ctx, w, x);
    ggml_backend_buffer_t saved = w->buffer;
    w->buffer = probe;
    const bool ok = ggml_backend_dev_supports_op(dev, op) && ggml_backend_buft_get_alloc_size(buft, w) > 0;
    w->buffer = saved;
    ggml_free(ctx);
    return ok;
}

} // namespace

std::vector<bool> repackable(ggml_backend_dev_t dev, const std::vector<TensorLoader::Entry> & entries) {
    std::vector<bool> out(entries.size(), false);
    ggml_backend_buffer_type_t buft = device_is_cpu(dev) ? repack_buffer_type(dev) : nullptr;
    ggml_backend_buffer_t probe = buft ? ggml_backend_buft_alloc_buffer(buft, 0) : nullptr;
    if (!probe) return out;
    for (size_t i = 0; i < entries.size(); ++i) {
        ggml_tensor * t = entries[i].tensor;
        const bool matmul_weight = ggml_n_dims(t) == 2 && std::strcmp(t->name, "token_embd.weight") != 0;
        out[i] = matmul_weight && runs_matmul_from(dev, buft, probe, t);
    }
    ggml_backend_buffer_free(probe);
    return out;
}

CpuRepack repack_for_cpu(const GgufFile & f, ggml_backend_dev_t dev, const std::vector<TensorLoader::Entry> & entries,
                         const std::vector<TensorLoader::Entry> & copies) {
    CpuRepack r;
    const std::vector<bool> pick = repackable(dev, entries), pick_copy = repackable(dev, copies);
    std::vector<const TensorLoader::Entry *> chosen;
    for (size_t i = 0; i < entries.size(); ++i) {
        if (pick[i]) chosen.push_back(&entries[i]);
        else r.mapped.push_back(entries[i]);
    }
    for (size_t i = 0; i < copies.size(); ++i) {
        if (pick_copy[i]) chosen.push_back(&copies[i]);
    }
    r.copied = pick_copy;
    if (chosen.empty()) return r;

    ggml_backend_buffer_type_t buft = repack_buffer_type(dev);
    const size_t align = ggml_backend_buft_get_alignment(buft);
    size_t total = 0;
    for (const auto * e : chosen) total += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, e->tensor), align);
    r.buffer = ggml_backend_buft_alloc_buffer(buft, total);
    if (!r.buffer) f.fail(LUCE_ERR_MEMORY, "cannot allocate " + format_bytes(total) + " for the repacked CPU weights");
    ggml_tallocr talloc = ggml_tallocr_new(r.buffer);
    for (const auto * e : chosen) {
        if (ggml_tallocr_alloc(&talloc, e->tensor) != GGML_STATUS_SUCCESS) {
            ggml_backend_buffer_free(r.buffer);
            f.fail(LUCE_ERR_MEMORY, std::string("cannot place weight ") + e->tensor->name + " in the repack buffer");
        }
        // the buffer type rearranges the blocks as they are set
        ggml_backend_tensor_set(e->tensor, f.mapped_data(e->file_offset), 0, ggml_nbytes(e->tensor));
        r.bytes += ggml_nbytes(e->tensor);
        ++r.n_tensors;
    }
    ggml_backend_buffer_set_usage(r.buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    return r;
}

} // namespace luce
