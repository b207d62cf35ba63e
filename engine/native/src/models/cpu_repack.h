// cpu_repack.h — ggml's CPU repacking of matmul weights (its "CPU_REPACK" extra buffer type, what
// llama.cpp's use_extra_bufts turns on): weights of the types its kernels take (Q4_0, Q4_K, IQ4_NL
// on x86 with AVX2) are copied out of the file's mapping into a buffer of that type, which stores
// them interleaved, rows in groups of 8, so its matmul kernels read them with few shuffles.
#pragma once

#include "gguf_file.h"
#include "model.h"

#include "ggml-backend.h"

#include <vector>

namespace luce {

struct CpuRepack {
    ggml_backend_buffer_t buffer = nullptr;        // the repacked weights (usage WEIGHTS), or null
    std::vector<TensorLoader::Entry> mapped;       // the entries left to map from the file
    int n_tensors = 0;                             // how many were repacked
    std::vector<bool> copied;                      // per copy: repacked (else left without data)
    uint64_t bytes = 0;                            // their size in the file
};

// Which of `entries` CPU device `dev` would repack: matmul weights only (token_embd.weight, read by
// get_rows, stays as it is). None without the buffer type (another backend, or a CPU without the
// kernels). Reads no data, so plans can ask too.
std::vector<bool> repackable(ggml_backend_dev_t dev, const std::vector<TensorLoader::Entry> & entries);

// Repacks what repackable() picks of `entries`, and every one of `copies` it can (new tensors filled
// from the file bytes at their offset: the tied LM head's copy of token_embd). Throws luce::Error
// through f.fail() when the buffer cannot be allocated.
CpuRepack repack_for_cpu(const GgufFile & f, ggml_backend_dev_t dev, const std::vector<TensorLoader::Entry> & entries,
                         const std::vector<TensorLoader::Entry> & copies);

} // namespace luce
