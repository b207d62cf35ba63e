"""Chain-of-K acceptance walked along a fixed text (the greedy walk `bench/sim_auto.py` also does):
what bench/al_by_text.py and bench/al_by_feature_source.py measure with."""
from __future__ import annotations

import numpy as np

from luce_engine import DraftModel, Engine, Sampling
from tools.dflash_train.corpus import CATEGORIES, heldout_prompts


def heldout_by_category(per_category: int) -> list:
    """The first `per_category` held-out prompts of each category, category by category."""
    return [p for c in CATEGORIES for p in [q for q in heldout_prompts() if q.category == c][:per_category]]


def capturing_engine(model, draft: DraftModel, prompt_ids: list[list[int]], tokens: int) -> Engine:
    """An Engine that holds the longest prompt and `tokens` more, capturing what the draft reads at
    every position (the ring as long as the context)."""
    eng = Engine(model, n_ctx=max(len(ids) for ids in prompt_ids) + tokens + 8)
    eng.set_capture(list(draft.capture_layers), output=True, ring_size=eng.n_ctx)
    return eng


def greedy_text(eng: Engine, ids: list[int], tokens: int, eog) -> list[int]:
    """Plain greedy decoding of up to `tokens` after the prompt `ids` (the context restarted), the
    end token left out (it is emitted, never evaluated)."""
    eng.truncate(0)
    eng.prefill(ids)
    text = []
    for r in eng.generate(None, sampling=Sampling(), max_tokens=tokens):
        text += r.tokens
    while text and text[-1] in eog:
        text.pop()
    return text


def chain_al(proposals, tokens: list[int], k: int) -> tuple[int, int]:
    """(tokens emitted, steps) of chain-of-k steps along `tokens`; proposals[i] are the drafts after tokens[i]."""
    i = emitted = steps = 0
    while i < len(tokens):
        a = 0
        while a < k and i + 1 + a < len(tokens) and int(proposals[i][a]) == tokens[i + 1 + a]:
            a += 1
        emitted, steps, i = emitted + a + 1, steps + 1, i + a + 1
    return emitted, steps


def engine_proposals(draft: DraftModel, feats: np.ndarray, c0: int, tokens: list[int], k: int) -> list[list[int]]:
    """The engine's draft fed positions < c (host features) before the step at c, as a chain step is."""
    draft.reset()
    draft.inject(feats[:c0], 0)
    out = []
    for i, t in enumerate(tokens):
        if i:
            draft.inject(feats[c0 + i - 1:c0 + i], c0 + i - 1)
        out.append(draft.draft(t, c0 + i)[:k])
    return out


class ALTable:
    """Tokens emitted and steps of chain walks per row (a feature source, a draft) and prompt
    category, printed as AL (tokens a step) per category and over all."""

    def __init__(self, rows, categories):
        self.rows, self.categories = tuple(rows), tuple(categories)
        self.counts = {r: {c: [0, 0] for c in self.categories} for r in self.rows}

    def add(self, row: str, category: str, walk: tuple[int, int]) -> None:
        emitted, steps = walk
        self.counts[row][category][0] += emitted
        self.counts[row][category][1] += steps

    def print(self, title: str, width: int) -> None:
        print(f"{title:>{width}}" + "".join(f"{c:>8}" for c in self.categories) + f"{'all':>8}")
        for row in self.rows:
            per = self.counts[row]
            al = [per[c][0] / max(per[c][1], 1) for c in self.categories]
            tot = sum(v[0] for v in per.values()) / max(sum(v[1] for v in per.values()), 1)
            print(f"{row:>{width}}" + "".join(f"{a:>8.2f}" for a in al) + f"{tot:>8.2f}")
