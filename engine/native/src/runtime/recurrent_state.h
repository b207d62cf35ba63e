// recurrent_state.h — the DeltaNet layers' state (qwen35): conv window and recurrent state per
// layer, what a verification keeps to roll them back, and the turn checkpoints that let a
// truncation resume from a saved state instead of the start.
//
// Rollback of a verify: the batch's conv input window [Kc-1+n_verify_max, C] is kept, and either
// the state after each token [S, S, Hv, n_verify_max] (snapshots; slot s = s tokens before the
// last), or, rolling back by replay (luce_engine_params.rollback, docs/algorithms.md §1.6), the
// batch's decay and beta [Hv, n_verify_max], from which commit(k) recomputes the state of k tokens:
// 1/S² of the snapshots' memory, a recurrence per commit.
#pragma once

#include "logit_rows.h"
#include "model.h"

#include <cstdint>
#include <vector>

namespace luce {

struct RecurrentState {
    std::vector<ggml_tensor *> conv, ssm;   // per layer; F32, null for attention layers
    std::vector<ggml_tensor *> conv_hist, ssm_snap, replay_g, replay_beta;   // rollback, per layer
    int n_verify_max = 0;
    bool replay = false;

    // States + rollback buffers (0 for a dense model).
    static uint64_t bytes(const HParams & hp, int n_verify_max, bool replay);
    void declare(ggml_context * ctx, const HParams & hp, int n_verify_max, bool replay);   // headers
    void clear() const;                                   // zero the states (start of a context)
    void save(std::vector<uint8_t> & out) const;          // conv + state of every layer, to the host
    void load(const std::vector<uint8_t> & in) const;
};

// States saved at turn boundaries (luce_engine_checkpoint), ascending by position, at most kMax.
class TurnCheckpoints {
public:
    struct Checkpoint {
        int32_t n_past = 0;
        std::vector<uint8_t> state;   // RecurrentState::save
        LogitRows::Saved logits;      // last row at that point (argmax -1 if none)
    };
    static constexpr size_t kMax = 8;
    void add(Checkpoint cp);                       // replaces any at or after cp.n_past
    void drop_after(int32_t n);                    // those past position n are stale
    const Checkpoint * last() const { return list_.empty() ? nullptr : &list_.back(); }
    void clear() { list_.clear(); }

private:
    std::vector<Checkpoint> list_;
};

} // namespace luce
