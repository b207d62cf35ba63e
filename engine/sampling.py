"""Sampling settings shared by the engine, the CLI and (later) the TUI."""

from __future__ import annotations

import dataclasses
import secrets


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How the next token is chosen. temperature 0 is greedy (deterministic, no seed needed).

    Applied in llama.cpp's order: penalties (repeat, presence over the last `penalty_last_n`
    context tokens) → top-k → top-p → min-p → temperature → draw with `seed`.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None   # None: a fresh random seed per generation

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if not 0 <= self.min_p <= 1:
            raise ValueError("min_p must be in [0, 1]")
        if self.repeat_penalty <= 0:
            raise ValueError("repeat_penalty must be > 0")
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ValueError("seed must be in [0, 2**64)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def resolved_seed(self) -> int:
        return self.seed if self.seed is not None else secrets.randbits(64)

    @classmethod
    def chat_default(cls) -> "Sampling":
        """Defaults for conversation: mild temperature with nucleus and min-p filtering."""
        return cls(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.05)

    def updated(self, **changes) -> "Sampling":
        return dataclasses.replace(self, **changes)
