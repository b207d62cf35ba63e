"""`--spec auto` (luce_engine.spec_auto.AdaptiveSpeculator) is exact whatever mode each step takes:
greedy output equals plain greedy for oracle drafters of high and of zero acceptance and for random
drafts, with measured and with fixed costs; a forced schedule that switches between plain, chain
and trees every few steps stays exact, greedy and sampled (same tokens as plain sampling for a
seed: every mode draws once per emitted token in plain order), and ends at EOS / max_tokens on the
exact token; with fixed costs auto settles on speculation where it pays and on plain where it
does not, and its counterfactual acceptance counts are what each mode accepts when it runs."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from luce_engine import Engine, Model, Sampling
from luce_engine.ddtree import build_tree, chain_tree, top_candidates
from luce_engine import spec_auto
from luce_engine.spec_auto import (CAND_EVERY, CAND_EVERY_FAR, PLAIN_REWEIGH, ACC_ALPHA, ACC_HALF_LIFE, CHAIN, PLAIN, SHADOW_GAP_MIN, SHADOW_SHARE, AdaptiveSpeculator, FixedCosts, StepCosts,
                                   _depth_within, _Record)
from luce_engine.tree_speculative import draft_candidates
from reference import DEVICE, EXACT_TREE_NODES, THREADS, TINY_HEAD_DIM, TINY_WEIGHTS
from test_ddtree import reference_build_tree
from test_speculative import assert_greedy_matches, prompt
from test_tree_speculative import B, V, OracleTreeDrafter, RandomTreeDrafter, truth_prefix_in_tree
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

BUDGETS = (4, 8, 16)
N = 96


class Oracle(OracleTreeDrafter):
    """The tree oracle with a chain side too: draft() proposes its rank-0 candidates (of as many as
    a tree takes: with fewer the truth's rank is capped)."""

    def draft(self, x0, pos0):
        return [int(t) for t in self.draft_candidates(x0, pos0, max(BUDGETS))[0][:, 0]]


class ChangingOracle(Oracle):
    """The truth at rank 0 before position `until`, absent from there on: acceptance falls to zero."""

    def __init__(self, truth, until):
        super().__init__(truth)
        self.until = until

    def draft_candidates(self, x0, pos0, k):
        self.missing_from = None if pos0 < self.until else 1
        return super().draft_candidates(x0, pos0, k)


# speculation pays: a verify costs little more than a plain step
CHEAP = FixedCosts(plain=10.0, draft={"chain": 2.0, "candidates": 3.0},
                   verify={(CHAIN, B): 12.0, (CHAIN, 4): 12.0, **{("tree", b + 1): 12.0 for b in BUDGETS}})
# speculation never pays: a verify of any shape costs 5 plain steps
DEAR = FixedCosts(plain=10.0, draft={"chain": 20.0, "candidates": 25.0},
                  verify={(CHAIN, B): 50.0, (CHAIN, 4): 50.0, **{("tree", b + 1): 50.0 for b in BUDGETS}})


class Scheduled(AdaptiveSpeculator):
    """Modes forced in a fixed cycle, so every kind of switch happens (exactness, not choice)."""

    schedule = (PLAIN, CHAIN, "tree8", PLAIN, "chain3", PLAIN, "tree16", CHAIN, "chain3", CHAIN, "tree4", PLAIN)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cycle = itertools.cycle([m for m in self.schedule if m in self.modes])

    def choose(self):
        return next(self._cycle)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def dense(request, tmp_path_factory):
    # TINY_WEIGHTS: q8_0 on a GPU, whose F32 batch matmuls round apart from a one-token step's (TF32)
    cfg = TinyConfig(arch=request.param, n_vocab=V, head_dim=TINY_HEAD_DIM, seed=21, weight_type=TINY_WEIGHTS)
    return Model(write_tiny_gguf(tmp_path_factory.mktemp("sa") / f"{request.param}.gguf", cfg), device=DEVICE,
                 n_threads=THREADS)


def run(model, p, n, *, drafter=None, sampling=Sampling(), costs=None, cls=AdaptiveSpeculator, stop_ids=(),
        on_step=None, budgets=BUDGETS, **engine_params):
    eng = Engine(model, n_ctx=512, n_verify_max=max(B, max(budgets) + 1), **engine_params)
    spec = cls(eng, drafter, tree_budgets=budgets, costs=costs) if drafter else None
    toks = []
    for r in eng.generate(p, sampling=sampling, max_tokens=n, stop_token_ids=stop_ids, speculator=spec):
        if on_step and spec:
            on_step(spec, r, len(p) + len(toks))
        toks += r.tokens
    return toks, spec, eng


def same_as_plain(model, p, got, plain) -> bool:
    """got is plain greedy's output, or, where a batch shape rounds a near-tie apart (a GPU), equal
    up to that reported near-tie (assert_greedy_matches): then False, and the checks of what the
    modes accept on plain's continuation do not apply to this other continuation."""
    assert_greedy_matches(model, p, got, plain)
    return got == plain


def plain_truth(model, p, n=N, sampling=Sampling(), **engine_params):
    plain, _, _ = run(model, p, n, sampling=sampling, **engine_params)
    return plain, {len(p) + i: t for i, t in enumerate(plain)}


@pytest.mark.parametrize("costs", [None, CHEAP, DEAR], ids=["measured", "cheap", "dear"])
def test_greedy_equals_plain_for_high_zero_and_random_acceptance(dense, costs):
    p = prompt(24, 1)
    plain, truth = plain_truth(dense, p)
    drafters = [Oracle(truth, 0, ratio=0.1), Oracle(truth, 1), Oracle(truth, 0, missing_from=1), RandomTreeDrafter(3)]
    for drafter in drafters:
        got, spec, eng = run(dense, p, N, drafter=drafter, costs=costs)
        same_as_plain(dense, p, got, plain)
        assert eng.tokens == p + got and spec.stats.n_emitted == len(got)


def test_coarser_attended_steps_keep_greedy_and_sampled_output_exact(dense):
    """step_kv_pad 1024 (the step and verify graphs attend the cache in 1024-cell steps; prompts in
    256): a forced schedule through every mode gives plain greedy's tokens (up to reported near-ties
    on a GPU; the context crosses 256 cells) and, sampled, plain sampling's tokens for the seed,
    plain decoding on the same steps (other steps round the attention apart, which may move a draw)."""
    p = prompt(200, 2)
    plain, truth = plain_truth(dense, p, 120, step_kv_pad=1024)
    got, _, eng = run(dense, p, 120, drafter=Oracle(truth, 2), cls=Scheduled, step_kv_pad=1024)
    same_as_plain(dense, p, got, plain)
    # sampled: test_sampling_with_a_seed_gives_plain_samplings_tokens's case, at 1024
    p = prompt(20, 3)
    s = Sampling(temperature=0.9, top_k=40, top_p=0.95, repeat_penalty=1.1, presence_penalty=0.2, seed=7)
    plain_s, truth_s = plain_truth(dense, p, 60, s, step_kv_pad=1024)
    budgets = tuple(b for b in BUDGETS if b < EXACT_TREE_NODES)   # equality: shapes that round as a step does
    got, _, _ = run(dense, p, 60, drafter=Oracle(truth_s, 0), cls=Scheduled, sampling=s, budgets=budgets,
                    step_kv_pad=1024)
    assert got == plain_s


def test_a_forced_schedule_of_every_switch_stays_exact(dense):
    p = prompt(20, 2)
    plain, truth = plain_truth(dense, p)
    for drafter in (Oracle(truth, 0), Oracle(truth, 2), RandomTreeDrafter(5)):
        got, spec, eng = run(dense, p, N, drafter=drafter, cls=Scheduled)
        same_as_plain(dense, p, got, plain)
        assert eng.tokens == p + got
        assert set(spec.mode_steps) == {PLAIN, CHAIN, "chain3", "tree4", "tree8", "tree16"}


def test_sampling_with_a_seed_gives_plain_samplings_tokens(dense):
    """One draw of the engine's generator per emitted token, in plain order, in every mode."""
    p = prompt(20, 3)
    s = Sampling(temperature=0.9, top_k=40, top_p=0.95, repeat_penalty=1.1, presence_penalty=0.2, seed=7)
    plain, truth = plain_truth(dense, p, 60, s)
    budgets = tuple(b for b in BUDGETS if b < EXACT_TREE_NODES)   # equality: shapes that round as a step does
    for drafter, cls, costs in [(Oracle(truth, 0), Scheduled, None), (Oracle(truth, 1), AdaptiveSpeculator, CHEAP),
                                (RandomTreeDrafter(1), AdaptiveSpeculator, None)]:
        got, spec, _ = run(dense, p, 60, drafter=drafter, sampling=s, cls=cls, costs=costs, budgets=budgets)
        assert got == plain
        assert spec.stats.n_accepted > 0 or isinstance(drafter, RandomTreeDrafter)


def test_eos_and_max_tokens_at_the_exact_token_across_switches(dense):
    p = prompt(24, 1)
    plain, truth = plain_truth(dense, p, 40)
    for cls, costs in [(Scheduled, None), (AdaptiveSpeculator, CHEAP), (AdaptiveSpeculator, DEAR)]:
        for n in (1, 2, 5, 11, 23):
            got, _, eng = run(dense, p, n, drafter=Oracle(truth, 1), cls=cls, costs=costs)
            same_as_plain(dense, p, got, plain[:n])
            assert len(got) == n and eng.n_past == len(p) + n
        for stop_at in (3, 9, 17):
            stop = plain[stop_at]
            got, _, _ = run(dense, p, 40, drafter=Oracle(truth, 0), cls=cls, costs=costs, stop_ids=[stop])
            first = plain.index(stop)
            if same_as_plain(dense, p, got[:first + 1], plain[:first + 1]):
                assert len(got) == first + 1
            else:   # another continuation after a near-tie: it ends at its own first stop id
                assert (stop in got and got.index(stop) == len(got) - 1) or len(got) == 40


def test_high_acceptance_with_cheap_verifies_settles_on_speculation(dense):
    p = prompt(24, 4)
    plain, truth = plain_truth(dense, p)
    # the truth at rank 0 everywhere: every mode accepts the whole depth, the chain is cheapest
    got, spec, _ = run(dense, p, N, drafter=Oracle(truth, 0, ratio=0.1), costs=CHEAP)
    if not same_as_plain(dense, p, got, plain):
        return
    assert spec.mode_steps[PLAIN] == 0 and spec.stats.acceptance_length > 6
    assert spec.last_mode == CHAIN and spec.describe() == f"auto: chain of {B - 1}"
    # the truth at rank 1 (3): the chain accepts nothing, trees of budget >= 8 (16) accept the most;
    # at equal costs the smaller such tree wins
    for rank, best in [(1, "tree8"), (3, "tree16")]:
        modes = []
        got, spec, _ = run(dense, p, N, drafter=Oracle(truth, rank), costs=CHEAP,
                           on_step=lambda s, r, c: modes.append(s.last_mode))
        if not same_as_plain(dense, p, got, plain):
            continue
        assert set(modes[3:]) == {best}, modes
        assert spec.acceptance[best] == max(spec.acceptance.values()) > spec.acceptance[CHAIN] == 0
        assert f"tree budget {spec.budgets[best]}" in spec.describe()


def test_a_plain_check_runs_past_a_rebuild_and_a_capture(dense, monkeypatch):
    """While speculation wins, every PLAIN_CHECK_EVERY speculative steps plain runs COLD_RUNS steps:
    the first after a speculative stretch may rebuild the one-token graph and, on a GPU, the next
    capture it, so a check of two left plain priced at its capture (H100: 8 against 1.2 ms)."""
    monkeypatch.setattr(spec_auto, "PLAIN_CHECK_EVERY", 4)
    p = prompt(24, 4)
    plain, truth = plain_truth(dense, p)
    modes = []
    got, spec, _ = run(dense, p, N, drafter=Oracle(truth, 0, ratio=0.1), costs=CHEAP,
                       on_step=lambda s, r, c: modes.append(s.last_mode))
    same_as_plain(dense, p, got, plain)
    runs = [len(list(g)) for m, g in itertools.groupby(modes[:-1]) if m == PLAIN]
    assert len(runs) >= 3 and set(runs[:-1]) == {spec_auto.COLD_RUNS}, modes


def test_a_short_chain_wins_where_its_verify_is_cheaper(dense):
    """Drafts right for two positions, a 4-row verify a third of the full chain's (as a GPU's kernel
    boundary makes it): auto settles on the chain of 3 (the same draft pass, fewer rows)."""
    p = prompt(24, 12)
    plain, truth = plain_truth(dense, p)
    costs = FixedCosts(plain=10.0, draft={"chain": 2.0, "candidates": 30.0},
                       verify={(CHAIN, B): 12.0, (CHAIN, 4): 4.0, **{("tree", b + 1): 40.0 for b in BUDGETS}})
    modes = []
    got, spec, _ = run(dense, p, N, drafter=Oracle(truth, 0, missing_from=3), costs=costs,
                       on_step=lambda s, r, c: modes.append(s.last_mode))
    if not same_as_plain(dense, p, got, plain):
        return
    assert set(modes[-10:]) == {"chain3"}, modes
    assert spec.acceptance["chain3"] == spec.acceptance[CHAIN] == 2
    assert "chain of 3" in spec.describe()


class CandidateCounter(Oracle):
    """The oracle counting the steps that asked for candidates (draft() asks too: not counted)."""

    n_candidates = 0
    _in_draft = False

    def draft(self, x0, pos0):
        self._in_draft = True
        try:
            return super().draft(x0, pos0)
        finally:
            self._in_draft = False

    def draft_candidates(self, x0, pos0, k):
        self.n_candidates += not self._in_draft
        return super().draft_candidates(x0, pos0, k)


@pytest.mark.parametrize("tree_verify_ms, every", [(40.0, CAND_EVERY_FAR), (3.5, CAND_EVERY)])
def test_chain_steps_take_candidates_rarely_while_the_trees_are_far_behind(dense, tree_verify_ms, every):
    """A chain step computes the draft's candidates (the trees' counterfactual counts) one step in
    CAND_EVERY, and one in CAND_EVERY_FAR while every tree is predicted TREE_FAR times the chain's
    ms per token or more."""
    p = prompt(24, 12)
    n = 300
    plain, truth = plain_truth(dense, p, n)
    costs = FixedCosts(plain=10.0, draft={"chain": 2.0, "candidates": 3.0},
                       verify={(CHAIN, B): 12.0, (CHAIN, 4): 4.0, **{("tree", b + 1): tree_verify_ms for b in BUDGETS}})
    modes = []
    drafter = CandidateCounter(truth, 0, missing_from=3)
    got, spec, _ = run(dense, p, n, drafter=drafter, costs=costs, on_step=lambda s, r, c: modes.append(s.last_mode))
    if not same_as_plain(dense, p, got, plain):
        return
    chain_steps = sum(spec._is_chain(m) for m in modes)
    assert set(modes[-10:]) == {"chain3"} and chain_steps > 80
    assert spec._trees_far == (every == CAND_EVERY_FAR)
    # the start-up's steps take candidates until every tree has a count
    assert chain_steps / every - 2 <= drafter.n_candidates <= chain_steps / every + 6


def test_zero_acceptance_settles_on_plain_with_shadow_drafts_alone(dense):
    """Where nothing is accepted auto decodes plainly, and keeps the counts current with a shadow
    draft (the draft pass, nothing verified) every SHADOW_GAP_MIN plain steps or more: no
    speculative step after the start-up's."""
    p = prompt(24, 5)
    plain, truth = plain_truth(dense, p, 200)
    for costs in (CHEAP, DEAR):
        got, spec, _ = run(dense, p, 200, drafter=Oracle(truth, 0, missing_from=1), costs=costs)
        same_as_plain(dense, p, got, plain)
        assert spec.stats.n_steps - spec.mode_steps[PLAIN] <= 1 and spec.mode_steps[PLAIN] >= 195
        assert 200 // SHADOW_GAP_MIN - 2 <= spec.n_shadows <= 200 // SHADOW_GAP_MIN + 1
        assert all(a == 0 for a in spec.acceptance.values()) and spec.n_samples[CHAIN] >= spec.n_shadows - 1


class CountedWeighing(AdaptiveSpeculator):
    """auto counting its weighings of the modes (predictions() runs once a weighing)."""

    n_weighed = 0

    def predictions(self):
        self.n_weighed += 1
        return super().predictions()


def test_a_plain_stretch_weighs_the_modes_only_when_something_changed(dense):
    """With plain ahead and nothing new (no acceptance count pending, plain's cost steady), a plain
    step skips the weighing (~20 µs of Python, 1-2% of a GPU's plain step) but for one step in
    PLAIN_REWEIGH, and makes the choices the weighing would have: the same modes and shadows."""
    p = prompt(24, 5)
    plain, truth = plain_truth(dense, p, 200)
    runs = {}
    for reweigh in (PLAIN_REWEIGH, 0):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(spec_auto, "PLAIN_REWEIGH", reweigh)
            steps = []
            got, spec, _ = run(dense, p, 200, drafter=Oracle(truth, 0, missing_from=1), costs=CHEAP,
                               cls=CountedWeighing, on_step=lambda s, r, c: steps.append((s.last_mode, r.tokens)))
        same_as_plain(dense, p, got, plain)
        runs[reweigh] = (steps, spec.n_shadows, spec.n_weighed, spec.mode_steps[PLAIN])
    (fast, shadows, weighed, n_plain), (slow, slow_shadows, slow_weighed, _) = runs[PLAIN_REWEIGH], runs[0]
    assert fast == slow and shadows == slow_shadows > 0
    assert slow_weighed >= n_plain - 10
    # a weighing every PLAIN_REWEIGH + 1 plain steps, and after each shadow while its counts resolve
    assert weighed <= n_plain / (PLAIN_REWEIGH + 1) + shadows * (B + 2) + 10


def test_a_change_of_content_switches_modes_mid_reply(dense):
    """Acceptance high, then zero from a position on: auto speculates, then decodes plainly; and
    the other way round, a shadow draft notices when drafts start to be accepted."""
    p = prompt(24, 6)
    plain, truth = plain_truth(dense, p, 200)
    modes = []
    got, spec, _ = run(dense, p, 200, drafter=ChangingOracle(truth, len(p) + 60), costs=CHEAP,
                       on_step=lambda s, r, c: modes.append((c, s.last_mode)))
    if not same_as_plain(dense, p, got, plain):
        return
    assert all(m != PLAIN for c, m in modes if c < len(p) + 50)
    assert sum(m == PLAIN for c, m in modes if c > len(p) + 80) > 80

    class Improving(Oracle):   # nothing accepted before position `after`, the truth at rank 0 from there
        after = len(p) + 60

        def draft_candidates(self, x0, pos0, k):
            self.missing_from = 1 if pos0 < self.after else None
            return super().draft_candidates(x0, pos0, k)

    modes.clear()
    got, spec, _ = run(dense, p, 200, drafter=Improving(truth, 0, ratio=0.1), costs=CHEAP,
                       on_step=lambda s, r, c: modes.append((c, s.last_mode)))
    if not same_as_plain(dense, p, got, plain):
        return
    assert modes[-1][1] != PLAIN and spec.mode_steps[PLAIN] > 20


def test_counterfactual_counts_are_what_each_mode_would_accept(dense):
    """Every count auto's records resolve to is what a step of that mode at that position accepts:
    the chain, its leading drafts on the target's continuation; a tree of budget b, the deepest
    node of build_tree's tree on it (what TreeSpeculator accepts, test_tree_speculative); and for
    the mode that ran, the step's own count."""
    p = prompt(24, 7)
    plain, truth = plain_truth(dense, p)
    drafter = Oracle(truth, 2, missing_from=5)
    accepted = {}
    got, spec, _ = run(dense, p, N, drafter=drafter, cls=Scheduled,
                       on_step=lambda s, r, c: accepted.__setitem__((c, s.last_mode), r.n_accepted))
    if not same_as_plain(dense, p, got, plain):
        return
    seen = set()
    for c, mode, n in spec.resolved:
        x0 = truth[c]
        if mode in (CHAIN, *spec.chains):   # the chain, or a short one: its first drafts
            drafts = drafter.draft(x0, c)[:spec.chains.get(mode, B - 1)]
            want = next((i for i, t in enumerate(drafts) if truth.get(c + 1 + i) != t), len(drafts))
        else:
            b = spec.budgets[mode]
            toks, lp = drafter.draft_candidates(x0, c, b)
            want = truth_prefix_in_tree(build_tree(x0, toks, lp, b, max_depth=B - 1), truth, c)
        assert n == want, (c, mode)
        if (c, mode) in accepted:
            assert n == accepted[c, mode]
        seen.add(mode)
    assert seen == {CHAIN, "chain3", "tree4", "tree8", "tree16"}


def test_hybrid_targets_choose_between_plain_and_the_chain(tmp_path):
    from test_speculative import OracleDrafter

    cfg = TinyConfig(arch="qwen35", n_vocab=V, n_layer=4, head_dim=TINY_HEAD_DIM, seed=3)
    hybrid = Model(write_tiny_gguf(tmp_path / "h.gguf", cfg), device=DEVICE, n_threads=THREADS)
    p = prompt(20, 8)
    plain, truth = plain_truth(hybrid, p, 60)
    for drafter, cls in [(Oracle(truth, 0), Scheduled), (OracleDrafter(truth, V, 3), AdaptiveSpeculator),
                         (RandomTreeDrafter(2), AdaptiveSpeculator)]:
        got, spec, eng = run(hybrid, p, 60, drafter=drafter, cls=cls)
        assert_greedy_matches(hybrid, p, got, plain)
        assert spec.modes == [PLAIN, CHAIN, "chain3"] and set(spec.mode_steps) <= {PLAIN, CHAIN, "chain3"}


def test_measured_costs_calibrate_each_tree_shape_at_most_once(dense):
    p = prompt(24, 9)
    plain, truth = plain_truth(dense, p)
    eng = Engine(dense, n_ctx=512, n_verify_max=17)
    spec = AdaptiveSpeculator(eng, Oracle(truth, 1), tree_budgets=BUDGETS)
    for _ in range(3):   # three replies on one engine
        eng.truncate(0)
        got = [t for r in eng.generate(p, max_tokens=N, stop_token_ids=(), speculator=spec) for t in r.tokens]
        same_as_plain(dense, p, got, plain)
    assert spec.n_calibrations <= len(BUDGETS) + len(spec.chains)
    assert set(spec.costs.verify) >= {(CHAIN, B)} and spec.costs.plain > 0
    assert spec.describe().startswith("auto: ")
    assert np.isfinite([spec.predict(m) or 0.0 for m in spec.modes]).all()


def test_calibration_verifies_change_nothing(dense):
    """A calibration (a tree verify of dummy rows, then commit(0)) before every step, whatever the
    step's mode and whether a token is pending: the output is still plain greedy's."""

    class Calibrating(Scheduled):
        def choose(self):
            for b in BUDGETS:
                self._calibrate(b + 1)
            return super().choose()

    p = prompt(24, 10)
    plain, truth = plain_truth(dense, p)
    got, spec, eng = run(dense, p, N, drafter=Oracle(truth, 1), cls=Calibrating)
    same_as_plain(dense, p, got, plain)
    assert eng.tokens == p + got and spec.n_calibrations >= len(BUDGETS) * 10


# -- auto's bookkeeping against straightforward reference implementations ----------------------------


def reference_matched(tree, truth, c):
    """A walk of `tree` from its root along the known continuation after c: the depth of the deepest
    node on it (None: not known far enough)."""
    children = tree.children()
    node, depth = 0, 0
    while children[node]:
        t = truth.get(c + depth + 1)
        if t is None:
            return None
        nxt = children[node].get(t)
        if nxt is None:
            return depth
        node, depth = nxt, depth + 1
    return depth


def test_one_walk_of_the_shared_tree_gives_each_budgets_count():
    """A record keeps one tree for every budget (the largest; the others are its prefixes) and walks
    it once: each budget's count equals a walk of that budget's own tree (built on its own from its
    top-b candidates), on random candidates and continuations that follow the tree for a while,
    then leave it or stop (not known yet)."""
    rng = np.random.default_rng(3)
    budgets = {"tree4": 4, "tree8": 8, "tree16": 16, "tree32": 32}
    n_none = n_deep = 0
    for case in range(300):
        L, c = int(rng.integers(1, 16)), 100
        logits = rng.normal(size=(L, 80)) * (0.5 + 3 * rng.random())
        toks, lp = top_candidates(logits, 32)
        x0 = 7
        room = int(rng.choice([L, 6, 40]))
        sizes = {m: min(b, room) + 1 for m, b in budgets.items()}
        big = build_tree(x0, toks, lp, max(sizes.values()) - 1, max_depth=L)
        drafts = toks[:, 0].tolist()
        rec = _Record(c, drafts, big, sizes)
        # a continuation along a random path of the big tree, then off it, or unknown from there
        truth, node, depth = {c: x0}, 0, 0
        children = big.children()
        while children[node] and rng.random() < 0.8:
            node = int(rng.choice(list(children[node].values())))
            depth += 1
            truth[c + depth] = big.tokens[node]
        if rng.random() < 0.5:
            truth[c + depth + 1] = 79   # not a candidate token: the walk stops here
        walker = SimpleNamespace(_truth=truth)
        walks = {}
        for m, (shape, size) in rec.pending.items():
            if shape not in walks:
                walks[shape] = AdaptiveSpeculator._walk_known(walker, c, shape)
            got = _depth_within(*walks[shape], shape.first, size)
            if m == CHAIN:
                want = reference_matched(chain_tree(x0, drafts), truth, c)
            else:
                b = min(budgets[m], room)
                want = reference_matched(reference_build_tree(x0, toks[:, :budgets[m]], lp[:, :budgets[m]], b, L),
                                         truth, c)
            assert got == want, (case, m)
            n_none += got is None
            n_deep += bool(got and got >= 2)
    assert n_none > 50 and n_deep > 50   # both outcomes well covered


class TopKOracle:
    """A drafter whose candidates are a true top-k (the first b of its top-k are its top-b, as for
    DraftModel): fixed random logits per position, the target's continuation raised by `boost`."""

    capture_layers = ()
    block_size = B

    def __init__(self, truth, boost, seed=0):
        self.truth, self.boost, self.seed = truth, boost, seed
        self.k_asked = []

    def reset(self):
        pass

    def _logits(self, pos0):
        logits = np.random.default_rng((self.seed, pos0)).normal(size=(B - 1, V)) * 2.0
        for d in range(1, B):
            if pos0 + d in self.truth:
                logits[d - 1, self.truth[pos0 + d]] += self.boost
        return logits

    def draft_candidates(self, x0, pos0, k):
        self.k_asked.append(k)
        return top_candidates(self._logits(pos0), k)

    def draft(self, x0, pos0):
        return self._logits(pos0).argmax(axis=1).tolist()


class ReferenceAuto(AdaptiveSpeculator):
    """auto's bookkeeping the straightforward way: predict() per mode; every budget's tree built on
    its own from its top-b candidates (the draft asked for the largest budget's k); each record's
    trees walked from the root at every step."""

    def predictions(self):
        return {m: self.predict(m) for m in self.modes}

    def _candidates_step(self, mode, x0, c, n_depth, room, full):
        k = max(self.budgets.values(), default=1)
        toks, lp = draft_candidates(self.drafter, x0, c, n_depth, k, self.temperature)
        drafts = [int(t) for t in toks[:n_depth, 0]]
        trees = {CHAIN: chain_tree(x0, drafts), **{m: chain_tree(x0, drafts[:n]) for m, n in self.chains.items()}}
        for m, b in self.budgets.items():
            trees[m] = reference_build_tree(x0, toks[:, :b], lp[:, :b], min(b, room), n_depth)
        if full:
            self._records.append(SimpleNamespace(c=c, at=self._tokens_seen, trees=dict(trees)))
        return trees[mode]

    def _resolve(self):
        keep = []
        for rec in self._records:
            if isinstance(rec, _Record):   # a chain step without candidates: its drafts, as a tree
                shape, _ = rec.pending[CHAIN]
                drafts = [next(iter(ch)) for ch in shape.children[:-1]]
                x0 = self._truth[rec.c]
                rec = SimpleNamespace(c=rec.c, at=rec.at, trees={CHAIN: chain_tree(x0, drafts),
                                                      **{m: chain_tree(x0, drafts[:n]) for m, n in self.chains.items()}})
            for m in list(rec.trees):
                n = reference_matched(rec.trees[m], self._truth, rec.c)
                if n is not None:
                    old = self.acceptance.get(m)
                    # the mean of the counts in effect, ACC_ALPHA at least, more after a gap of many tokens
                    gap = max(0, rec.at - self._acc_at.get(m, rec.at))
                    w = max(ACC_ALPHA, 1 / (self._acc_n.get(m, 0.0) + 1), 1 - 0.5 ** (gap / ACC_HALF_LIFE))
                    self.acceptance[m] = n if old is None else old + w * (n - old)
                    self._acc_n[m] = (1 - w) * self._acc_n.get(m, 0.0) + 1   # counts in effect
                    self._acc_at[m] = max(rec.at, self._acc_at.get(m, rec.at))
                    self.n_samples[m] += 1
                    self.resolved.append((rec.c, m, n))
                    del rec.trees[m]
            if rec.trees:
                keep.append(rec)
        self._records = keep


class ScheduledReference(ReferenceAuto):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cycle = itertools.cycle([m for m in Scheduled.schedule if m in self.modes])

    def choose(self):
        return next(self._cycle)


# trees within 10% of the chain or better, plain dear: choices move with the acceptance
CLOSE = FixedCosts(plain=9.0, draft={"chain": 2.0, "candidates": 2.5},
                   verify={(CHAIN, B): 10.0, (CHAIN, 4): 10.0, ("tree", 5): 8.0, ("tree", 9): 9.5, ("tree", 17): 11.0})
# trees far dearer than the chain: a chain step takes candidates one step in CAND_EVERY only
FAR = FixedCosts(plain=9.0, draft={"chain": 2.0, "candidates": 2.5},
                 verify={(CHAIN, B): 3.0, (CHAIN, 4): 3.0, ("tree", 5): 30.0, ("tree", 9): 30.0, ("tree", 17): 30.0})


@pytest.mark.parametrize("boost", [0.0, 2.5, 6.0])
def test_auto_makes_the_choices_and_trees_of_the_straightforward_bookkeeping(dense, boost):
    """Step for step the same modes, the same trees (nodes and order) and the same emitted tokens as
    ReferenceAuto, and in the end the same counterfactual counts and acceptance estimates, with fixed
    costs (choices then depend on the acceptance alone; measured ones would differ between the two
    runs) and with a forced schedule (every switch; chain steps with and without candidates); the
    replies end short of the block (max_tokens) too."""
    p = prompt(24, 11)
    plain, truth = plain_truth(dense, p)
    for cls, ref_cls, costs in [(AdaptiveSpeculator, ReferenceAuto, CLOSE), (Scheduled, ScheduledReference, CLOSE),
                                (Scheduled, ScheduledReference, FAR)]:
        seen = {}
        for c_ in (cls, ref_cls):
            steps = []
            drafter = TopKOracle(truth, boost)
            got, spec, _ = run(dense, p, N - 5, drafter=drafter, cls=c_, costs=costs,
                               on_step=lambda s, r, c: steps.append(
                                   (c, s.last_mode, r.tokens, s.last_tree and (s.last_tree.tokens, s.last_tree.parents,
                                                                               s.last_tree.depths))))
            same_as_plain(dense, p, got, plain[:N - 5])
            seen[c_] = (steps, list(spec.resolved), dict(spec.acceptance), dict(spec.n_samples), drafter.k_asked)
        new, ref = seen[cls], seen[ref_cls]
        assert new[:4] == ref[:4]
        # (random drafts, boost 0: plain wins and shadow drafts alone keep the counts, no tree runs)
        assert len({m for _, m, _, _ in new[0]}) >= (5 if cls is Scheduled else 3 if boost else 2)
        # the draft is asked for the largest budget's candidates where every budget's tree is recorded,
        # for the step's own budget only where nothing is recorded (the reply's last, shorter steps)
        assert max(BUDGETS) in new[4] and set(new[4]) <= {1, *BUDGETS}
        if costs is FAR:   # some chain steps drafted without candidates
            assert len(new[4]) < sum(m != PLAIN for _, m, _, _ in new[0])


def test_predictions_are_predict_per_mode(dense):
    rng = np.random.default_rng(5)
    eng = Engine(dense, n_ctx=64, n_verify_max=max(BUDGETS) + 1)
    spec = AdaptiveSpeculator(eng, Oracle({}, 0), tree_budgets=BUDGETS)
    for _ in range(200):
        costs = spec.costs
        costs.plain = None if rng.random() < 0.1 else float(rng.random())
        costs.inject_row = float(rng.random()) * 0.1
        costs.inject_call = float(rng.random()) * 0.5
        costs.draft = {k: float(rng.random()) for k in ("chain", "candidates") if rng.random() < 0.8}
        costs.verify = {key: float(rng.random()) for key in [(CHAIN, B)] + [("tree", b + 1) for b in BUDGETS]
                        if rng.random() < 0.8}
        spec.acceptance = {m: float(rng.random() * 5) for m in spec.modes if m != PLAIN and rng.random() < 0.8}
        assert spec.predictions() == {m: spec.predict(m) for m in spec.modes}
        assert list(spec.predictions()) == spec.modes


@pytest.mark.parametrize("call, row", [(0.2, 0.003), (0.0, 0.2), (1.5, 0.05)])
def test_injection_costs_fit_a_call_and_a_row_part(call, row):
    """An injection of n positions costs about call + n * row: a GPU's mostly the call (one graph
    whatever the rows), a CPU's the rows. Priced per row alone, a GPU's 256-row catch-up after a
    plain stretch looked 80x dearer than it was."""
    costs = StepCosts()
    rng = np.random.default_rng(1)
    for rows in [1, 2, 3, 1, 2, 256, 1, 3, 2, 64, 1, 2] * 4:
        costs.observe_inject(rows, (call + row * rows) * float(np.exp(rng.normal(0, 0.02))))
    assert costs.inject_ms(256) == pytest.approx(call + 256 * row, rel=0.1)
    assert costs.inject_ms(2) == pytest.approx(call + 2 * row, rel=0.1, abs=0.02)
    one_size = StepCosts()
    for _ in range(5):
        one_size.observe_inject(3, 0.6)
    assert one_size.inject_call == 0.0 and one_size.inject_ms(3) == pytest.approx(0.6)


def test_slow_runs_do_not_price_a_mode_out():
    """The first runs of a shape build graphs (on a GPU, and capture them: many times a step's cost)
    and a mode priced too high is never run again to correct it: a cost is a low quantile of its
    last runs, so slow outliers leave it, and a lasting change moves it."""
    costs = StepCosts()
    for ms in (40.0, 12.0, 1.1):   # graph build, capture, then a warm step
        costs.observe_plain(ms)
        costs.observe_draft("chain", 10 * ms)
        costs.observe_verify(CHAIN, 8, 2 * ms)
    assert costs.plain == 1.1 and costs.draft_ms("chain") == 11.0 and costs.verify_ms(CHAIN, 8) == 2.2
    for ms in (1.2, 30.0, 1.1, 25.0, 1.2):   # rebuilds (the KV window grew) between warm steps
        costs.observe_plain(ms)
    assert costs.plain == pytest.approx(1.1)
    for _ in range(8):   # a lasting change: the context grew
        costs.observe_plain(1.5)
    assert costs.plain == pytest.approx(1.5)
    costs.observe_verify(CHAIN, 4, 1.8, calibration=True)   # a calibration is the shape's first run
    costs.observe_verify(CHAIN, 4, 9.0)                       # ... a real run's capture does not undo it
    assert costs.verify_ms(CHAIN, 4) == 1.8


def test_a_verify_wider_than_any_measured_is_bounded_by_half_the_growth_so_far():
    """Calibrating a shape costs COLD_RUNS verifies of it, worth it only where the mode could win. Up
    to the widest settled shape the bound is the widest one no wider (costs grow with the rows); past
    it, that shape plus VERIFY_GROWTH_FLOOR of the per-row growth from plain to it. SmolLM2 on 2 CPU
    threads: 9.6 ms a plain step, 65.8 a 16-row chain, so a 33-row tree is bounded at 97.7 (it cost
    130.7); on the H100 1.24 and 2.32 bound it at 2.93 (it cost 4.11)."""
    costs = StepCosts()
    assert costs.verify_lower_bounds([5, 33]) == [None, None]
    for _ in range(spec_auto.COLD_RUNS):
        costs.observe_plain(9.6)
    assert costs.verify_lower_bounds([5, 33]) == [9.6, 9.6]   # nothing wider measured: plain alone
    for _ in range(spec_auto.COLD_RUNS - 1):
        costs.observe_verify(CHAIN, 16, 65.8)
    assert costs.verify_lower_bound(33) == 9.6                  # not settled: may carry its build
    costs.observe_verify(CHAIN, 16, 65.8)
    growth = spec_auto.VERIFY_GROWTH_FLOOR * (65.8 - 9.6) / 15
    assert costs.verify_lower_bounds([5, 16, 17, 33]) == pytest.approx([9.6, 65.8, 65.8 + growth, 65.8 + 17 * growth])
    assert costs.verify_lower_bound(33) == pytest.approx(97.7, abs=0.1)
    costs.observe_verify("tree", 9, 40.0, calibration=True)    # a narrower shape moves only what is above it
    assert costs.verify_lower_bounds([9, 12, 33]) == pytest.approx([40.0, 40.0, 65.8 + 17 * growth])


def test_a_switch_between_modes_is_priced_apart_from_the_steady_steps():
    """The Engine keeps one graph: the first step of another mode rebuilds it (a GPU's plain step
    after a speculative one: 3.5 against 1.1 ms). That first step's excess is the switch cost, and
    the mode's own estimate stays its steady cost, so interleaving does not price plain out."""
    costs = StepCosts()
    for ms, switched in [(1.2, True), (1.1, False), (1.1, False)]:   # start-up: after the prefill, then steady
        costs.observe_plain(ms, switched=switched)
    for _ in range(6):   # plain steps between speculative ones: every one a switch
        costs.observe_plain(3.5, switched=True)
    assert costs.plain == pytest.approx(1.1) and costs.switch == pytest.approx(2.4)
    costs.observe_verify(CHAIN, 8, 4.3, switched=True)   # a shape never run steadily: its cost as best known
    assert costs.verify_ms(CHAIN, 8) == pytest.approx(4.3 - 2.4)


def test_a_mode_stays_unless_the_other_wins_back_the_switch():
    costs = FixedCosts(plain=1.0, draft={"chain": 0.3}, verify={(CHAIN, 8): 1.5, (CHAIN, 4): 1.4})
    costs.switch = 2.4
    spec = AdaptiveSpeculator(SimpleNamespace(n_ctx=512, n_verify_max=16, model=SimpleNamespace(arch="llama")),
                              SimpleNamespace(draft=None, capture_layers=(), block_size=16), tree_budgets=())
    spec.costs = costs
    spec.last_mode = "chain7"
    near = {"chain7": 0.62, "chain3": 0.60}     # 0.02 ms a token x 64 tokens < 2.4 ms: stay
    assert spec._stay("chain3", near) == "chain7"
    far = {"chain7": 0.70, "chain3": 0.60}      # 6.4 ms > 2.4: switch
    assert spec._stay("chain3", far) == "chain3"
    spec.last_mode = PLAIN
    assert spec._stays_plain(0.98, 1.0) and not spec._stays_plain(0.6, 1.0)


def test_whole_steps_price_switches_by_their_mean_excess():
    """A whole step's time (injection, draft graphs, verify, bookkeeping) after another mode costs
    more than a steady step of its mode in every such step: that excess is a mean, not a low
    quantile, and takes in the next step's too where it is of the same mode (ggml-cuda runs a
    changed graph directly once, then captures it). The steady step stays a low quantile of the
    steady steps."""
    costs = StepCosts()
    costs.switch = 0.3   # the verify's own view of a switch, until whole steps are measured
    assert costs.switch_cost() == 0.3
    for ms in (2.5, 2.4, 9.0, 2.5):   # steady chain steps (one slow outlier)
        costs.observe_step("chain7", ms, switched=False)
    assert costs.step_ms["chain7"] == 2.4
    costs.observe_step("chain7", 5.4, switched=True)    # 3 ms over, then the capture's 1
    assert costs.switch_cost() == 0.3
    costs.observe_step("chain7", 3.4, switched=False)
    assert costs.switch_cost() == pytest.approx(4.0) and costs.step_ms["chain7"] == 2.4
    costs.observe_step("chain7", 4.4, switched=True)    # 2 ms over, then another mode
    costs.observe_step("tree4", 5.0, switched=True, expected=3.0)   # never run steadily: over its parts
    assert costs.switch_cost() == pytest.approx((4.0 + 2.0) / 2)
    costs.observe_step(PLAIN, 1.1, switched=True)
    assert costs.switch_cost() == pytest.approx((4.0 + 2.0 + 2.0) / 3)


class _Shadows(AdaptiveSpeculator):
    """auto without an engine: a plain step emits token 1, a shadow costs what the test says."""

    shadow_ms = 0.0

    def _plain_step(self, sampling):
        self.engine.n_past += 1
        return SimpleNamespace(tokens=[1])

    def _shadow(self, x0, c):
        self.costs.shadow = self.shadow_ms
        self.n_shadows += 1
        self._since_record = 0


def _shadows_in_plain_stretch(shadow_ms, verify_ms):
    """auto where plain wins (the chain accepts nothing), 2,000 steps; its shadow drafts counted."""
    costs = FixedCosts(plain=1.0, draft={"chain": 0.2, "candidates": 0.9}, verify={(CHAIN, 16): verify_ms})
    eng = SimpleNamespace(n_ctx=4096, n_past=100, n_verify_max=16, model=SimpleNamespace(arch="llama"))
    spec = _Shadows(eng, SimpleNamespace(draft=None, capture_layers=(), block_size=16, reset=lambda: None),
                    tree_budgets=(), chain_lengths=(), costs=costs)
    spec.shadow_ms = shadow_ms
    spec.acceptance[CHAIN] = 0.0
    spec.mode_steps.update({CHAIN: 3, PLAIN: 3})
    spec._attached, spec.last_mode, spec._expect_at = True, PLAIN, 100
    for _ in range(2000):
        spec.step(Sampling())
    assert spec.mode_steps[PLAIN] == 2003
    return spec.n_shadows


def test_shadow_drafts_cost_at_most_their_share_of_the_plain_time():
    """While plain wins, shadow drafts come every SHADOW_GAP_MIN plain steps, or further apart where
    one costs more than SHADOW_SHARE of that many plain steps (on the H100 a shadow, a catch-up
    injection and the draft's candidates, costs about a 1.2 ms plain step), and a quarter of that
    share while speculation is predicted SHADOW_FAR times plain's cost or more (the chain at 0.4x
    plain on 2 CPU threads)."""
    near, far = 1.2, 1.9   # the chain's step: 1.4 ms a token (plain wins, not by far), 2.1
    assert _shadows_in_plain_stretch(0.1, near) == 2000 // SHADOW_GAP_MIN
    for verify_ms, share in [(near, SHADOW_SHARE), (far, SHADOW_SHARE / 4)]:
        gap = int(np.ceil(1.3 / (share * 1.0)))   # 65 plain steps, 260
        assert 2000 // gap - 1 <= _shadows_in_plain_stretch(1.3, verify_ms) <= 2000 // gap + 1


def test_a_draw_is_priced_per_emitted_token_apart_from_the_verify(dense):
    """At T > 0 every emitted token is a draw from its row (~0.37 ms on the H100): a speculative step
    pays one per token it emits, so its verify is timed without them (with them its time grew with
    what it accepted, and a low quantile kept the steps that accepted least: the chain of 3 priced at
    1.24 ms a token ran at 1.93 on the H100 at T = 0.7). At T = 0 the argmax costs nothing."""
    costs = FixedCosts(plain=1.6, draft={"chain": 0.5}, verify={(CHAIN, 4): 1.7, (CHAIN, 16): 2.3})
    costs.draw = 0.4
    eng = SimpleNamespace(n_ctx=512, n_verify_max=16, model=SimpleNamespace(arch="llama"))
    spec = AdaptiveSpeculator(eng, SimpleNamespace(draft=None, capture_layers=(), block_size=16), tree_budgets=(),
                              chain_lengths=(3,), costs=costs)
    spec.acceptance["chain3"] = 1.0
    assert spec.predict("chain3") == pytest.approx((0.5 + 1.7) / 2)         # greedy: 1.1, ahead of plain
    spec._drawing = True
    assert spec.predict("chain3") == pytest.approx((0.5 + 1.7) / 2 + 0.4)   # sampled: 1.5
    assert spec.predictions()["chain3"] == spec.predict("chain3")
    # measured: a sampled reply times its draws, a greedy one draws nothing
    p = prompt(20, 3)
    s = Sampling(temperature=0.9, top_k=40, seed=7)
    plain, truth = plain_truth(dense, p, 60, s)
    budgets = tuple(b for b in BUDGETS if b < EXACT_TREE_NODES)   # equality: shapes that round as a step does
    got, spec, _ = run(dense, p, 60, drafter=Oracle(truth, 1), sampling=s, budgets=budgets)
    assert got == plain and spec.costs.draw > 0
    _, greedy_truth = plain_truth(dense, p, 60)
    _, spec, _ = run(dense, p, 60, drafter=Oracle(greedy_truth, 1))
    assert spec.costs.draw == 0.0
