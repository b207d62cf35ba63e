"""The DFlash trainer's batches and loss (tools/dflash_train/train.py) on small hand-made sequences:
the device-side batch builder must give exactly the blocks the engine drafts at inference (anchor a:
x0 = tokens[a], context < a, labels tokens[a+1..a+B-1]), and the distillation loss must reduce to
the cross-entropy when the target's distribution is its greedy label. Needs PyTorch (the trainer's
own dependency; skipped where it is not installed)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tools.dflash_train.draft_torch import DFlashDraft, DraftConfig  # noqa: E402
from tools.dflash_train.train import GAMMA, FeatureCache, SeqBank, anchor_range, block_loss, make_batch  # noqa: E402

B = 8


def _seqs():
    rng = np.random.default_rng(5)
    out = []
    for i, (P, L, g) in enumerate([(5, 40, 0), (7, 12, 0), (4, 30, 9), (6, 9, 0)]):
        out.append({"id": i, "prompt_len": P, "greedy_start": P + g, "tokens": rng.integers(3, 60, L).tolist()})
    return out


def test_batch_blocks_match_inference_blocks():
    seqs = _seqs()
    bank = SeqBank(seqs, "cpu")
    rows = [0, 1, 2, 3]
    toks, anchors, labels, weight, lab_idx, pos_idx = make_batch(bank, rows, 6, B, np.random.default_rng(0))
    T = max(len(s["tokens"]) for s in seqs)
    assert toks.shape == (4, T) and anchors.shape == (4, 6) and labels.shape == weight.shape == (4, 6, B - 1)
    decay = np.exp(-np.arange(B - 1) / GAMMA)
    for r, i in enumerate(rows):
        t = seqs[i]["tokens"]
        assert toks[r, :len(t)].tolist() == t and set(toks[r, len(t):].tolist()) <= {2}
        assert (bank.flat[pos_idx[r, :len(t)]] == toks[r, :len(t)]).all()
        lo, hi = anchor_range(seqs[i])
        a_row = anchors[r].tolist()
        assert all(lo <= a <= hi for a in a_row)
        if hi - lo + 1 >= 6:
            assert len(set(a_row)) == 6                       # distinct where the range allows
        for j, a in enumerate(a_row):
            m = min(B - 1, len(t) - 1 - a)
            assert labels[r, j, :m].tolist() == t[a + 1:a + 1 + m]
            np.testing.assert_allclose(weight[r, j].numpy(), np.where(np.arange(B - 1) < m, decay, 0), rtol=1e-6)
            assert (bank.flat[lab_idx[r, j, :m]] == labels[r, j, :m]).all()


def test_batches_are_deterministic_from_the_seed():
    bank = SeqBank(_seqs(), "cpu")
    a = make_batch(bank, [2, 0], 5, B, np.random.default_rng(3))
    b = make_batch(bank, [2, 0], 5, B, np.random.default_rng(3))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


class _Tgt:
    def __init__(self, V, E):
        g = torch.Generator().manual_seed(0)
        self.token_embd = torch.randn(V, E, generator=g)
        self.output = torch.randn(V, E, generator=g)


def test_distillation_on_a_one_hot_target_is_the_cross_entropy():
    seqs = _seqs()
    bank = SeqBank(seqs, "cpu")
    V, E, K = 64, 32, 4
    cfg = DraftConfig(n_embd=E, n_layer=1, n_head=2, n_head_kv=1, head_dim=16, n_ff=48, block_size=B,
                      capture=(0, 1), mask_token_id=1)
    draft = DFlashDraft(cfg, seed=0)
    fc = FeatureCache.__new__(FeatureCache)
    N = int(bank.offset[-1])
    fc.flat = torch.randn(N, 2 * E, generator=torch.Generator().manual_seed(1))
    # the target's top-K at position p: the next token first, with an overwhelming logit
    nxt = torch.cat([bank.flat[1:], bank.flat[:1]])
    fc.topi = torch.stack([nxt] + [(nxt + k) % V for k in range(1, K)], dim=1)
    fc.topv = torch.tensor([[60.0] + [0.0] * (K - 1)]).expand(N, K).clone()
    batch = make_batch(bank, [0, 2], 4, B, np.random.default_rng(0))
    tgt = _Tgt(V, E)
    hard, acc = block_loss(draft, tgt, fc, batch, soft_weight=0.0)
    mixed, _ = block_loss(draft, tgt, fc, batch, soft_weight=0.5)
    assert torch.isfinite(hard) and 0 <= float(acc) <= 1
    torch.testing.assert_close(mixed, hard, rtol=1e-5, atol=1e-5)
    fc.topv[:, 0] = 0.0                                            # a flat target: a different loss
    flat, _ = block_loss(draft, tgt, fc, batch, soft_weight=0.5)
    assert abs(float(flat.detach()) - float(hard.detach())) > 1e-3
