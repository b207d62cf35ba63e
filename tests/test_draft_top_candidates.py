"""DraftModel.top_candidates: the tree's per-depth top-k computed on the draft's device equals
ddtree.top_candidates (numpy) on the same downloaded logits — the same tokens except where logits
tie exactly, full-vocabulary log-probabilities within 1e-5 (CPU; float32: a few ulps where those
exceed it) — for several k, temperatures and
depths, rows sorted best first (ties: lower token id first), so build_tree gets the same tree."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from luce_engine import Engine, EngineStateError, InvalidArgumentError
from luce_engine.ddtree import build_tree, log_softmax, top_candidates
from reference import DEVICE
from test_shipped_draft import _prompts, draft, model  # noqa: F401  (its model and draft fixtures)
from tools.dflash_train.prompt_ids import PromptEncoder
from luce_engine import default_model_path

LP_ATOL = 1e-5 if DEVICE == "cpu" else 1e-3
# The log-probabilities come back as float32: at T = 0.05 they reach -400, where one ulp is 3e-5,
# so beyond the absolute 1e-5 a relative 1e-6 (a few ulps) is allowed.
LP_RTOL = 1e-6


def drafted(model, draft, prompt):
    """A draft block after `prompt`, its features injected from the engine's capture rings."""
    eng = Engine(model, n_ctx=512)
    eng.set_capture(list(draft.capture_layers), output=True, ring_size=512)
    draft.reset()
    eng.prefill(prompt)
    draft.inject_captured(eng, 0, eng.n_past)
    draft.draft(eng.argmax(), eng.n_past)
    return draft.logits()


@pytest.fixture(scope="module")
def prompts():
    return _prompts(PromptEncoder(default_model_path()), 2)


def test_device_top_k_equals_numpy_top_k(model, draft, prompts):
    for p in prompts:
        logits = drafted(model, draft, p)
        for k, temperature, n_depth in itertools.product((1, 5, 16, 63), (1.0, 0.6, 1.7, 0.05),
                                                         (draft.block_size - 1, 3)):
            toks, lp = draft.top_candidates(k, temperature, n_depth)
            ref_toks, ref_lp = top_candidates(logits[1:1 + n_depth], k, temperature)
            assert toks.shape == lp.shape == ref_toks.shape == (n_depth, k)
            x = logits[1:1 + n_depth] / np.float32(temperature)
            rows = np.arange(n_depth)[:, None]
            # the same tokens, or a token whose logit ties exactly with the reference's
            assert np.all((toks == ref_toks) | (x[rows, toks] == x[rows, ref_toks]))
            np.testing.assert_allclose(lp, ref_lp, rtol=LP_RTOL, atol=LP_ATOL)
            full = log_softmax(x)
            np.testing.assert_allclose(lp, full[rows, toks], rtol=LP_RTOL, atol=LP_ATOL)
            for r in range(n_depth):
                assert len(set(toks[r].tolist())) == k
                # best first; equal log-probs by ascending token id
                assert all(lp[r, i] > lp[r, i + 1] or (lp[r, i] == lp[r, i + 1] and toks[r, i] < toks[r, i + 1])
                           for i in range(k - 1))
            if k > 1:
                tree = build_tree(0, toks, lp, budget=k, max_depth=n_depth)
                ref_tree = build_tree(0, ref_toks, ref_lp, budget=k, max_depth=n_depth)
                assert len(tree) == len(ref_tree) == k + 1
                assert all(tree.parents[i] < i for i in range(1, len(tree)))
                if np.array_equal(toks, ref_toks):
                    assert tree.tokens == ref_tree.tokens


def test_k_above_the_vocabulary_is_clamped(model, draft, prompts):
    logits = drafted(model, draft, prompts[0])
    toks, lp = draft.top_candidates(draft.n_vocab + 10, 1.0, 1)
    assert toks.shape == (1, draft.n_vocab)
    assert sorted(toks[0].tolist()) == list(range(draft.n_vocab))
    np.testing.assert_allclose(np.exp(lp[0].astype(np.float64)).sum(), 1.0, rtol=1e-5)
    np.testing.assert_allclose(lp[0], log_softmax(logits[1])[toks[0]], rtol=LP_RTOL, atol=LP_ATOL)


def test_bad_arguments_are_clear_errors(model, draft, prompts):
    drafted(model, draft, prompts[0])
    with pytest.raises(ValueError, match="k must be"):
        draft.top_candidates(0)
    for t in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            draft.top_candidates(4, t)
    for n in (0, draft.block_size):
        with pytest.raises(ValueError, match="n_depth"):
            draft.top_candidates(4, 1.0, n)
    core = draft._core   # the native checks behind the Python ones
    with pytest.raises(InvalidArgumentError, match="rows"):
        core.top_candidates(1, draft.block_size, 4, 1.0)
    with pytest.raises(InvalidArgumentError, match="top-k needs k"):
        core.top_candidates(1, 2, draft.n_vocab + 1, 1.0)
    with pytest.raises(InvalidArgumentError, match="temperature"):
        core.top_candidates(1, 2, 4, float("inf"))


def test_before_any_block_there_is_nothing_to_rank(model):
    from luce_engine import DraftModel
    from luce_engine.default_draft import shipped_draft_path

    fresh = DraftModel(shipped_draft_path(), model)
    with pytest.raises(EngineStateError, match="no draft logits"):
        fresh.top_candidates(4)
