"""Chain speculative decoding on an Engine: a drafter proposes a block, the target verifies it in
one batch, the longest prefix that the target itself would have produced is kept.

One step, with c tokens in the context and x0 the token the target chose last (not yet evaluated):

    drafts d1..dL = drafter.draft(x0, c)
    verify [x0, d1..dL]                  one target batch, rows 0..L
    y_i = sample(row i) in order; accept d_{i+1} while it equals y_i
    commit x0, d1..da                    the rest is rolled back (KV length, recurrent state)
    the next x0 = y_a                    a draw from the target, never re-drawn

Exactness (docs/architecture.md §5): every emitted token is the target's own choice at its position — its
argmax, or its sample from the processed distribution drawn with the engine's generator in the
same order as plain decoding — so greedy output equals plain greedy output, and sampled output is
an exact draw (for a given seed, the same tokens as plain sampling, up to batch-shape rounding).

Drafters implement `Drafter`; the DFlash draft model is one, tests use oracle drafters.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Protocol, Sequence

import numpy as np

from luce_engine.sampling import Sampling


class Drafter(Protocol):
    block_size: int                       # tokens per draft block, x0 included (proposals: block_size - 1)
    capture_layers: Sequence[int]         # target layers whose outputs it reads (empty: none)

    def reset(self) -> None: ...          # forget the context (a new prompt)
    def inject(self, features: np.ndarray, start: int) -> None: ...   # [n, n_layers * n_embd] at start..
    def draft(self, x0: int, pos0: int) -> list[int]: ...             # proposals for pos0+1..


@dataclasses.dataclass
class SpecStats:
    n_steps: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_emitted: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    accepted_at: list[int] = dataclasses.field(default_factory=list)   # steps whose draft i was accepted
    not_speculated: dict[str, int] = dataclasses.field(default_factory=dict)   # reason -> steps

    @property
    def acceptance_length(self) -> float:
        """Mean tokens emitted per step (AL; 1 = no draft ever accepted)."""
        return self.n_emitted / self.n_steps if self.n_steps else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(acceptance_length=self.acceptance_length, acceptance_rate=self.acceptance_rate)
        return d


def draws(sampling: Sampling) -> bool:
    """Whether the target's choice is a draw from its processed row (the native sampler), not the
    device's argmax of the raw logits (plain greedy)."""
    return not (sampling.greedy and sampling.repeat_penalty == 1.0 and sampling.presence_penalty == 0.0)


class ChainSpeculator:
    """Runs chain speculation for one Engine with one Drafter (see the module docstring).

    Call attach() before the prompt is prefilled (it turns on the hidden-state capture the drafter
    reads), then step() in place of Engine.step(); Engine.generate(speculator=...) does both.
    """

    def __init__(self, engine, drafter: Drafter, *, max_draft: int | None = None, capture_ring: int = 4096):
        self.engine, self.drafter = engine, drafter
        self.max_draft = drafter.block_size - 1 if max_draft is None else min(max_draft, drafter.block_size - 1)
        if self.max_draft < 0:
            raise ValueError("max_draft must be >= 0")
        if self.max_draft + 1 > engine.n_verify_max:
            raise ValueError(f"a block of {self.max_draft + 1} tokens exceeds the engine's n_verify_max "
                             f"({engine.n_verify_max}); create the Engine with n_verify_max >= {self.max_draft + 1}")
        self.capture_ring = capture_ring
        self.stats = SpecStats()
        self._pending: int | None = None   # the target's last choice, not yet evaluated ...
        self._pending_at = -1              # ... valid while the context still ends where it was chosen
        self._injected = 0                 # context positions whose features the drafter has
        self._attached = False

    def attach(self) -> None:
        """Start over: turn on the capture the drafter reads and forget the drafter's context.
        Positions evaluated before this have no features (the drafter sees less context)."""
        if self.drafter.capture_layers:
            self.engine.set_capture(list(self.drafter.capture_layers), output=True, ring_size=self.capture_ring)
        self.drafter.reset()
        self._pending, self._pending_at = None, -1
        self._injected = self.engine.n_past
        self._attached = True

    def resumed(self, n_captured: int) -> None:
        """After Engine.load_state() (with the capture already on: prepare() first): the drafter forgets
        its old context and is fed the n_captured positions the state file put back into the
        capture ring at the next step, so speculation continues with that context."""
        self.prepare()
        self.drafter.reset()
        self._pending, self._pending_at = None, -1
        self._injected = max(0, self.engine.n_past - int(n_captured))

    def describe(self) -> str:
        """The mode in use, for the stats line and /model."""
        return f"chain of {self.max_draft}"

    def prepare(self) -> None:
        """Attach once; later calls keep the capture and the drafter's context."""
        if not self._attached:
            self.attach()

    def _inject_up_to(self, n: int) -> None:
        if not self.drafter.capture_layers:
            self._injected = n
            return
        start = max(self._injected, n - self.capture_ring)
        if start < n:
            if hasattr(self.drafter, "inject_captured"):   # device to device, no host copy
                self.drafter.inject_captured(self.engine, start, n - start)
            else:
                feats = np.stack([self.engine.captured(p).reshape(-1) for p in range(start, n)])
                self.drafter.inject(feats, start)
        self._injected = n

    def _sample(self, sampling: Sampling, native, row: int) -> int:
        return self.engine.argmax(row) if native is None else self.engine._core.sample(native, row)

    def _accepts(self, drafted: int, target: int, stop_ids) -> bool:
        """The acceptance rule: a draft is kept when it is the target's own choice."""
        return drafted == target

    def _begin(self, sampling: Sampling, max_emit: int | None, stop_ids):
        """What every step starts with: the native sampler (None: plain greedy), the context length c,
        the pending token x0 and how many tokens may be drafted after it (the block, max_emit and
        the context allow; 0 when x0 ends generation)."""
        eng = self.engine
        native = eng._native_params(sampling) if draws(sampling) else None
        self.prepare()
        c = eng.n_past
        self._injected = min(self._injected, c)   # the context may have been truncated or edited
        if self._pending_at != c:
            self._pending = None                 # a new prompt came after the last step
        x0 = self._pending if self._pending is not None else self._sample(sampling, native, -1)
        room = eng.n_ctx - c - 1                      # the block must fit the context
        limit = self.max_draft if max_emit is None else min(self.max_draft, max_emit - 1)
        n_draft = 0 if x0 in stop_ids else max(0, min(limit, room))
        if n_draft < self.max_draft:
            reason = "context" if room < self.max_draft else "max_tokens"
            self.stats.not_speculated[reason] = self.stats.not_speculated.get(reason, 0) + 1
        return native, c, x0, n_draft

    def _record(self, n_drafted: int, accepted: int, t0: float, t1: float, t2: float) -> None:
        s = self.stats
        s.n_steps += 1
        s.n_drafted += n_drafted
        s.n_accepted += accepted
        s.n_emitted += 1 + accepted
        s.draft_ms += (t1 - t0) * 1e3
        s.verify_ms += (t2 - t1) * 1e3
        while len(s.accepted_at) < accepted:
            s.accepted_at.append(0)
        for i in range(accepted):
            s.accepted_at[i] += 1

    def step(self, sampling: Sampling, *, max_emit: int | None = None, stop_ids: frozenset[int] | set = frozenset()):
        """Commits 1..max_draft+1 tokens; returns a StepResult with per-token provenance.

        max_emit bounds the tokens committed; an id in stop_ids (end of generation) ends the
        step right after it, so the context never runs past where plain decoding stops."""
        from luce_engine.engine import StepResult

        eng = self.engine
        native, c, x0, n_draft = self._begin(sampling, max_emit, stop_ids)
        t0 = time.perf_counter()
        drafts: list[int] = []
        if n_draft > 0:
            self._inject_up_to(c)
            drafts = [int(t) for t in self.drafter.draft(x0, c)[:n_draft]]
        t1 = time.perf_counter()
        # commit(0) happens only on an error, so the previous row need not be kept on the host
        eng.verify([x0] + drafts, logits=False, keep_pre_logits=False)
        try:
            accepted, bonus = 0, None
            for i in range(len(drafts) + 1):
                y = self._sample(sampling, native, i)
                if i < len(drafts) and self._accepts(drafts[i], y, stop_ids):
                    accepted += 1
                    if drafts[i] in stop_ids:   # generation ends on this token: nothing after it
                        bonus = None
                        break
                    continue
                bonus = y
                break
        except BaseException:
            eng.commit(0)              # nothing of this step happened; x0 stays pending
            self._pending, self._pending_at = x0, c
            raise
        eng.commit(1 + accepted)
        t2 = time.perf_counter()
        self._pending, self._pending_at = bonus, (eng.n_past if bonus is not None else -1)
        while len(self.stats.accepted_at) < len(drafts):
            self.stats.accepted_at.append(0)
        self._record(len(drafts), accepted, t0, t1, t2)
        tokens = [x0] + drafts[:accepted]
        return StepResult(tokens, [False] + [True] * accepted, n_drafted=len(drafts), n_accepted=accepted,
                          decode_ms=(t2 - t1) * 1e3)
