"""A simulated clock for the speculators' timing: the engine modules read time.perf_counter() to
measure their steps, and a stand-in engine advances this clock by a device's cost instead
(bench/bench_auto_overhead.py, bench/sim_auto.py)."""
from __future__ import annotations

import contextlib
import types


class Clock:
    """perf_counter() is the simulated engine time (seconds)."""

    def __init__(self):
        self.t = 0.0

    def perf_counter(self) -> float:
        return self.t

    def spend(self, ms: float) -> None:
        self.t += ms * 1e-3


@contextlib.contextmanager
def clock_patched(clock: Clock):
    """spec_auto, speculative and tree_speculative read `clock` as their `time` inside the block,
    their own afterwards (a test process goes on using them)."""
    import luce_engine.spec_auto as sa
    import luce_engine.speculative as sp
    import luce_engine.tree_speculative as ts

    modules = (sa, sp, ts)
    real = [m.time for m in modules]
    fake = types.SimpleNamespace(perf_counter=clock.perf_counter)
    for m in modules:
        m.time = fake
    try:
        yield clock
    finally:
        for m, t in zip(modules, real):
            m.time = t
