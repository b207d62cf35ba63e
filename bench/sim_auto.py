"""`--spec auto`'s choices on a device we cannot lease, from real acceptance and that device's measured
costs: the policy of luce_engine.spec_auto run unchanged against a stand-in engine and drafter.

    python bench/sim_auto.py record --out /tmp/traces.json [--per-category 4] [--tokens 256] [--temps 0,0.7]
    python bench/sim_auto.py simulate /tmp/traces.json [--costs h100-smollm2] [--seeds 5]

`record` (CPU, real SmolLM2 + the shipped draft): per held-out prompt and temperature, the plain
continuation (seeded as bench_spec_real.py does) and, at every position of it, the draft's chain of
proposals for a step starting there. Acceptance depends on the text, not on the device, so these
traces stand for any device (up to batch-shape near-ties).

`simulate`: every fixed mode (plain, chains of 15, 7 and 3) and `auto` step through the traces, the
prompts in order and T = 0 before T = 0.7 with one speculator each (as the app and the bench keep
one), on a clock that advances by the device's measured cost of each engine and draft call (COSTS,
from bench/RESULTS.md, with seeded noise): auto measures those costs as it would measure real ones
(spec_auto's `time` is this clock), after one unmeasured warm-up reply as the bench has; `--cold`
adds the first calls' graph builds and captures, `--switch` the rebuild when the target's batch rows
change (the Engine keeps one graph for batches, one for one-token steps). Reports simulated tok/s
and each mode's ratio to plain, per temperature and category, and auto's share of tokens per mode.
Trees are left out (the traces hold the chain's proposals only).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.sim_clock import Clock, clock_patched  # noqa: E402

# Measured costs in ms (bench/RESULTS.md). verify: rows -> verify + commit; sample: a draw at T > 0
# (the row's download and the sampler), paid once per emitted token in every mode.
COSTS = {
    "h100-smollm2": {   # SmolLM2 Q4_1 + the shipped draft, H100, 2026-12-06 (profile_smol, spec_real)
        "plain": 1.14, "sample": 0.40, "draft": 0.60, "inject_call": 0.20, "inject_row": 0.003,
        "verify": {1: 1.14, 4: 1.55, 5: 1.64, 8: 1.79, 9: 3.39, 16: 3.50},
    },
    "h100-smollm2-1207": {   # the same with luce's small-batch kernels up to 16 rows, H100, 2026-12-07
        # (auto's own estimates in auto_check / auto_trace: its steady plain, chain and verify costs)
        "plain": 1.20, "sample": 0.40, "draft": 0.50, "inject_call": 0.20, "inject_row": 0.003,
        "verify": {1: 1.20, 4: 1.45, 8: 1.65, 16: 2.30},
    },
    "cpu2-smollm2": {   # the same on 2 CPU threads of this container (2026-12-04/06: chain 0.22x plain;
        # verify rows scale like prefill, ~5 ms a row; the draft's 16-row pass with its LM head ~15 ms)
        "plain": 8.5, "sample": 0.30, "draft": 15.0, "inject_call": 0.3, "inject_row": 0.2,
        "verify": {1: 8.5, 4: 22.0, 8: 42.0, 16: 80.0},
    },
}
CHAINS = {"chain15": 15, "chain7": 7, "chain3": 3}


# --- record ------------------------------------------------------------------------------------

def record(args) -> None:
    from luce_engine import DraftModel, Engine, Model, Sampling, default_model_path
    from luce_engine.default_draft import shipped_draft_path
    from luce_engine.speculative import ChainSpeculator
    from tools.dflash_train.corpus import CATEGORIES, heldout_prompts
    from tools.dflash_train.prompt_ids import PromptEncoder

    target = default_model_path()
    model = Model(target, device="cpu", n_threads=args.threads)
    draft = DraftModel(shipped_draft_path(), model)
    enc = PromptEncoder(target)
    prompts = [p for c in CATEGORIES for p in [q for q in heldout_prompts() if q.category == c][:args.per_category]]
    n_ctx = max(len(enc.encode(p.messages())) for p in prompts) + args.tokens + 64
    eng = Engine(model, n_ctx=n_ctx)
    spec = ChainSpeculator(eng, draft, max_draft=15)   # its capture and injection, no speculative step
    eog = set(model.tokenizer.eog_ids)
    out = {"target": Path(target).name, "eog": sorted(eog), "traces": []}
    for temp in [float(t) for t in args.temps.split(",")]:
        for i, p in enumerate(prompts):
            ids = enc.encode(p.messages())
            eng.speculator = None
            eng.truncate(0)
            spec.attach()
            eng.prefill(ids)
            sampling = Sampling(temperature=temp, seed=1000 + i)   # bench_spec_real.py's seeds
            c0, tokens, proposals = eng.n_past, [], []
            while len(tokens) < args.tokens:
                c = eng.n_past
                t = eng.step(sampling).tokens[0]   # the token at position c
                spec._inject_up_to(c)
                proposals.append([int(x) for x in draft.draft(t, c)[:15]])
                tokens.append(int(t))
                if t in eog:
                    break
            out["traces"].append({"category": p.category, "temperature": temp, "c0": c0, "tokens": tokens,
                                  "proposals": proposals})
            print(f"T={temp} {p.category} prompt {i}: {len(tokens)} tokens", flush=True)
    Path(args.out).write_text(json.dumps(out))
    print(f"wrote {args.out}")


# --- simulate ----------------------------------------------------------------------------------

class StandIn:
    """The engine and the drafter at once, over one trace: the target's choice at position p is
    tokens[p - c0]; the draft's proposals for a step starting at p are proposals[p - c0]."""

    def __init__(self, costs: dict, clock: Clock, rng: np.random.Generator, noise: float,
                 cold: tuple[float, ...] = (), switch: float = 0.0, catch_up: float = 0.0, verify_graphs: int = 3,
                 kv_pad: int = 0):
        self.costs, self.clock, self.rng, self.noise = costs, clock, rng, noise
        self.cold = cold                      # extra ms of a shape's first calls (graph build, capture)
        # extra ms when a verify's width has no graph kept: the Engine keeps one for one-token steps
        # and one for each of the last `verify_graphs` widths (kVerifyGraphs; 1 before 2026-12-07),
        # and rebuilds (on a GPU: and recaptures) one for a width it dropped (a first one is `cold`).
        # kv_pad > 0: a graph also attends the cache in steps of kv_pad cells (step_kv_pad) and is
        # rebuilt, at that cost, when its step changes (the context crossed one; a new reply)
        self.switch, self.verify_graphs, self.kv_pad = switch, verify_graphs, kv_pad
        self._widths: list[tuple[int, int]] = []   # kept (rows, attended step), the most recently used last
        self._seen: set[int] = set()
        self._step_kv: int | None = None           # the one-token graph's attended step
        # extra ms of an injection of more rows than a step emits (a shadow's or a switch's catch-up after a plain
        # stretch) and of the next one: the draft keeps one injection graph (and its context grew)
        self.catch_up, self._injected_big = catch_up, False
        self._calls: collections.Counter = collections.Counter()
        self.n_ctx, self.n_verify_max, self.tree_verify = 1 << 20, 16, False
        self.model = type("M", (), {"arch": "llama"})()
        self.capture_layers, self.block_size = (1,), 16
        self._core = self
        self.n_past, self._rows_at = 0, 0
        self.sampled = False

    def load(self, trace: dict) -> None:
        self.c0, self.tokens, self.proposals = trace["c0"], trace["tokens"], trace["proposals"]
        self.n_past = self._rows_at = self.c0
        self.sampled = trace["temperature"] > 0

    def _spend(self, ms: float, shape=None) -> None:
        extra = 0.0
        if shape is not None:
            n = self._calls[shape]
            self._calls[shape] += 1
            extra = self.cold[n] if n < len(self.cold) else 0.0
        self.clock.spend(ms * float(np.exp(self.rng.normal(0.0, self.noise))) + extra)

    def _truth(self, p: int) -> int:
        return self.tokens[min(p - self.c0, len(self.tokens) - 1)]

    def _verify_ms(self, rows: int) -> float:
        table = self.costs["verify"]
        if rows in table:
            return table[rows]
        lo = max(r for r in table if r < rows)
        hi = min((r for r in table if r > rows), default=lo)
        return table[lo] if hi == lo else table[lo] + (table[hi] - table[lo]) * (rows - lo) / (hi - lo)

    # the engine
    def set_capture(self, *a, **k): pass
    def _native_params(self, sampling): return sampling

    def _shape(self, rows: int) -> None:
        kv = -(-(self.n_past + rows) // self.kv_pad) if self.kv_pad else 0
        if rows == 1:   # the one-token graph: kept, rebuilt for another attended step
            if self._step_kv is not None and kv != self._step_kv:
                self.clock.spend(self.switch)
            self._step_kv = kv
            return
        kept = next((i for i, (w, _) in enumerate(self._widths) if w == rows), None)
        if kept is not None:
            if self._widths.pop(kept)[1] != kv:
                self.clock.spend(self.switch)
        elif rows in self._seen:
            self.clock.spend(self.switch)
        self._seen.add(rows)
        self._widths = (self._widths + [(rows, kv)])[-self.verify_graphs:]

    def step(self, sampling):
        from luce_engine.engine import StepResult
        self._shape(1)
        t = self._truth(self.n_past)
        # a decode step and a 1-row verify share the Engine's graph (cold once for both)
        self._spend(self.costs["plain"] + (self.costs["sample"] if self.sampled else 0.0), ("verify", 1))
        self.n_past += 1
        self._rows_at = self.n_past
        return StepResult([t], [False])

    def verify(self, tokens, logits=False, keep_pre_logits=True):
        self._shape(len(tokens))
        self._spend(self._verify_ms(len(tokens)), ("verify", len(tokens)))
        self._rows_at = self.n_past + 1   # row i chooses the token at n_past + 1 + i

    def commit(self, k: int) -> None:
        self.n_past += k

    def argmax(self, i: int = -1) -> int:
        return self._truth(self.n_past if i < 0 else self._rows_at + i)

    def sample(self, native, i: int) -> int:   # _core.sample
        self._spend(self.costs["sample"])
        return self.argmax(i)

    # the drafter
    def reset(self) -> None: pass

    def inject_captured(self, engine, start: int, n: int) -> None:
        big = n > self.block_size
        extra = self.catch_up if big or self._injected_big else 0.0
        self._injected_big = big
        self._spend(self.costs["inject_call"] + self.costs["inject_row"] * n)
        self.clock.spend(extra)

    def draft(self, x0: int, pos0: int) -> list[int]:
        self._spend(self.costs["draft"], "draft")
        return self.proposals[min(pos0 - self.c0, len(self.proposals) - 1)]


def run_mode(mode: str, traces: list[dict], costs: dict, eog: frozenset, seed: int, noise: float,
             cold: tuple[float, ...] = (), switch: float = 0.0, catch_up: float = 0.0,
             verify_graphs: int = 3, kv_pad: int = 0) -> list[tuple]:
    """(category, temperature, tokens, simulated seconds, tokens by mode) per trace, in order."""
    with clock_patched(Clock()) as clock:
        return _run(mode, traces, costs, eog, seed, noise, clock, cold, switch, catch_up, verify_graphs, kv_pad)


def _run(mode, traces, costs, eog, seed, noise, clock, cold=(), switch=0.0, catch_up=0.0, verify_graphs=3,
         kv_pad=0) -> list[tuple]:
    import luce_engine.spec_auto as spec_auto
    import luce_engine.speculative as speculative
    from luce_engine.sampling import Sampling

    eng = StandIn(costs, clock, np.random.default_rng(seed), noise, cold, switch, catch_up, verify_graphs, kv_pad)
    if mode == "auto":
        spec = spec_auto.AdaptiveSpeculator(eng, eng, max_draft=15, tree_budgets=())
    elif mode != "plain":
        spec = speculative.ChainSpeculator(eng, eng, max_draft=CHAINS[mode])
    rows = []
    for i, tr in enumerate([traces[0], *traces]):   # the first once more, unmeasured: the bench's warm-up
        if mode != "plain":   # as bench_spec_real.py: attached before each prompt's prefill
            eng.n_past = 0
            spec.attach()
        eng.load(tr)
        sampling = Sampling(temperature=tr["temperature"], seed=1)
        t0, n, by_mode = clock.t, len(tr["tokens"]), collections.Counter()
        done = 0
        while done < n:
            if mode == "plain":
                r = eng.step(sampling)
            else:
                r = spec.step(sampling, max_emit=n - done, stop_ids=eog)
                by_mode[spec.last_mode if mode == "auto" else mode] += len(r.tokens)
            done += len(r.tokens)
        if i > 0:
            rows.append((tr["category"], tr["temperature"], n, clock.t - t0, by_mode))
    return rows


def simulate(args) -> None:
    data = json.loads(Path(args.traces).read_text())
    traces, costs = data["traces"], COSTS[args.costs]
    cold = tuple(float(x) for x in args.cold.split(",") if x)
    modes = ["plain", *CHAINS, "auto"]
    tok = collections.defaultdict(float)
    sec = collections.defaultdict(float)
    shares = collections.defaultdict(collections.Counter)
    for seed in range(args.seeds):
        for m in modes:
            for cat, temp, n, s, by_mode in run_mode(m, traces, costs, frozenset(data["eog"]), seed, args.noise,
                                                     cold, args.switch, args.catch_up, args.verify_graphs,
                                                     args.kv_pad):
                for key in ((m, temp, cat), (m, temp, "all")):
                    tok[key] += n
                    sec[key] += s
                shares[(m, temp)].update(by_mode)
    temps = sorted({t["temperature"] for t in traces})
    cats = sorted({t["category"] for t in traces})
    print(f"{len(traces)} traces, costs {args.costs}, {args.seeds} noise seeds (sd {args.noise}); tok/s and x plain")
    print(f"{'mode':8s} {'T':>4s} {'tok/s':>7s} {'x':>6s} " + " ".join(f"{c:>6s}" for c in cats))
    for temp in temps:
        for m in modes:
            rate = lambda c: tok[(m, temp, c)] / sec[(m, temp, c)]   # noqa: E731
            ratio = lambda c: rate(c) / (tok[("plain", temp, c)] / sec[("plain", temp, c)])   # noqa: E731
            line = f"{m:8s} {temp:4.1f} {rate('all'):7.1f} {ratio('all'):6.3f} " + " ".join(f"{ratio(c):6.3f}" for c in cats)
            if m == "auto":
                total = sum(shares[(m, temp)].values())
                line += "  | " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in shares[(m, temp)].most_common())
            print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", required=True)
    r.add_argument("--per-category", type=int, default=4)
    r.add_argument("--tokens", type=int, default=256)
    r.add_argument("--temps", default="0,0.7")
    r.add_argument("--threads", type=int, default=2)
    s = sub.add_parser("simulate")
    s.add_argument("traces")
    s.add_argument("--costs", default="h100-smollm2", choices=sorted(COSTS))
    s.add_argument("--cold", default="", help="extra ms of the first calls of each shape (a plain step, a "
                   "verify of n rows, a draft pass), comma list: e.g. 8,4 = a graph build, then a CUDA graph capture")
    s.add_argument("--switch", type=float, default=0.0, help="extra ms when the target's batch rows change "
                   "(one batch graph kept; with one graph for everything the H100 ran a plain step after a "
                   "speculative one in 3.5 ms against 1.1)")
    s.add_argument("--catch-up", type=float, default=0.0, help="extra ms of an injection of more rows than a "
                   "block (a shadow's or a switch's catch-up after plain steps) and of the injection after it (the draft's "
                   "graphs rebuilt there and back; the H100's probes, real steps after plain ones, cost ~4 ms more than a steady step)")
    s.add_argument("--verify-graphs", type=int, default=3, help="verify widths whose graphs the Engine keeps "
                   "(kVerifyGraphs; 1 before 2026-12-07): --switch is paid for another width")
    s.add_argument("--kv-pad", type=int, default=0, help="graphs attend the cache in steps of this many cells "
                   "(step_kv_pad) and pay --switch when that changes (0: not modelled)")
    s.add_argument("--seeds", type=int, default=5)
    s.add_argument("--noise", type=float, default=0.05, help="sd of the log-normal noise on every cost")
    args = ap.parse_args()
    record(args) if args.cmd == "record" else simulate(args)


if __name__ == "__main__":
    main()
