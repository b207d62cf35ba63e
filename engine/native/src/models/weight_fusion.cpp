#include "weight_fusion.h"

#include <map>
#include <string>

namespace luce {

namespace {

struct Planner {
    Model & m;
    std::map<const ggml_tensor *, size_t> file_offset;
    std::map<const ggml_tensor *, bool> fused_away;
    WeightLayout out;

    // Fuses *parts (null entries skipped) into one [E, Σ rows] tensor; records part offsets.
    ggml_tensor * fuse(const std::string & name, std::vector<ggml_tensor **> parts, std::vector<int64_t> & offsets) {
        ggml_tensor * first = *parts.front();
        int64_t rows = 0;
        for (ggml_tensor ** p : parts) rows += (*p)->ne[1];
        ggml_tensor * fused = ggml_new_tensor_2d(m.ctx, first->type, first->ne[0], rows);
        ggml_set_name(fused, name.c_str());
        out.alloc.push_back(fused);
        int64_t row = 0;
        for (ggml_tensor ** p : parts) {
            ggml_tensor * part = *p;
            const size_t offs = size_t(row) * fused->nb[1];
            ggml_tensor * view = ggml_view_2d(m.ctx, fused, part->ne[0], part->ne[1], fused->nb[1], offs);
            ggml_set_name(view, part->name);
            out.views.push_back(view);
            out.uploads.push_back({fused, offs, file_offset.at(part), ggml_nbytes(part)});
            fused_away[part] = true;
            offsets.push_back(row);
            row += part->ne[1];
            *p = view;
        }
        return fused;
    }
};

bool same_input_matrix(const ggml_tensor * a, const ggml_tensor * b) {
    return a && b && a->type == b->type && a->ne[0] == b->ne[0] && ggml_n_dims(a) == 2 && ggml_n_dims(b) == 2;
}

} // namespace

WeightLayout plan_weight_layout(Model & m, const std::vector<TensorLoader::Entry> & entries, bool enable) {
    Planner p{m, {}, {}, {}};
    for (auto & e : entries) p.file_offset[e.tensor] = e.file_offset;
    if (enable && m.hp.hybrid()) {
        for (size_t il = 0; il < m.layers.size(); ++il) {
            LayerWeights & L = m.layers[il];
            const std::string blk = "blk." + std::to_string(il) + ".";
            if (same_input_matrix(L.ffn_gate, L.ffn_up) && !L.ffn_gate_b && !L.ffn_up_b) {
                std::vector<int64_t> offs;
                L.ffn_gate_up.w = p.fuse(blk + "ffn_gate_up", {&L.ffn_gate, &L.ffn_up}, offs);
                L.ffn_gate_up.offset = offs;
            }
            if (L.ssm_gate) {   // DeltaNet input projections: those of the gate's type, in graph order
                std::vector<ggml_tensor **> parts;
                std::vector<int> which;
                ggml_tensor ** cand[4] = {&L.ssm_qkv, &L.ssm_gate, &L.ssm_beta, &L.ssm_alpha};
                for (int i = 0; i < 4; ++i) {
                    if (same_input_matrix(*cand[i], L.ssm_gate)) {
                        parts.push_back(cand[i]);
                        which.push_back(i);
                    }
                }
                if (parts.size() >= 2) {
                    std::vector<int64_t> offs;
                    L.ssm_in.w = p.fuse(blk + "ssm_in", parts, offs);
                    L.ssm_in.offset.assign(4, -1);
                    for (size_t j = 0; j < which.size(); ++j) L.ssm_in.offset[size_t(which[j])] = offs[j];
                }
            }
        }
    }
    for (auto & e : entries) {
        if (p.fused_away.count(e.tensor)) continue;
        p.out.alloc.push_back(e.tensor);
        p.out.uploads.push_back({e.tensor, 0, e.file_offset, ggml_nbytes(e.tensor)});
    }
    return p.out;
}

WeightLayout plain_weight_layout(const std::vector<TensorLoader::Entry> & entries) {
    WeightLayout out;
    for (auto & e : entries) {
        out.alloc.push_back(e.tensor);
        out.uploads.push_back({e.tensor, 0, e.file_offset, ggml_nbytes(e.tensor)});
    }
    return out;
}

ggml_tensor * fused_rows(ggml_context * ctx, ggml_tensor * out, int64_t offset, int64_t rows) {
    return ggml_view_2d(ctx, out, rows, out->ne[1], out->nb[1], size_t(offset) * ggml_element_size(out));
}

} // namespace luce
