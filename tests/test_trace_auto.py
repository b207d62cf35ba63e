"""bench/trace_auto.py: each auto step is recorded with its mode, the mode before it, whether a shadow
draft followed it, its tokens and the target's and draft's graph builds during it."""
from __future__ import annotations

from types import SimpleNamespace

from bench import trace_auto


class FakeAuto:
    """Steps of given modes; the engine builds a graph on every switch."""

    def __init__(self, schedule):
        self.schedule, self.builds = list(schedule), 0
        self.engine = SimpleNamespace(stats=lambda: {"n_graph_builds": self.builds})
        self.drafter = SimpleNamespace(stats=lambda: {"n_graph_builds": 0})
        self.n_shadows = self.n_calibrations = 0
        self.last_mode = None

    def step(self, sampling, **kw):
        mode, shadow, n = self.schedule.pop(0)
        self.builds += mode != self.last_mode
        self.n_shadows += shadow
        self.last_mode = mode
        return SimpleNamespace(tokens=[0] * n)


def test_every_step_is_recorded_with_its_mode_switch_and_builds(monkeypatch):
    monkeypatch.setattr(trace_auto, "STEPS", [])
    FakeAuto.step = trace_auto._traced(FakeAuto.step)
    spec = FakeAuto([("chain7", False, 3), ("chain7", False, 2), ("plain", True, 1), ("chain7", False, 4)])
    for _ in range(4):
        spec.step(None, max_emit=8)
    rows = [(r["prev"], r["mode"], r["shadow"], r["tokens"], r["builds"]) for r in trace_auto.STEPS]
    assert rows == [(None, "chain7", False, 3, 1), ("chain7", "chain7", False, 2, 0),
                    ("chain7", "plain", True, 1, 1), ("plain", "chain7", False, 4, 1)]
    assert all(r["ms"] >= 0 and r["calibrations"] == 0 and r["draft_builds"] == 0 for r in trace_auto.STEPS)
