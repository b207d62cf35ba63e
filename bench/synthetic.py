"""Synthetic acceptance for benchmarks: llama.cpp's `--spec-synth-len L`, same definition.

Random-weight models accept no drafts, so speed at a given acceptance length is measured by
accepting draft i with a fixed conditional probability instead of comparing it with the target.
The draft and the verify batch still run in full; only the accept decision is replaced, which
makes the emitted text meaningless: SyntheticSpeculator is a ChainSpeculator whose acceptance
rule is this draw. Benchmark-only, so it lives in bench/, not in the shipped luce_engine.

Definition (llama.cpp common/speculative.cpp): with K = max draft tokens, p solves
p + p² + … + p^K = L − 1 by 32 bisection steps on [0, 1] (p = 1 when L = K + 1, p = 0 when L = 1);
draft i is accepted with conditional probability p, so the mean tokens per step is L. A drafted
end-of-generation token is never accepted (it would end the run early).
"""
from __future__ import annotations

import math
import random

from luce_engine.speculative import ChainSpeculator


def conditional_acceptance(length: float, n_max: int) -> float:
    """p such that p + p² + … + p^n_max = length − 1 (llama.cpp's bisection, bit for bit)."""
    if n_max <= 0:
        raise ValueError("synthetic acceptance needs at least one draft token")
    length_max = n_max + 1.0
    if not math.isfinite(length) or length < 1.0 or length > length_max:
        raise ValueError(f"synthetic acceptance length must be within [1, {length_max:.0f}], got {length}")
    if length == length_max:
        return 1.0
    if length == 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(32):
        mid = 0.5 * (lo + hi)
        total, term = 0.0, mid
        for _ in range(n_max):
            total += term
            term *= mid
        if total < length - 1.0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


class SyntheticAcceptance:
    """Accept decisions for SyntheticSpeculator: draft i kept with probability p."""

    def __init__(self, length: float, n_max: int, *, seed: int = 0):
        self.length, self.n_max = float(length), int(n_max)
        self.p = conditional_acceptance(self.length, self.n_max)
        self._rng = random.Random(seed)

    def accept(self) -> bool:
        return self._rng.random() < self.p

    def __repr__(self) -> str:
        return f"SyntheticAcceptance(L={self.length:g}, n_max={self.n_max}, p={self.p:.6f})"


class SyntheticSpeculator(ChainSpeculator):
    """Chain speculation whose drafts are accepted by `acceptance` instead of by the target."""

    def __init__(self, engine, drafter, acceptance: SyntheticAcceptance, **kwargs):
        super().__init__(engine, drafter, **kwargs)
        self.acceptance = acceptance

    def _accepts(self, drafted: int, target: int, stop_ids) -> bool:
        return drafted not in stop_ids and self.acceptance.accept()
