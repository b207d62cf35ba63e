"""bench/sim_auto.py: auto's policy run against a stand-in engine and drafter on recorded traces.
The stand-in must behave as the real engine would on the trace (the emitted text is the trace's,
a draft is accepted exactly as far as it matches it) and charge each call its cost, or the tool's
comparisons mean nothing."""
from __future__ import annotations

import numpy as np
import pytest

from bench import sim_auto

EOG = frozenset({0})
COSTS = {"plain": 1.0, "sample": 0.5, "draft": 0.5, "inject_call": 0.1, "inject_row": 0.0,
         "verify": {1: 1.0, 4: 1.2, 8: 1.5, 16: 3.0}}


def trace(n: int, right: int, temperature: float = 0.0, seed: int = 0) -> dict:
    """n tokens; at every position the draft's first `right` proposals are the continuation."""
    tokens = [int(t) for t in np.random.default_rng(seed).integers(5, 1000, n)]
    proposals = []
    for i in range(n):
        nxt = tokens[i + 1:i + 16] + [1] * 15
        proposals.append(nxt[:right] + [2] * (15 - right))
    return {"category": "chat", "temperature": temperature, "c0": 40, "tokens": tokens, "proposals": proposals}


def test_a_chain_accepts_what_the_trace_says_and_pays_for_its_calls():
    # 3 right drafts a step: a chain of 7 emits 4 tokens a step (x0 and 3 accepted), 120 in 30 steps
    (_, _, n, sec, by_mode), = sim_auto.run_mode("chain7", [trace(120, 3)], COSTS, EOG, 0, 0.0)
    steps = 120 // 4
    assert n == 120 and by_mode["chain7"] == 120
    # each step: an injection call, a draft, an 8-row verify; the last may draft 3 (max_emit): 4 rows
    assert sec * 1e3 == pytest.approx((steps - 1) * (0.1 + 0.5 + 1.5) + (0.1 + 0.5 + 1.2))
    (_, _, _, plain_sec, _), = sim_auto.run_mode("plain", [trace(120, 3)], COSTS, EOG, 0, 0.0)
    assert plain_sec * 1e3 == pytest.approx(120 * 1.0)


def test_sampled_traces_pay_a_draw_per_emitted_token():
    (_, _, n, sec, _), = sim_auto.run_mode("plain", [trace(50, 0, temperature=0.7)], COSTS, EOG, 0, 0.0)
    assert sec * 1e3 == pytest.approx(50 * 1.5)


def test_the_modules_keep_their_own_clock():
    import time

    import luce_engine.spec_auto as spec_auto
    sim_auto.run_mode("chain7", [trace(20, 3)], COSTS, EOG, 0, 0.0)
    assert spec_auto.time is time


def test_auto_speculates_where_drafts_pay_and_not_where_they_do_not():
    good = sim_auto.run_mode("auto", [trace(200, 7, seed=s) for s in range(3)], COSTS, EOG, 0, 0.0)
    assert sum(r[4]["plain"] for r in good) < 0.1 * sum(r[2] for r in good)
    bad = sim_auto.run_mode("auto", [trace(200, 0, seed=s) for s in range(3)], COSTS, EOG, 0, 0.0)
    assert sum(r[4]["plain"] for r in bad) > 0.9 * sum(r[2] for r in bad)


def test_a_verify_of_a_width_without_a_kept_graph_pays_the_switch():
    """--switch: the Engine keeps a graph for each of the last --verify-graphs verify widths (and
    the one-token steps'); a width it dropped pays the rebuild, a first one is --cold's."""
    from bench.sim_clock import Clock

    for kept, want in [(3, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]), (1, [0, 0, 0, 2, 2, 0, 0, 2, 0, 0, 2])]:
        clock = Clock()
        eng = sim_auto.StandIn(COSTS, clock, np.random.default_rng(0), 0.0, switch=2.0, verify_graphs=kept)
        spent = []
        for rows in (8, 4, 1, 8, 4, 4, 1, 8, 16, 3, 4):   # with 3 kept, 3 drops 4 (8 and 16 stay)
            t0 = clock.t
            eng._shape(rows)
            spent.append(round((clock.t - t0) * 1e3, 6))
        assert spent == want, kept


def test_a_graph_whose_attended_step_changes_pays_the_rebuild():
    """--kv-pad: the one-token graph and each kept verify graph attend the cache in steps of that
    many cells; one used at another step (the context crossed one, or a new reply) pays --switch."""
    from bench.sim_clock import Clock

    clock = Clock()
    eng = sim_auto.StandIn(COSTS, clock, np.random.default_rng(0), 0.0, switch=2.0, kv_pad=256)
    spent = []
    for n_past, rows in [(100, 1), (200, 8), (250, 1), (255, 1), (256, 1), (240, 8), (250, 8), (600, 1), (600, 8)]:
        eng.n_past = n_past
        t0 = clock.t
        eng._shape(rows)
        spent.append(round((clock.t - t0) * 1e3, 6))
    # 256 + 1 cells cross into the second step; 250 + 8 too; a reply at 600 is in the third
    assert spent == [0, 0, 0, 0, 2, 0, 2, 2, 2]


def test_a_catch_up_injection_and_the_one_after_it_pay_the_rebuild():
    """--catch-up: an injection of more rows than a block (a catch-up after plain steps) and the next
    one (back to a block's rows) each pay the draft's graph rebuild; steady injections do not."""
    from bench.sim_clock import Clock

    clock = Clock()
    eng = sim_auto.StandIn(COSTS, clock, np.random.default_rng(0), 0.0, catch_up=5.0)
    spent = []
    for rows in (3, 3, 100, 3, 3):
        t0 = clock.t
        eng.inject_captured(eng, 0, rows)
        spent.append(round((clock.t - t0) * 1e3, 6))
    assert spent == [0.1, 0.1, 5.1, 5.1, 0.1]
