"""Tree speculation with the shipped DFlash draft on the real SmolLM2-135M (llama): greedy output
equals plain greedy on held-out prompts of the draft's corpus (near-ties reported with their margins,
as test_shipped_draft.py does for the chain), with real acceptance, and a tree accepts at least as
much per step as the chain of the same draft pass."""
from __future__ import annotations

import pytest

from luce_engine import Engine, default_model_path
from luce_engine.speculative import ChainSpeculator
from luce_engine.tree_speculative import TreeSpeculator
from reference import DEVICE, check_greedy_divergence, tree_replay_choices
from test_shipped_draft import _prompts, draft, model  # noqa: F401  (its model and draft fixtures)
from tools.dflash_train.prompt_ids import PromptEncoder

N_PROMPTS, N_TOKENS, BUDGET = 12, 64, 16


class RecordingTree(TreeSpeculator):
    """A TreeSpeculator that keeps each step's tree and accepted path (reference.tree_replay_choices)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.path_of_step: list = []   # per step: (tree, the accepted path, root first)

    def _walk(self, tree, sampling, native, stop_ids):
        path, bonus = super()._walk(tree, sampling, native, stop_ids)
        self.path_of_step.append((tree, path))
        return path, bonus


def generate(model, p, spec_factory=None):
    eng = Engine(model, n_ctx=512, n_verify_max=BUDGET + 1)
    spec = spec_factory(eng) if spec_factory else None
    out, drafted, steps = [], [], []
    for r in eng.generate(p, max_tokens=N_TOKENS, stop_token_ids=(), speculator=spec):
        if isinstance(spec, RecordingTree) and len(spec.path_of_step) > len(steps):   # a tree step: its tokens next
            steps.append((len(out), *spec.path_of_step[len(steps)]))
        out += r.tokens
        drafted += r.drafted
    if spec is not None:
        spec.steps = steps   # (start in out, tree, path)
    return out, drafted, spec

def test_greedy_tree_equals_plain_on_real_prompts(model, draft):
    near_ties, steps, tree_steps, chain_steps = [], 0, 0, 0
    for k, p in enumerate(_prompts(PromptEncoder(default_model_path()), N_PROMPTS)):
        plain, _, _ = generate(model, p)
        got, drafted, spec = generate(model, p, lambda e: RecordingTree(e, draft, budget=BUDGET))
        _, _, chain = generate(model, p, lambda e: ChainSpeculator(e, draft))
        assert len(got) == N_TOKENS and sum(drafted) == spec.stats.n_accepted
        tree_steps += spec.stats.n_steps
        chain_steps += chain.stats.n_steps
        for start, tree, path in spec.steps:   # the record lines up with the output it explains
            n = min(len(path), len(got) - start)   # the last step stops at max_tokens
            assert n > 0 and got[start:start + n] == [tree.tokens[x] for x in path][:n]
        flip = check_greedy_divergence(model, p, got, plain, rows=BUDGET + 1, tree=True,
                                       replay=lambda j: _replay(model, draft, p, spec.steps).get(j))
        if flip:
            near_ties.append((k, *flip))
    assert DEVICE != "cpu" or len(near_ties) <= 1, near_ties   # on a GPU each one is checked (and reported)
    if near_ties:
        print(f"near-ties (prompt, token, margin): {near_ties}")
    total = N_PROMPTS * N_TOKENS
    print(f"AL: tree (budget {BUDGET}) {total / tree_steps:.2f}, chain {total / chain_steps:.2f}")
    assert total / tree_steps > 1.0
    assert tree_steps <= chain_steps * 1.02   # a tree of the same pass holds the chain's prefixes mostly


def _replay(model, draft, p, steps):
    return tree_replay_choices(model, p, steps, draft.capture_layers, n_verify_max=BUDGET + 1)


def test_a_replay_of_the_steps_reproduces_their_choices(model, draft):
    """tree_replay_choices, the GPU's reference for a tree's divergences: a fresh engine that repeats
    the steps' verifies and commits chooses what each step emitted, at every position (inside a
    path, and the bonus after it)."""
    p = _prompts(PromptEncoder(default_model_path()), 1)[0]
    got, _, spec = generate(model, p, lambda e: RecordingTree(e, draft, budget=BUDGET))
    choices = _replay(model, draft, p, spec.steps)
    positions = [j for j in sorted(choices) if j < len(got)]
    assert len(positions) >= len(got) - 1
    same = [choices[j] == got[j] for j in positions]
    if DEVICE == "cpu":
        assert all(same), [j for j, ok in zip(positions, same) if not ok]
    else:   # the same batches in the same order: equal unless a kernel's sums depend on more than its inputs
        print(f"replayed tree batches reproduced {sum(same)} of {len(same)} choices")
