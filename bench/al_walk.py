"""Chain-of-K acceptance walked along a fixed text (the greedy walk `bench/sim_auto.py` also does):
what bench/al_by_text.py and bench/al_by_feature_source.py measure with."""
from __future__ import annotations

import numpy as np

from luce_engine import DraftModel


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
