#include "weight_placement.h"
#include "device.h"
#include "error.h"

#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <algorithm>

namespace luce {

void count_weights(const std::vector<TensorLoader::Entry> & entries, uint64_t & bytes, uint64_t & n_params) {
    for (const auto & e : entries) {
        bytes += ggml_nbytes(e.tensor);
        n_params += uint64_t(ggml_nelements(e.tensor));
    }
}

static ggml_backend_buffer_t map_from_file(const GgufFile & f, const std::vector<TensorLoader::Entry> & entries) {
    size_t lo = SIZE_MAX, hi = 0;
    for (const auto & e : entries) {
        lo = std::min(lo, e.file_offset);
        hi = std::max(hi, e.file_offset + ggml_nbytes(e.tensor));
    }
    lo &= ~size_t(4095);
    ggml_backend_buffer_t buf = ggml_backend_cpu_buffer_from_ptr(const_cast<uint8_t *>(f.mapped_data(lo)), hi - lo);
    if (!buf) f.fail(LUCE_ERR_MEMORY, "cannot wrap the mapped file in a CPU buffer");
    for (const auto & e : entries) {
        void * addr = const_cast<uint8_t *>(f.mapped_data(e.file_offset));
        if (ggml_backend_tensor_alloc(buf, e.tensor, addr) != GGML_STATUS_SUCCESS) {
            ggml_backend_buffer_free(buf);
            f.fail(LUCE_ERR_FORMAT, std::string("tensor ") + e.tensor->name + " is misaligned in the file");
        }
    }
    return buf;
}

static ggml_backend_buffer_t copy_to_device(const GgufFile & f, ggml_backend_dev_t dev, const WeightLayout & layout,
                                            uint64_t weight_bytes, const std::string & what, const std::string & hint) {
    const std::string dev_name = ggml_backend_dev_name(dev);
    size_t free_b = 0, total_b = 0;
    ggml_backend_dev_memory(dev, &free_b, &total_b);
    if (!device_is_cpu(dev) && free_b > 0 && weight_bytes > free_b) {
        f.fail(LUCE_ERR_MEMORY, what + " need " + format_bytes(weight_bytes) + " but " + dev_name + " has " +
                                    format_bytes(free_b) + " free" + hint);
    }
    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
    const size_t align = ggml_backend_buft_get_alignment(buft);
    size_t total = 0;
    for (ggml_tensor * t : layout.alloc) total += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, t), align);
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(buft, std::max<size_t>(total, 1));
    if (!buf) f.fail(LUCE_ERR_MEMORY, "cannot allocate " + format_bytes(weight_bytes) + " for " + what + " on " + dev_name);
    ggml_tallocr talloc = ggml_tallocr_new(buf);
    for (ggml_tensor * t : layout.alloc) {
        if (ggml_tallocr_alloc(&talloc, t) != GGML_STATUS_SUCCESS) {
            ggml_backend_buffer_free(buf);
            f.fail(LUCE_ERR_MEMORY, std::string("cannot place weight ") + t->name + " in its buffer");
        }
    }
    for (ggml_tensor * v : layout.views) ggml_backend_view_init(v);
    for (const WeightUpload & u : layout.uploads) ggml_backend_tensor_set(u.dst, f.mapped_data(u.file_offset), u.dst_offset, u.nbytes);
    return buf;
}

ggml_backend_buffer_t place_weights(const GgufFile & f, ggml_backend_dev_t dev, bool use_mmap,
                                    const std::vector<TensorLoader::Entry> & entries, const WeightLayout & layout,
                                    uint64_t weight_bytes, const std::string & what, const std::string & hint) {
    ggml_backend_buffer_t buf = device_is_cpu(dev) && use_mmap ? map_from_file(f, entries)
                                                               : copy_to_device(f, dev, layout, weight_bytes, what, hint);
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    return buf;
}

} // namespace luce
