"""`--spec auto`: each step is a plain decode, a chain speculation step or a DDTree step of one of
a few budgets, whichever the measurements predict emits tokens fastest on this engine and device.

    ms per token(mode) = (draft ms + verify ms(rows of the mode)) / (1 + accepted(mode)) + draw ms
    ms per token(plain) = the ms of a plain step (a one-row decode, nothing drafted, its draw)

At T > 0 each emitted token is a draw from its row (downloaded, processed, sampled on the host:
~0.37 ms on the H100 against a 1.2 ms step), timed apart from the verify: a verify's time with its
draws grows with what it accepts, and its low quantile was the steps that accepted least (SmolLM2 on
the H100 at T = 0.7: the chain of 3 priced at 1.24 ms a token ran at 1.93, against plain's 1.57).

Costs (StepCosts, injectable): measured on the steps that ran, split into injection (a line through
the injections seen: a part per call and a part per position), draft pass and verify (per number
of rows, as a chain's verify or a tree's). A verify shape no step has run yet is timed by a
calibration — one verify of that many rows then commit(0), which changes nothing — once per
speculator (the app makes one per Engine), and only for a mode that could win on a lower bound of
its cost. Each cost is a low quantile of its last runs (COST_WINDOW): the first runs of a shape
build graphs, and a mode priced too high by a slow run is never run again to correct it. The
Engine keeps a graph for one-token steps and one for each of the last kVerifyGraphs (3) verify
widths; a mode whose width it dropped, or whose graph's attended length has moved a step
(step_kv_pad), rebuilds it (on a GPU also recaptures it): a whole step's excess over its mode's
steady step after another mode (with the next step's: a GPU captures the new graph there) is the
switch cost (StepCosts.switch_cost, a mean: every switch pays it), kept apart, and auto changes
mode only where the gain wins it back within SWITCH_TOKENS tokens.

Acceptance, counterfactually: a step that computed the draft's per-depth top-k candidates (every
tree step, every shadow draft, and one chain step in CAND_EVERY, or CAND_EVERY_FAR while the trees
are far behind) keeps the chain (the rank-0 path) and the tree each budget would have built from
them (build_tree, as TreeSpeculator does). Once later steps have emitted the target's continuation, each is walked
along it: exactly what that mode would have accepted at that step. This holds at T = 0, and at
T > 0 too, because every mode draws from the engine's generator once per emitted token in plain
decoding's order, so the continuation is the same whichever mode emits it (up to batch-shape
rounding, which can differ between modes: then it is an approximation). A chain step without
candidates gives the chain's own count. The estimates are EMAs (ACC_ALPHA) of these counts that
average alike the few counts an estimate rests on (its first, or those since a count outweighed it)
and weigh a count more the more tokens have passed since the last one (ACC_HALF_LIFE): a shadow after
a plain stretch measures today's text (see _acc_weight).

Plain vs speculation: while plain wins, a shadow draft now and then keeps every mode's count
current without leaving plain: after a plain step, the draft pass alone from there (the draft fed
the positions decoded plainly since its last pass, at most SHADOW_CONTEXT of them), nothing
verified; its record resolves on plain's own continuation like any other. Shadows come every
`gap` plain steps, gap at least SHADOW_GAP_MIN and at least a shadow's measured cost over
SHADOW_SHARE of a plain step (a quarter of it while every mode is SHADOW_FAR behind plain), so
they cost at most SHADOW_SHARE of the decode time. (A probe, one
real speculative step after a plain stretch, measured the same count at the price of two switches
of the target's graphs: ~10 ms against a 1.2 ms step on the H100, so probes came hundreds of steps
apart and one unlucky count kept auto plain; bench/RESULTS.md.) While speculation wins, COLD_RUNS
steps in PLAIN_CHECK_EVERY are plain, so that plain's steady cost stays measured too.

Exactness: a plain step is Engine.step (or, with the target's last choice x0 pending after a
speculative step, the one-row verify of x0 that Engine.step would have decoded), a speculative step
is ChainSpeculator's or TreeSpeculator's (same walk, same draws), so greedy output equals plain
greedy and sampled output is an exact draw (for a seed, the same tokens as plain sampling).
Targets that cannot verify trees (tree_capable: a hybrid one whose Engine was made without
tree_verify) choose between plain and the chain only.
"""
from __future__ import annotations

import collections
import math
import time

import numpy as np

from luce_engine.ddtree import Tree, build_tree, chain_tree
from luce_engine.sampling import Sampling
from luce_engine.speculative import ChainSpeculator, Drafter, draws
from luce_engine.tree_speculative import TreeSpeculator, draft_candidates, tree_capable, verify_walk_commit

AUTO_TREE_BUDGETS = (8, 16, 32)   # the tree budgets auto weighs (with --tree-budget's, where it fits)
# Shorter chains auto weighs beside the full block: the same draft pass, fewer rows to verify. A
# GPU's verify cost steps at kernel boundaries (ggml's one-kernel MMVQ takes up to 8 rows: SmolLM2's
# 16-row verify cost 3.5 ms on the H100 against 1.6 at 5 rows), a CPU's grows with the rows.
AUTO_CHAIN_LENGTHS = (3, 7)
PLAIN, CHAIN = "plain", "chain"
ACC_ALPHA = 0.1          # weight of the newest acceptance count (bench/sim_auto.py: 0.2 left on dips)
ACC_HALF_LIFE = 128       # ... at least 1 - 0.5 ** (tokens since the last count / this): old counts fade
INJECT_ALPHA = 0.05      # ... of an injection in the fit of its cost (sizes vary: catch-ups are large)
SPIKE = 3.0              # an injection's cost moves its line by at most this many times
# A cost is a low quantile of its last runs, not a mean: slow runs are outliers one way (a graph
# built for a new shape, or on a GPU captured as a CUDA graph, each many times a 1 ms step; another
# process on a shared CPU), and a mode priced too high by one is not run again to correct it.
COST_WINDOW, COST_QUANTILE = 8, 0.25
COLD_RUNS = 3            # a shape's first runs: build, capture, replay (auto's start-up runs, calibrations)
# A verify wider than every settled shape is bounded below by the widest one plus this share of the
# per-row growth from plain's one row to it: a CPU's cost grows linearly with the rows (SmolLM2, 2
# threads: 9.6 ms at 1 row, 65.8 at 16, 130.7 at 33), a GPU's steps up at kernel boundaries (the
# H100: 1.24 ms at 1, 2.32 at 16, 4.11 at 33, above the 2.93 this share bounds); the plain bound alone
# let auto calibrate trees of 23 and 33 rows that could not win (3 runs of 94 and 131 ms on the CPU)
VERIFY_GROWTH_FLOOR = 0.5
SHADOW_SHARE = 0.02      # shadow drafts' cost as a share of the plain decode time, at most
# ... and a quarter of it while every speculative mode is predicted SHADOW_FAR times plain's ms per
# token or more (a CPU: the chains at 0.4-0.5x plain), where a count would have to move far to matter
SHADOW_FAR = 1.5
SHADOW_GAP_MIN = 16      # plain steps between shadows, at least (a record resolves within a block)
SHADOW_CONTEXT = 256     # a step after plain ones feeds the draft at most this many of their positions
# ... and the other way: while speculation wins, COLD_RUNS plain steps in this many speculative ones
# keep plain's steady cost measured (a switch costs a graph rebuild: checks are rare). Not two: after
# a speculative stretch the one-token graph may be rebuilt (the cache grew past a 256-cell bucket) and,
# on a GPU, captured on its next run, so a check's second step was no steady one (8 ms against 1.2
# on the H100, and plain was priced at 4.6 ms at T = 0.7 while it decoded at 1.65)
PLAIN_CHECK_EVERY = 256
SWITCH_TOKENS = 64       # another mode must win back the switch's cost within this many tokens
# In a plain stretch with nothing new to weigh (no acceptance count pending, plain no dearer), a
# step decodes without weighing the modes again, up to this many steps in a row: the weighing costs
# ~20 µs of Python, 1-2% of a GPU's plain step
PLAIN_REWEIGH = 8
CAND_EVERY = 8           # a chain step computes candidates one step in this many (for the trees' counts)
# ... and one in CAND_EVERY_FAR while every tree is predicted TREE_FAR times the best chain's ms per
# token or more: the candidates cost ~0.4 ms on a 2.4 ms GPU step (SmolLM2, H100), for counts that
# would have to move far to matter
CAND_EVERY_FAR, TREE_FAR = 32, 1.15
TRUTH_KEEP = 1024        # the known continuation is pruned when it holds more positions than this


def _per_token(draft: float | None, verify: float | None, inject_call: float, inject_row: float,
               acc: float | None, draw: float = 0.0) -> float | None:
    """ms per emitted token of a speculative step (None: a part not known yet); each step feeds the
    draft the 1 + acc positions the last one emitted, in one injection, and draws each of them."""
    if acc is None or draft is None or verify is None:
        return None
    return (draft + verify + inject_call) / (1 + acc) + inject_row + draw


class StepCosts:
    """Measured milliseconds of the parts of a step: low quantiles of the steps run, calibrations of shapes
    not yet run. verify keys: ("chain" | "tree", rows); draft keys: "chain" (proposals only) or
    "candidates" (with the top-k per depth)."""

    def __init__(self):
        self.plain: float | None = None
        self.draft: dict[str, float] = {}
        self.verify: dict[tuple[str, int], float] = {}
        # an injection of n context positions costs inject_call + n * inject_row: a weighted least-
        # squares line through the injections seen (a GPU's cost is mostly the call, a CPU's the rows)
        self.inject_call = 0.0
        self.inject_row = 0.0
        self._inject_sums: list[float] | None = None   # EMAs of 1, n, ms, n*n, n*ms
        self.warmup_runs = COLD_RUNS   # runs of each mode auto makes first (see COLD_RUNS)
        self._runs: dict = {}   # key -> the last COST_WINDOW measurements
        self.calibrated: set[tuple[str, int]] = set()   # values that come from a calibration
        # the extra ms of the first step of another mode (a batch of other rows rebuilds the
        # Engine's batch graph, on a GPU recaptures it; with one graph for everything a plain step
        # between speculative ones cost 3.5 against 1.1 ms on the H100), from the verify alone
        self.switch = 0.0
        # Whole steps, start to end (the choice, injection, draft, verify, commit, bookkeeping): each
        # mode's steady step (a low quantile, as above), and the mean excess over it of the steps
        # that follow another mode (switch_step: the target's graphs for the new rows, the catch-up
        # injection). Every switch pays it, so it is a mean, not a low quantile: on the H100 a
        # switch's parts priced it at a few ms while whole steps took ~6 ms more (bench/RESULTS.md).
        self.step_ms: dict[str, float] = {}
        self.switch_step: float | None = None
        self.shadow: float | None = None   # a shadow draft (injection and draft pass): a mean, as above
        self.draw = 0.0   # a draw of a token from its row at T > 0 (a mean); argmax at T = 0 costs ~nothing
        self._after_switch: tuple | None = None   # (mode, key, first step's excess, steady step)

    def _window(self, key, ms: float) -> collections.deque:
        runs = self._runs.setdefault(key, collections.deque(maxlen=COST_WINDOW))
        runs.append(ms)
        return runs

    def _update(self, key, ms: float) -> float:
        runs = self._window(key, ms)
        return sorted(runs)[int(COST_QUANTILE * (len(runs) - 1))]   # the fastest of the first four

    def _mean(self, key, ms: float) -> float:
        runs = self._window(key, ms)
        return sum(runs) / len(runs)

    def switch_cost(self) -> float:
        """The ms a switch of mode costs: whole steps' excess once measured, else the verify's."""
        return self.switch_step if self.switch_step is not None else self.switch

    def observe_step(self, mode: str, ms: float, *, switched: bool, expected: float | None = None) -> None:
        """A whole step's ms. A steady one (its mode ran the step before) updates the mode's steady
        step; a switch's excess over it (before the mode has run steadily, over `expected`, its
        parts' estimates) is the switch cost, with the excess of the next step if it is of the same
        mode: ggml-cuda runs a changed graph directly once, then captures it, so a GPU's switch
        costs two steps."""
        pending, self._after_switch = self._after_switch, None
        if pending is not None:   # the step after a switch: (mode, its excess, steady)
            p_mode, excess, base = pending
            if p_mode == mode and not switched:
                self.switch_step = self._mean("switch step", excess + max(0.0, ms - base))
                return
            self.switch_step = self._mean("switch step", excess)
        if not switched:
            self.step_ms[mode] = self._update(("step", mode), ms)
            return
        base = self.step_ms.get(mode, expected)
        if base is not None:
            self._after_switch = (mode, max(0.0, ms - base), base)

    def observe_shadow(self, ms: float) -> None:
        self.shadow = self._mean("shadow", ms)

    def observe_draws(self, n: int, ms: float) -> None:
        if n > 0:
            self.draw = self._mean("draw", ms / n)

    def _steady(self, key, old: float | None, ms: float, switched: bool) -> float:
        """A step's measurement: a steady one (the mode ran the step before) updates the estimate; a
        switch's gives the switch cost where the steady cost is known, else the estimate as best it can."""
        if switched and old is not None:
            self.switch = self._update("switch", max(0.0, ms - old))
            return old
        return self._update(key, ms - self.switch if switched else ms)

    def observe_plain(self, ms: float, switched: bool = False) -> None:
        self.plain = self._steady("plain", self.plain, ms, switched)

    def observe_draft(self, kind: str, ms: float) -> None:
        self.draft[kind] = self._update(("draft", kind), ms)

    def inject_ms(self, rows: int) -> float:
        return self.inject_call + self.inject_row * rows if rows > 0 else 0.0

    def observe_inject(self, rows: int, ms: float) -> None:
        if rows <= 0:
            return
        if self._inject_sums is not None:   # a stalled step moves the line by at most SPIKE times
            ms = min(ms, SPIKE * max(self.inject_ms(rows), 1e-6))
        point = [1.0, float(rows), ms, float(rows) * rows, float(rows) * ms]
        if self._inject_sums is None:
            self._inject_sums = point
        else:
            self._inject_sums = [s + INJECT_ALPHA * (x - s) for s, x in zip(self._inject_sums, point)]
        w, n, y, nn, ny = self._inject_sums
        mean_n, mean_y = n / w, y / w
        var = nn / w - mean_n * mean_n
        slope = (ny / w - mean_n * mean_y) / var if var > 1e-9 * max(1.0, mean_n * mean_n) else None
        if slope is None or slope < 0 or mean_y - slope * mean_n < 0:
            # one size seen (or no line fits): the cost as per position, as a per-row bound
            self.inject_call, self.inject_row = 0.0, mean_y / mean_n
        else:
            self.inject_call, self.inject_row = mean_y - slope * mean_n, slope

    def observe_verify(self, kind: str, rows: int, ms: float, *, calibration: bool = False,
                       switched: bool = False) -> None:
        key = (kind, rows)
        if calibration:   # the fastest of its runs: the first of the shape's window
            self._runs.pop(key, None)
            self.calibrated.add(key)
            self.verify[key] = self._update(key, ms)
            return
        self.verify[key] = self._steady(key, self.verify.get(key), ms, switched)

    def draft_settled(self, kind: str) -> bool:
        return len(self._runs.get(("draft", kind), ())) >= COLD_RUNS

    def verify_settled(self, kind: str, rows: int) -> bool:
        """Whether the cost of this verify shape can be trusted: calibrated, or run COLD_RUNS times. A
        shape run once or twice (a chain cut short at the end of a reply) may carry its graph build."""
        key = (kind, rows)
        return key in self.calibrated or len(self._runs.get(key, ())) >= COLD_RUNS

    def draft_ms(self, kind: str) -> float | None:
        # candidates cost at least the proposals; proposals at most the candidates
        return self.draft.get(kind, self.draft.get("candidates") if kind == "chain" else None)

    def verify_ms(self, kind: str, rows: int) -> float | None:
        return self.verify.get((kind, rows))

    def verify_lower_bound(self, rows: int) -> float | None:
        """A verify of more rows costs no less than one of fewer (of either kind), nor than a plain step;
        past the widest settled shape, no less than it plus VERIFY_GROWTH_FLOOR of the per-row growth
        from plain to it. Only settled costs bound (calibrated, or COLD_RUNS runs): a shape run once or
        twice may still carry its graph build, and an inflated bound would keep every wider mode from
        being tried."""
        return self.verify_lower_bounds([rows])[0]

    def verify_lower_bounds(self, rows: list[int]) -> list[float | None]:
        """verify_lower_bound of each of `rows`, the settled costs gathered once."""
        settled = [(key[1], ms) for key, ms in self.verify.items() if self.verify_settled(*key)]
        if self.plain is not None:
            settled.append((1, self.plain))
        widest = max(settled, default=None)
        growth = 0.0   # ms per row past the widest shape
        if widest is not None and self.plain is not None and widest[0] > 1:
            growth = VERIFY_GROWTH_FLOOR * max(0.0, widest[1] - self.plain) / (widest[0] - 1)
        out = []
        for r in rows:
            known = [ms for n, ms in settled if n <= r]
            bound = max(known) if known else None
            if bound is not None and r > widest[0]:
                bound = max(bound, widest[1] + growth * (r - widest[0]))
            out.append(bound)
        return out


class FixedCosts(StepCosts):
    """Costs given, never measured (tests: deterministic choices)."""

    def __init__(self, plain: float, draft: dict[str, float], verify: dict[tuple[str, int], float],
                 inject_row: float = 0.0, inject_call: float = 0.0):
        super().__init__()
        self.plain, self.draft, self.verify = plain, dict(draft), dict(verify)
        self.inject_row, self.inject_call = inject_row, inject_call
        self.warmup_runs = 0

    def observe_plain(self, ms, switched=False): pass
    def observe_draft(self, kind, ms): pass
    def observe_inject(self, rows, ms): pass
    def observe_verify(self, kind, rows, ms, *, calibration=False, switched=False): pass
    def observe_step(self, mode, ms, *, switched, expected=None): pass
    def observe_shadow(self, ms): pass
    def observe_draws(self, n, ms): pass
    def draft_settled(self, kind): return True


class _Shape:
    """A tree as the counterfactual walks read it: per node its children (token -> node) and its
    first child (the lowest-numbered; len(tree) for a leaf). The first `size` nodes of the tree are
    a tree too (a smaller budget's, Tree.prefix): node i has a child in it iff first[i] < size."""

    __slots__ = ("children", "first")

    def __init__(self, children: list[dict[int, int]], first: list[int]):
        self.children, self.first = children, first

    @classmethod
    def of_tree(cls, tree: Tree) -> "_Shape":
        n = len(tree)
        children: list[dict[int, int]] = [{} for _ in range(n)]
        first = [n] * n
        for p, t, i in zip(reversed(tree.parents), reversed(tree.tokens), range(n - 1, 0, -1)):
            children[p][t] = i
            first[p] = i   # downwards: the lowest child is written last
        return cls(children, first)

    @classmethod
    def of_chain(cls, drafts: list[int]) -> "_Shape":
        """chain_tree(x0, drafts)'s shape, without the tree."""
        n = len(drafts) + 1
        return cls([{t: i} for i, t in enumerate(drafts, 1)] + [{}], list(range(1, n + 1)))


class _Record:
    """What each mode would have drafted at the step whose x0 sat at position c: mode -> (shape,
    size), the mode's tree being the shape's first `size` nodes. Every tree mode shares one shape
    (the largest budget's tree, of which the others are prefixes); the chains share their drafts'
    (a short chain of length n: its first n + 1 nodes)."""

    __slots__ = ("c", "at", "pending")

    def __init__(self, c: int, drafts: list[int] | None, tree: Tree | None, sizes: dict[str, int],
                 chains: dict[str, int] | None = None, at: int = 0):
        self.c = c
        self.at = at   # the speculator's token count when the step ran (AdaptiveSpeculator._tokens_seen)
        self.pending: dict[str, tuple[_Shape, int]] = {}
        if drafts is not None:
            shape = _Shape.of_chain(drafts)
            self.pending[CHAIN] = (shape, len(drafts) + 1)
            for m, n in (chains or {}).items():
                self.pending[m] = (shape, min(n, len(drafts)) + 1)
        if tree is not None:
            shape = _Shape.of_tree(tree)
            for m, size in sizes.items():
                self.pending[m] = (shape, size)


class AdaptiveSpeculator(ChainSpeculator):
    """Per step, plain decoding, chain or tree speculation (see the module docstring); the same
    step()/describe()/stats interface as ChainSpeculator. tree_budgets: the DDTree budgets weighed
    (dense targets whose engine's n_verify_max holds budget + 1 rows; none on a hybrid target);
    costs: a StepCosts (default: measured on this engine)."""

    def __init__(self, engine, drafter: Drafter, *, max_draft: int | None = None,
                 tree_budgets=AUTO_TREE_BUDGETS, chain_lengths=AUTO_CHAIN_LENGTHS, temperature: float = 1.0,
                 costs: StepCosts | None = None, capture_ring: int = 4096):
        super().__init__(engine, drafter, max_draft=max_draft, capture_ring=capture_ring)
        can_tree = (tree_capable(engine) and self.max_draft > 0
                    and (hasattr(drafter, "draft_candidates") or hasattr(drafter, "logits")))
        budgets = sorted({int(b) for b in tree_budgets if 1 <= int(b) < engine.n_verify_max}) if can_tree else []
        self.budgets = {f"tree{b}": b for b in budgets}
        # short chains: the first L of the chain's drafts (named by their length)
        self.chains = {f"chain{n}": n for n in sorted(set(chain_lengths)) if 1 <= n < self.max_draft}
        self.modes = [PLAIN, CHAIN] + list(self.chains) + list(self.budgets)
        self.temperature = temperature
        self.costs = costs if costs is not None else StepCosts()
        self._chain_kind = "chain" if hasattr(drafter, "draft") else "candidates"
        # per speculative mode, its (draft kind, verify kind, rows): fixed for this speculator
        self._mode_keys = [(m, self._chain_kind if self._is_chain(m) else "candidates", self._kind(m), self._rows(m))
                           for m in self.modes if m != PLAIN]
        self.acceptance: dict[str, float] = {}     # mode -> EMA of accepted drafts per step
        self.n_samples: collections.Counter = collections.Counter()   # mode -> acceptance counts seen
        self._acc_at: dict[str, int] = {}          # mode -> _tokens_seen of its latest count
        self._acc_n: dict[str, float] = {}         # mode -> the counts its estimate rests on, in effect
        self._tokens_seen = 0                       # tokens this speculator has emitted, every reply
        self.resolved: collections.deque = collections.deque(maxlen=256)   # (c, mode, count), the latest
        self.mode_steps: collections.Counter = collections.Counter()  # mode -> steps run (all replies)
        self.reply_tokens: collections.Counter = collections.Counter()   # mode -> tokens of this reply
        self.n_shadows = self.n_calibrations = 0
        self.last_mode: str | None = None
        self.last_tree: Tree | None = None
        self._spec_run, self._checks_left = 0, 0
        self._plain_ahead = False   # this step is plain because plain wins (shadows may follow it)
        self._since_record = 0      # plain steps since the last step that made a record
        self._plain_weighed: float | None = None   # plain's cost when the weighing last chose plain
        self._unweighed = 0                          # plain steps since then that skipped it
        self._since_candidates = CAND_EVERY
        self._trees_far = False   # at the last weighing, every tree TREE_FAR behind the best chain
        self._spec_far = False    # ... every speculative mode SHADOW_FAR behind plain
        self._records: list[_Record] = []
        self._truth: dict[int, int] = {}           # context position -> the target's token there
        self._expect_at = -1                        # n_past after the last step
        self._drawing = False                       # this step's sampling draws (T > 0, penalties)
        self._draws, self._draws_ms = 0, 0.0        # ... and its draws so far, timed

    # -- the interface ----------------------------------------------------------------------------
    def attach(self) -> None:
        super().attach()
        self._forget()

    def describe(self) -> str:
        """The modes this reply used, by share of its tokens ("auto: plain 96%, chain of 15 4%")."""
        total = sum(self.reply_tokens.values())
        if not total:
            trees = f", tree budgets {'/'.join(str(b) for b in self.budgets.values())}" if self.budgets else ""
            return f"auto: plain, chain of {self.max_draft}{trees}"
        parts = [(self._label(m), n) for m, n in self.reply_tokens.most_common()]
        if len(parts) == 1:
            return f"auto: {parts[0][0]}"
        return "auto: " + ", ".join(f"{label} {100 * n / total:.0f}%" for label, n in parts)

    def _label(self, mode: str) -> str:
        if mode == PLAIN:
            return "plain"
        if self._is_chain(mode):
            return f"chain of {self._chain_length(mode)}"
        return f"tree budget {self.budgets[mode]}"

    def step(self, sampling: Sampling, *, max_emit: int | None = None, stop_ids: frozenset[int] | set = frozenset()):
        """Commits 1..max_draft+1 tokens in the mode chosen for this step (see ChainSpeculator.step
        for max_emit and stop_ids); returns a StepResult with per-token provenance."""
        eng = self.engine
        t_start = time.perf_counter()
        self.prepare()
        if eng.n_past != self._expect_at:   # a new reply (or a truncation): the counterfactuals are stale
            self._forget()
            self.reply_tokens.clear()
            self.last_mode = None            # a prefill ran since: the next step is a switch
        prev, calibrations = self.last_mode, self.n_calibrations
        self._plain_ahead = False
        self._drawing = draws(sampling)
        mode = self.choose()
        # the parts' price of the step, where the mode has no steady step measured to compare with
        expected = None if mode in self.costs.step_ms else self._expected_step(mode)
        if mode == PLAIN:
            r = self._plain_step(sampling)
            self._since_record += 1
        else:
            r = self._spec_step(mode, sampling, max_emit, stop_ids)
            self._since_record = 0
        # a reply's first step and a calibration's are neither steady nor a switch between modes
        if prev is not None and self.n_calibrations == calibrations:
            self.costs.observe_step(mode, (time.perf_counter() - t_start) * 1e3, switched=prev != mode,
                                    expected=expected)
        self.last_mode = mode
        self.mode_steps[mode] += 1
        self.reply_tokens[mode] += len(r.tokens)
        self._tokens_seen += len(r.tokens)
        self._expect_at = eng.n_past
        self._resolve()
        if self._plain_ahead and self._since_record >= self._shadow_gap() and r.tokens[0] not in stop_ids \
                and (max_emit is None or max_emit > self.max_draft):
            self._shadow(r.tokens[0], eng.n_past - 1)
        return r

    # -- choosing ---------------------------------------------------------------------------------
    def _is_chain(self, mode: str) -> bool:
        return mode == CHAIN or mode in self.chains

    def _chain_length(self, mode: str) -> int:
        return self.max_draft if mode == CHAIN else self.chains[mode]

    def _kind(self, mode: str) -> str:
        return CHAIN if self._is_chain(mode) else "tree"

    def _rows(self, mode: str) -> int:
        return self._chain_length(mode) + 1 if self._is_chain(mode) else self.budgets[mode] + 1

    def _draft_ms(self, mode: str) -> float | None:
        return self.costs.draft_ms(self._chain_kind if self._is_chain(mode) else "candidates")

    def predict(self, mode: str, verify_ms: float | None = None) -> float | None:
        """Predicted ms per emitted token (None: not known yet)."""
        if mode == PLAIN:
            return self.costs.plain
        verify = self.costs.verify_ms(self._kind(mode), self._rows(mode)) if verify_ms is None else verify_ms
        return _per_token(self._draft_ms(mode), verify, self.costs.inject_call, self.costs.inject_row,
                          self.acceptance.get(mode), self._draw_ms())

    def _draw_ms(self) -> float:
        return self.costs.draw if self._drawing else 0.0

    def _expected_step(self, mode: str) -> float | None:
        """A step of the mode as its parts' estimates price it (ms; None: not known yet)."""
        if mode == PLAIN:
            return self.costs.plain
        per_token = self.predict(mode)
        return None if per_token is None else per_token * (1 + self.acceptance[mode])

    def predictions(self) -> dict[str, float | None]:
        """predict() of every mode, in self.modes' order (one pass: this runs every step)."""
        costs, acc, call, row, draw = self.costs, self.acceptance, self.costs.inject_call, self.costs.inject_row, self._draw_ms()
        draft = {kind: costs.draft_ms(kind) for kind in {self._chain_kind, "candidates"}}
        out = {PLAIN: costs.plain}
        for m, draft_kind, kind, rows in self._mode_keys:
            out[m] = _per_token(draft[draft_kind], costs.verify_ms(kind, rows), call, row, acc.get(m), draw)
        return out

    def choose(self) -> str:
        """This step's mode."""
        if self.max_draft == 0:
            return PLAIN
        if self._plain_unchanged():   # set only by a weighing, after start-up and checks
            self._unweighed += 1
            self._plain_ahead = True
            return PLAIN
        self._plain_weighed, self._unweighed = None, 0
        costs, warm = self.costs, self.costs.warmup_runs
        # Start-up, once per speculator: the first chain and plain steps measure their costs.
        if self._draft_ms(CHAIN) is None or costs.verify_ms(CHAIN, self._rows(CHAIN)) is None \
                or self.mode_steps[CHAIN] < warm:
            return CHAIN
        if costs.plain is None or self.mode_steps[PLAIN] < warm:
            return PLAIN
        if self._checks_left > 0:
            self._checks_left -= 1
            return PLAIN
        pred = self.predictions()
        known = [v for v in pred.values() if v is not None]
        best_known = min(known)
        # calibrate a verify only when a lower bound says it could win
        unsettled = [(m, kind, rows) for m, _, kind, rows in self._mode_keys
                     if m != CHAIN and m in self.acceptance and not costs.verify_settled(kind, rows)]
        bounds = costs.verify_lower_bounds([rows for _, _, rows in unsettled]) if unsettled else ()
        for (m, kind, rows), bound in zip(unsettled, bounds):
            lb = self.predict(m, bound) if self._draft_ms(m) is not None else None
            if lb is not None and lb < best_known and self._calibrate(rows, kind):
                pred[m] = self.predict(m)
        spec = {m: v for m, v in pred.items() if m != PLAIN and v is not None}
        if not spec:   # no acceptance known yet (its records resolve a step later)
            return CHAIN
        chains = [v for m, v in spec.items() if self._is_chain(m)]
        trees = [v for m, v in spec.items() if m in self.budgets]
        self._trees_far = bool(chains and trees) and len(trees) == len(self.budgets) and min(trees) >= TREE_FAR * min(chains)
        best_spec = min(spec, key=spec.get)
        self._spec_far = spec[best_spec] >= SHADOW_FAR * pred[PLAIN]
        best_spec = self._stay(best_spec, spec)
        if spec[best_spec] < pred[PLAIN] and not self._stays_plain(spec[best_spec], pred[PLAIN]):
            self._spec_run += 1
            if self._spec_run >= PLAIN_CHECK_EVERY:   # plain's cost is measured only when it runs
                self._spec_run, self._checks_left = 0, COLD_RUNS - 1
                return PLAIN
            return best_spec
        self._spec_run = 0
        self._plain_weighed = pred[PLAIN]
        self._plain_ahead = True
        return PLAIN

    def _plain_unchanged(self) -> bool:
        """Whether this step may stay plain without weighing the modes: the last step was plain by
        the weighing's choice, no acceptance count is pending (records resolve within a block of
        the step that made them), plain is no dearer than it was then, and fewer than PLAIN_REWEIGH
        steps skipped it (a cheaper plain can only keep plain ahead; the other costs move only when
        their modes run)."""
        return (self._plain_weighed is not None and self.last_mode == PLAIN and not self._records
                and self._unweighed < PLAIN_REWEIGH
                and self.costs.plain is not None and self.costs.plain <= self._plain_weighed)

    def _shadow_gap(self) -> int:
        """Plain steps between shadow drafts: their measured cost, at most SHADOW_SHARE of plain's
        (a quarter of it while speculation is far behind)."""
        plain, shadow = self.costs.plain, self.costs.shadow
        if not plain or shadow is None:
            return SHADOW_GAP_MIN
        share = SHADOW_SHARE / 4 if self._spec_far else SHADOW_SHARE
        return max(SHADOW_GAP_MIN, math.ceil(shadow / (share * plain)))

    def _shadow(self, x0: int, c: int) -> None:
        """A shadow draft after the plain step that decoded x0 at position c: what a speculative step
        there would have drafted, recorded for the counterfactual walks; nothing verified."""
        n_depth = min(self.max_draft, self.engine.n_ctx - c - 1)
        if n_depth < self.max_draft:
            return
        t0 = time.perf_counter()
        self._catch_up(c)
        if self._chain_kind == "candidates" or self.budgets:
            self._candidates_step(CHAIN, x0, c, n_depth, self.engine.n_ctx - c - 1, full=True)
        else:
            drafts = [int(t) for t in self.drafter.draft(x0, c)[:n_depth]]
            self._records.append(_Record(c, drafts, None, {}, self.chains, self._tokens_seen))
        self.costs.observe_shadow((time.perf_counter() - t0) * 1e3)
        self.n_shadows += 1
        self._since_record = 0

    def _stay(self, best: str, spec: dict[str, float]) -> str:
        """The speculative mode of the last step while the best one would not win back the switch
        within SWITCH_TOKENS tokens."""
        last = self.last_mode
        if last in spec and last != best and (spec[last] - spec[best]) * SWITCH_TOKENS < self.costs.switch_cost():
            return last
        return best

    def _stays_plain(self, spec_ms: float, plain_ms: float) -> bool:
        """Whether plain, the last step's mode, should stay: speculation would not win back the switch."""
        return self.last_mode == PLAIN and (plain_ms - spec_ms) * SWITCH_TOKENS < self.costs.switch_cost()

    def _want_candidates(self, mode: str, explore: bool) -> bool:
        if not self.budgets:
            return False
        if not self._is_chain(mode):
            return True
        if not self.costs.draft_settled("chain"):
            # the proposals alone not timed enough (the first runs build graphs): a chain's cost
            # would be a cold run's, or the candidates' (its upper bound)
            return False
        if explore or self._since_candidates >= (CAND_EVERY_FAR if self._trees_far else CAND_EVERY):
            return True
        # no tree estimate yet: one step's candidates give every budget's count. Otherwise one chain
        # step in CAND_EVERY: the candidates cost a chain step more than a close choice can gain
        # (SmolLM2 on the H100: 0.9 against 0.5 ms of a 2.5 ms step)
        return all(m not in self.acceptance for m in self.budgets)

    def _calibrate(self, rows: int, kind: str = "tree") -> bool:
        """Time a verify of `rows` rows (a tree's, or a chain's: kind) and discard it with commit(0);
        the fastest of COLD_RUNS runs counts (build, capture, replay on a GPU)."""
        eng = self.engine
        if eng.n_past + rows > eng.n_ctx or rows > eng.n_verify_max:
            return False
        self._inject_up_to(eng.n_past)   # the verify overwrites ring rows past the context
        tokens = [0] * rows
        parents = [-1] + [(i - 1) // 2 for i in range(1, rows)]
        times = []
        for _ in range(COLD_RUNS):
            t0 = time.perf_counter()
            if kind == CHAIN:
                eng.verify(tokens, logits=False, keep_pre_logits=True)
            else:
                eng.verify_tree(tokens, parents, logits=False, keep_pre_logits=True)
            eng.commit(0)
            times.append((time.perf_counter() - t0) * 1e3)
        self.costs.observe_verify(kind, rows, min(times), calibration=True)
        self.last_mode = None   # the Engine's graph is the calibration's now: the next step is a switch
        self.n_calibrations += 1
        return True

    # -- the steps --------------------------------------------------------------------------------
    def _plain_step(self, sampling: Sampling):
        """Exactly Engine.step: one token, the target's own choice, decoded."""
        from luce_engine.engine import StepResult

        eng = self.engine
        c = eng.n_past
        t0 = time.perf_counter()
        if self._pending is not None and self._pending_at == c:
            x0 = self._pending   # drawn by the last speculative step: decode it, as Engine.step would
            eng.verify([x0], logits=False, keep_pre_logits=False)
            eng.commit(1)        # its logits row stays: the next Engine.step samples from it
            tokens = [x0]
        else:
            tokens = eng.step(sampling).tokens
        t1 = time.perf_counter()
        self._pending, self._pending_at = None, -1
        self.costs.observe_plain((t1 - t0) * 1e3, switched=self.last_mode != PLAIN)
        self._truth[c] = tokens[0]
        self._record(0, 0, t0, t0, t1)
        return StepResult(tokens, [False], decode_ms=(t1 - t0) * 1e3)

    def _spec_step(self, mode: str, sampling: Sampling, max_emit, stop_ids):
        from luce_engine.engine import StepResult

        eng = self.engine
        explore = self.mode_steps[mode] < self.costs.warmup_runs
        native, c, x0, n_depth = self._begin(sampling, max_emit, stop_ids)
        self._truth[c] = x0
        room = eng.n_ctx - c - 1   # every tree node takes a cache row
        budget = min(self.budgets.get(mode, 0), room)
        is_chain = self._is_chain(mode)
        t0 = time.perf_counter()
        tree = None   # nothing drafted: the root alone
        if n_depth > 0 and (is_chain or budget > 0):
            t_inj = self._catch_up(c)
            full = n_depth == self.max_draft
            if self._chain_kind == "candidates" or self._want_candidates(mode, explore):
                # the one place the draft's top-k is taken (draft_candidates)
                tree = self._candidates_step(mode, x0, c, n_depth, room, full)
                self.costs.observe_draft("candidates", (time.perf_counter() - t_inj) * 1e3)
                self._since_candidates = 0
            else:
                self._since_candidates += 1
                drafts = [int(t) for t in self.drafter.draft(x0, c)[:n_depth]]
                self.costs.observe_draft("chain", (time.perf_counter() - t_inj) * 1e3)
                tree = chain_tree(x0, drafts[:self._chain_length(mode)])
                if full:
                    self._records.append(_Record(c, drafts, None, {}, self.chains, self._tokens_seen))
        t1 = time.perf_counter()
        if tree is None:
            tree = Tree([x0], [-1], [0], [0.0])
        as_chain = is_chain or len(tree) == 1
        self._draws, self._draws_ms = 0, 0.0
        path, bonus = verify_walk_commit(self, tree, sampling, native, stop_ids, x0, c, as_chain)
        t2 = time.perf_counter()
        self.costs.observe_draws(self._draws, self._draws_ms)
        self.costs.observe_verify(self._kind(mode) if not as_chain else CHAIN, len(tree),
                                  (t2 - t1) * 1e3 - self._draws_ms, switched=self.last_mode != mode)
        self._pending, self._pending_at = bonus, (eng.n_past if bonus is not None else -1)
        tokens = [tree.tokens[n] for n in path]
        for i, t in enumerate(tokens[1:], start=1):
            self._truth[c + i] = t
        if bonus is not None:
            self._truth[c + len(tokens)] = bonus
        accepted = len(path) - 1
        while len(self.stats.accepted_at) < len(tree) - 1 and is_chain:
            self.stats.accepted_at.append(0)
        self._record(len(tree) - 1, accepted, t0, t1, t2)
        self.last_tree = tree
        return StepResult(tokens, [False] + [True] * accepted, n_drafted=len(tree) - 1, n_accepted=accepted,
                          decode_ms=(t2 - t1) * 1e3)

    def _catch_up(self, c: int) -> float:
        """Feed the draft the positions before c it lacks (after plain steps at most SHADOW_CONTEXT of
        them: the draft masks the rest), timed into the injection's cost; returns when it ended."""
        t0 = time.perf_counter()
        self._injected = max(self._injected, c - SHADOW_CONTEXT)
        before = self._injected
        self._inject_up_to(c)
        t1 = time.perf_counter()
        self.costs.observe_inject(c - before, (t1 - t0) * 1e3)
        return t1

    def _candidates_step(self, mode: str, x0: int, c: int, n_depth: int, room: int, full: bool) -> Tree:
        """The draft's top-k candidates and this step's tree from them; on a full-depth step also the
        record of what every mode would have drafted. Every budget's tree is a prefix of the largest
        one's (build_tree), so one tree is built; and the draft is asked for as many candidates per
        depth as the largest tree needed reads (a tree of budget b reads ranks < b only)."""
        sizes = {m: min(b, room) + 1 for m, b in self.budgets.items()}
        if full:
            need = list(sizes)   # the tree modes whose trees are wanted
        else:
            need = [] if self._is_chain(mode) else [mode]
        k = max((self.budgets[m] for m in need), default=1)
        toks, lp = draft_candidates(self.drafter, x0, c, n_depth, k, self.temperature)
        drafts = np.asarray(toks)[:n_depth, 0].tolist()   # the chain: the rank-0 candidates
        tree = build_tree(x0, toks, lp, max(sizes[m] for m in need) - 1, max_depth=n_depth) if need else None
        if full:
            self._records.append(_Record(c, drafts, tree, sizes, self.chains, self._tokens_seen))
        return chain_tree(x0, drafts[:self._chain_length(mode)]) if self._is_chain(mode) else tree.prefix(sizes[mode])

    _walk = TreeSpeculator._walk   # the target's choice at each node picks the child (a chain: the next draft)

    def _sample(self, sampling: Sampling, native, row: int) -> int:
        """The target's choice at a row; a draw (T > 0) is timed (the verify's time leaves it out)."""
        if native is None:
            return super()._sample(sampling, native, row)
        t0 = time.perf_counter()
        y = super()._sample(sampling, native, row)
        self._draws += 1
        self._draws_ms += (time.perf_counter() - t0) * 1e3
        return y

    # -- counterfactual acceptance ----------------------------------------------------------------
    def _forget(self) -> None:
        self._records.clear()
        self._truth.clear()

    def _resolve(self) -> None:
        """Walk each kept record along the continuation known so far; a finished walk is that mode's
        acceptance count at that step."""
        keep = []
        for rec in self._records:
            pending, walks = rec.pending, {}
            for m, (shape, size) in list(pending.items()):
                if shape not in walks:   # one walk of a shape serves every mode that shares it
                    walks[shape] = self._walk_known(rec.c, shape)
                n = _depth_within(*walks[shape], shape.first, size)
                if n is not None:
                    old = self.acceptance.get(m)
                    w = self._acc_weight(m, rec.at)
                    self.acceptance[m] = n if old is None else old + w * (n - old)
                    self._acc_n[m] = (1.0 - w) * self._acc_n.get(m, 0.0) + 1.0
                    self._acc_at[m] = max(rec.at, self._acc_at.get(m, rec.at))
                    self.n_samples[m] += 1
                    self.resolved.append((rec.c, m, n))
                    del pending[m]
            if pending:
                keep.append(rec)
        self._records = keep
        # positions before the oldest record are never read again: drop them now and then
        if len(self._truth) > TRUTH_KEEP:
            low = min((r.c for r in keep), default=self.engine.n_past)
            for pos in [p for p in self._truth if p < low]:
                del self._truth[pos]

    def _acc_weight(self, mode: str, at: int) -> float:
        """The weight of a new count in the mode's estimate: ACC_ALPHA between steps close together;
        more the more tokens passed since the last count (a shadow after a plain stretch: the text it
        measures is today's, the estimate's is old); and while the estimate rests on few counts in
        effect (the first ones, or a shadow's that outweighed the old), their mean: a lucky count
        that sent auto to speculate is then averaged with the next steps' rather than fading at
        ACC_ALPHA a step."""
        gap = max(0, at - self._acc_at.get(mode, at))
        return max(ACC_ALPHA, 1.0 / (self._acc_n.get(mode, 0.0) + 1), 1.0 - 0.5 ** (gap / ACC_HALF_LIFE))

    def _walk_known(self, c: int, shape: _Shape) -> tuple[list[int], bool]:
        """The shape's nodes on the known continuation after c (root first), and whether the walk
        stopped for want of the next token (True) rather than at a node without its child."""
        children, truth = shape.children, self._truth
        path = [0]
        while children[path[-1]]:
            t = truth.get(c + len(path))
            if t is None:
                return path, True
            nxt = children[path[-1]].get(t)
            if nxt is None:
                break
            path.append(nxt)
        return path, False


def _depth_within(path: list[int], unknown: bool, first: list[int], size: int) -> int | None:
    """What a walk of the tree of the first `size` nodes gives, from the walk of the whole shape:
    the depth of the deepest node on the continuation (None: not known far enough). Nodes along a
    path increase, so the path's nodes in that tree are a prefix of it."""
    depth = 0
    while depth + 1 < len(path) and path[depth + 1] < size:
        depth += 1
    if depth + 1 == len(path) and unknown and first[path[depth]] < size:
        return None   # the walk ended wanting the next token where this tree goes on
    return depth
