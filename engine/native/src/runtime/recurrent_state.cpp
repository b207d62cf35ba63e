// recurrent_state.cpp — see recurrent_state.h.
#include "recurrent_state.h"

#include "ggml-backend.h"

namespace luce {

uint64_t RecurrentState::bytes(const HParams & hp, int n_verify_max, bool replay) {
    uint64_t total = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!hp.is_recurrent(il)) continue;
        const uint64_t state = uint64_t(hp.ssm_state) * hp.ssm_state * hp.ssm_heads;
        total += 4ull * (uint64_t(hp.ssm_conv - 1) * hp.conv_channels() + state);
        if (n_verify_max > 0) {
            const uint64_t per_token = replay ? 2ull * hp.ssm_heads : state;   // decay and beta, or a snapshot
            total += 4ull * (uint64_t(hp.ssm_conv - 1 + n_verify_max) * hp.conv_channels() + per_token * n_verify_max);
        }
    }
    return total;
}

void RecurrentState::declare(ggml_context * ctx, const HParams & hp, int n_verify_max_in, bool replay_in) {
    n_verify_max = n_verify_max_in;
    replay = replay_in && n_verify_max > 0 && hp.hybrid();
    const bool rollback = n_verify_max > 0 && hp.hybrid();
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!hp.is_recurrent(il)) {
            for (auto * list : {&conv, &ssm, &conv_hist, &ssm_snap, &replay_g, &replay_beta}) list->push_back(nullptr);
            continue;
        }
        conv.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm_conv - 1, hp.conv_channels()));
        ssm.push_back(ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hp.ssm_state, hp.ssm_state, hp.ssm_heads, 1));
        ggml_format_name(conv.back(), "conv_state_l%d", il);
        ggml_format_name(ssm.back(), "ssm_state_l%d", il);
        conv_hist.push_back(rollback ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm_conv - 1 + n_verify_max, hp.conv_channels())
                                     : nullptr);
        ssm_snap.push_back(rollback && !replay
                               ? ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hp.ssm_state, hp.ssm_state, hp.ssm_heads, n_verify_max)
                               : nullptr);
        replay_g.push_back(replay ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm_heads, n_verify_max) : nullptr);
        replay_beta.push_back(replay ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm_heads, n_verify_max) : nullptr);
    }
}

void RecurrentState::clear() const {
    for (ggml_tensor * t : conv) if (t) ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));
    for (ggml_tensor * t : ssm) if (t) ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));
}

void RecurrentState::save(std::vector<uint8_t> & out) const {
    out.clear();
    for (size_t il = 0; il < conv.size(); ++il) {
        for (ggml_tensor * t : {conv[il], ssm[il]}) {
            if (!t) continue;
            const size_t at = out.size();
            out.resize(at + ggml_nbytes(t));
            ggml_backend_tensor_get(t, out.data() + at, 0, ggml_nbytes(t));
        }
    }
}

void RecurrentState::load(const std::vector<uint8_t> & in) const {
    size_t at = 0;
    for (size_t il = 0; il < conv.size(); ++il) {
        for (ggml_tensor * t : {conv[il], ssm[il]}) {
            if (!t) continue;
            ggml_backend_tensor_set(t, in.data() + at, 0, ggml_nbytes(t));
            at += ggml_nbytes(t);
        }
    }
}

void TurnCheckpoints::add(Checkpoint cp) {
    while (!list_.empty() && list_.back().n_past >= cp.n_past) list_.pop_back();
    list_.push_back(std::move(cp));
    if (list_.size() > kMax) list_.erase(list_.begin());
}

void TurnCheckpoints::drop_after(int32_t n) {
    while (!list_.empty() && list_.back().n_past > n) list_.pop_back();
}

} // namespace luce
