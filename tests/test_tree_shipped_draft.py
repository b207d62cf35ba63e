"""Tree speculation with the shipped DFlash draft on the real SmolLM2-135M (llama): greedy output
equals plain greedy on held-out prompts of the draft's corpus (near-ties reported with their margins,
as test_shipped_draft.py does for the chain), with real acceptance, and a tree accepts at least as
much per step as the chain of the same draft pass."""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import Engine, default_model_path
from luce_engine.speculative import ChainSpeculator
from luce_engine.tree_speculative import TreeSpeculator
from test_shipped_draft import NEAR_TIE, _prompts, draft, model  # noqa: F401  (its model and draft fixtures)
from tools.dflash_train.prompt_ids import PromptEncoder

N_PROMPTS, N_TOKENS, BUDGET = 12, 64, 16


def generate(model, p, spec_factory=None):
    eng = Engine(model, n_ctx=512, n_verify_max=BUDGET + 1)
    spec = spec_factory(eng) if spec_factory else None
    out, drafted = [], []
    for r in eng.generate(p, max_tokens=N_TOKENS, stop_token_ids=(), speculator=spec):
        out += r.tokens
        drafted += r.drafted
    return out, drafted, spec

def test_greedy_tree_equals_plain_on_real_prompts(model, draft):
    near_ties, steps, tree_steps, chain_steps = [], 0, 0, 0
    for k, p in enumerate(_prompts(PromptEncoder(default_model_path()), N_PROMPTS)):
        plain, _, _ = generate(model, p)
        got, drafted, spec = generate(model, p, lambda e: TreeSpeculator(e, draft, budget=BUDGET))
        _, _, chain = generate(model, p, lambda e: ChainSpeculator(e, draft))
        assert len(got) == N_TOKENS and sum(drafted) == spec.stats.n_accepted
        tree_steps += spec.stats.n_steps
        chain_steps += chain.stats.n_steps
        if got != plain:
            j = next(i for i in range(N_TOKENS) if got[i] != plain[i])
            ref = Engine(model, n_ctx=512)
            ref.prefill(p + plain[:j])
            top2 = np.sort(ref.logits())[-2:]
            margin = (top2[1] - top2[0]) / abs(top2[1])
            assert margin <= NEAR_TIE, f"prompt {k}: diverged at token {j} with a clear margin {margin:.3g}"
            near_ties.append((k, j, float(margin)))
    assert len(near_ties) <= 1, near_ties
    if near_ties:
        print(f"near-ties (prompt, token, margin): {near_ties}")
    total = N_PROMPTS * N_TOKENS
    print(f"AL: tree (budget {BUDGET}) {total / tree_steps:.2f}, chain {total / chain_steps:.2f}")
    assert total / tree_steps > 1.0
    assert tree_steps <= chain_steps * 1.02   # a tree of the same pass holds the chain's prefixes mostly
