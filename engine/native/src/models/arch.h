// arch.h — the table of architectures a target model may have: one row per architecture, each
// defined in its family's file (dense.cpp: llama, qwen3; qwen35.cpp). Adding an architecture is
// one file and one row in archs.cpp. (DFlash drafts and the PFlash scorer are models of their own:
// draft_model.h, scorer.h.)
#pragma once

#include "graph.h"
#include "model.h"

#include <memory>
#include <string>

namespace luce {

struct ArchOps {
    const char * name;                                           // general.architecture
    void (*load_hparams)(const GgufFile & f, HParams & hp);      // checks every key it reads
    void (*declare_tensors)(TensorLoader & tl, Model & m);       // every weight, checked by name, shape, type
    std::unique_ptr<ForwardGraph> (*build_graph)(const Model & m, const ContextState & kv, GraphShape shape);
    bool hybrid;                 // has recurrent (DeltaNet) layers: state rollback, no graph abort
    bool scorer;                 // usable as the PFlash scorer (dense attention in every layer)
    // File tensors it knows and leaves unused (qwen35's MTP layers); null: every tensor is declared.
    bool (*extra_tensor)(const std::string & name, int n_layer);
};

extern const ArchOps k_arch_llama, k_arch_qwen3, k_arch_qwen35;

const ArchOps * find_arch(const std::string & name);   // null when unsupported
std::string supported_archs();                          // "llama, qwen3, qwen35"

} // namespace luce
