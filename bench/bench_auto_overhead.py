"""The Python cost of a `--spec auto` step (AdaptiveSpeculator's bookkeeping) against fixed chain and
tree steps, and of build_tree, with the engine's own work taken out.

Two phases:

  record   the default model (SmolLM2-135M) and the shipped draft, on the CPU: greedy continuations of
           a few held-out prompts and, at every position, the draft's top-32 candidates per depth
           (DraftModel.top_candidates) with x0 the target's token there. Saved to --data. Also times
           the draft's top-k for a few k (does the candidate count cost anything?).
  replay   the same speculators on a fake engine and drafter that serve the recorded target tokens and
           candidates and cost no time, so what is timed is the speculators' Python only. A fake
           clock stands in for time.perf_counter inside the engine modules: each fake engine / draft
           call advances it by an H200-like cost (SIM_MS), so auto measures those costs and its choices
           are deterministic: "auto" takes tree 4 on about half its steps and plain on the rest,
           "auto*" (plain and verifies of more than 5 rows dearer) tree 4 on every step, as auto
           did on the H200 of 2026-12-06.

Output: µs per step (time.perf_counter, the median of --repeats passes over all prompts; auto also by
the mode each step took), and with --callgrind the instructions per step counted by `valgrind
--tool=callgrind` (deterministic with OMP_NUM_THREADS=1: two runs of 1 and 1 + --cg-rounds passes
after the first, their difference divided by the extra steps). A digest of every step's mode, tree
(tokens, parents) and auto's acceptance estimates tells whether two builds made the same choices
and trees. The recorded data goes to bench/results/ (not committed); a later run reuses it.

    python bench/bench_auto_overhead.py [--record] [--callgrind] [--threads 2] [--budgets 4,8,16,32]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.sim_clock import Clock, clock_patched  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "results" / "auto_overhead_candidates.npz"
K_RECORD = 32

# H200-like milliseconds of the engine's parts (bench/RESULTS.md, 2026-12-06: a 16-row chain verify
# 3.4 ms, a 9-row tree 3.5 ms, a 33-row tree 4.6 ms), with plain dearer and a draft and a small verify
# cheaper (plain 1.12, draft 0.8, tree-4 verify 1.7 there), so that tree 4 wins most steps at the
# recorded (CPU) acceptance, as it won 95% of the H200's.
SIM_MS = {"plain": 1.4, "draft": 0.6, "top_k": 0.2}
DEAR_PLAIN_MS, DEAR_BIG_VERIFY_MS = 4.0, 3.0   # "auto*": tree 4 wins nearly every step
DEAR_VERIFY_MS = 20.0   # "auto-": every verify of more than one row costs this more: plain wins


def sim_verify_ms(rows: int) -> float:
    return 1.0 + 0.1 * (rows - 1) if rows <= 8 else 3.0 + 0.05 * (rows - 8)


# -- record -----------------------------------------------------------------------------------------
def record(args) -> None:
    from luce_engine import DraftModel, Engine, Model, default_model_path
    from luce_engine.default_draft import shipped_draft_path
    sys.path.insert(0, str(ROOT))   # tools/
    from tools.dflash_train.corpus import CATEGORIES, heldout_prompts
    from tools.dflash_train.prompt_ids import PromptEncoder

    target = default_model_path()
    model = Model(target, device="cpu", n_threads=args.threads)
    draft = DraftModel(shipped_draft_path(), model)
    n_depth = draft.block_size - 1
    enc = PromptEncoder(target)
    prompts = heldout_prompts()
    prompts = [p for c in CATEGORIES for p in [q for q in prompts if q.category == c][:1]]
    out = {}
    for i, p in enumerate(prompts):
        ids = enc.encode(p.messages())
        eng = Engine(model, n_ctx=len(ids) + args.tokens + 64, n_verify_max=n_depth + 1)
        eng.set_capture(list(draft.capture_layers), output=True, ring_size=4096)
        draft.reset()
        eng.prefill(ids)
        for _ in range(args.tokens):
            eng.step()
        tokens = list(eng.tokens)
        # the target's token at position c is tokens[c]; the draft at c sees the features of 0..c-1
        P, n_pos = len(ids), args.tokens - n_depth - 1
        toks = np.zeros((n_pos, n_depth, K_RECORD), np.int64)
        lps = np.zeros((n_pos, n_depth, K_RECORD), np.float64)
        draft.inject_captured(eng, 0, P)
        for j in range(n_pos):
            c = P + j
            if j:
                draft.inject_captured(eng, c - 1, 1)
            draft.draft(tokens[c], c)
            toks[j], lps[j] = draft.top_candidates(K_RECORD, 1.0, n_depth)
        out[f"tokens{i}"], out[f"cand_tokens{i}"], out[f"cand_logp{i}"] = np.array(tokens), toks, lps
        out[f"prompt_len{i}"] = np.array(P)
        print(f"recorded prompt {i} ({p.category}): {P} prompt tokens, {n_pos} positions", flush=True)
        if i == 0:
            topk_costs(draft, tokens[P], P, n_depth)
    DATA.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(DATA, n=len(prompts), **out)


def topk_costs(draft, x0, c, n_depth, repeats=51) -> None:
    """The draft's top-k on its device for a few k, each k's graph built first (one warm-up call)."""
    draft.draft(x0, c)
    print(f"  DraftModel.top_candidates(k, n_depth={n_depth}) on the CPU, median of {repeats}:")
    for k in (1, 4, 8, 16, 32):
        draft.top_candidates(k, 1.0, n_depth)
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            draft.top_candidates(k, 1.0, n_depth)
            ts.append((time.perf_counter() - t0) * 1e3)
        print(f"    k={k:<3} {statistics.median(ts):7.3f} ms")
    ts = []
    for r in range(repeats):   # alternating k: the top-k graph is cached for one key only
        t0 = time.perf_counter()
        draft.top_candidates(4 if r % 2 else 32, 1.0, n_depth)
        ts.append((time.perf_counter() - t0) * 1e3)
    print(f"    k alternating 4/32: {statistics.median(ts):7.3f} ms")


# -- replay -----------------------------------------------------------------------------------------
class FakeModel:
    arch = "llama"


class FakeEngine:
    """Serves a recorded greedy continuation: the target's choice at a row of depth d of the last
    verify is the recorded token at c + d + 1. Costs SIM_MS on the clock, nothing else."""

    model = FakeModel()
    tree_verify = False

    def __init__(self, tokens, prompt_len: int, end: int, clock: Clock, n_verify_max: int, dear: str = ""):
        self.truth, self.P, self.end, self.clock = tokens, prompt_len, end, clock
        self.plain_ms = DEAR_PLAIN_MS if dear == "plain" else SIM_MS["plain"]
        self.big_verify_ms = DEAR_BIG_VERIFY_MS if dear == "plain" else 0.0
        self.spec_verify_ms = DEAR_VERIFY_MS if dear == "spec" else 0.0
        self.n_ctx, self.n_verify_max = end + 64, n_verify_max
        self.n_past, self._base, self._depths = prompt_len, prompt_len, [0]

    def restart(self) -> None:
        self.n_past = self.P

    def set_capture(self, *a, **k): pass
    def _native_params(self, s): return None

    def argmax(self, row: int = -1) -> int:
        if row == -1:
            return int(self.truth[self.n_past])
        return int(self.truth[self._base + self._depths[row] + 1])

    def verify(self, tokens, *, logits=True, keep_pre_logits=True):
        self._base, self._depths = self.n_past, range(len(tokens))
        self.clock.spend(self.verify_ms(len(tokens)))

    def verify_tree(self, tokens, parents, *, logits=True, keep_pre_logits=True):
        depths = [0] * len(parents)
        for i in range(1, len(parents)):
            depths[i] = depths[parents[i]] + 1
        self._base, self._depths = self.n_past, depths
        self.clock.spend(self.verify_ms(len(tokens)))

    def verify_ms(self, rows: int) -> float:
        return sim_verify_ms(rows) + (self.big_verify_ms if rows > 5 else 0.0) + (self.spec_verify_ms if rows > 1 else 0.0)

    def commit(self, k: int) -> None:
        self.n_past += k

    def commit_path(self, path) -> None:
        self.n_past += len(path)

    def step(self, sampling=None):
        from luce_engine.engine import StepResult

        tok = int(self.truth[self.n_past])
        self.n_past += 1
        self.clock.spend(self.plain_ms)
        return StepResult([tok], [False])


class FakeDrafter:
    """The recorded draft: rank-0 proposals and top-k candidates (copies, as DraftModel returns)."""

    capture_layers = ()

    def __init__(self, cand_tokens, cand_logp, prompt_len: int, clock: Clock):
        self.toks, self.lp, self.P, self.clock = cand_tokens, cand_logp, prompt_len, clock
        self.block_size = cand_tokens.shape[1] + 1
        self._at = 0
        self.k_asked: list[int] = []

    def reset(self): pass

    def logits(self):   # its presence tells auto that candidates can be had (top_candidates serves them)
        raise NotImplementedError

    def draft(self, x0: int, pos0: int) -> list[int]:
        self._at = pos0 - self.P
        self.clock.spend(SIM_MS["draft"])
        return [int(t) for t in self.toks[self._at, :, 0]]

    def top_candidates(self, k: int, temperature: float = 1.0, n_depth: int | None = None):
        n = self.block_size - 1 if n_depth is None else n_depth
        self.k_asked.append(k)
        self.clock.spend(SIM_MS["top_k"])
        return (np.ascontiguousarray(self.toks[self._at, :n, :k]),
                np.ascontiguousarray(self.lp[self._at, :n, :k]))


def load(path: Path):
    d = np.load(path)
    return [(d[f"tokens{i}"], int(d[f"prompt_len{i}"]), d[f"cand_tokens{i}"], d[f"cand_logp{i}"])
            for i in range(int(d["n"]))]


class PlainDecoder:
    """Engine.step alone, the loop a reply without speculation runs: the baseline of "auto-"."""

    def __init__(self, eng, drafter):
        self.engine, self.drafter = eng, drafter

    def step(self, sampling, **kw):
        return self.engine.step(sampling)


def make_runs(data, mode: str, budgets, clock: Clock):
    """Per prompt a fake engine and a speculator of `mode` ("plain", "chain", "treeB", "auto";
    "auto*": auto where plain steps and verifies of more than 5 rows cost more, so that it takes
    tree 4 nearly every step; "auto-": auto where every verify costs more, so that it decodes
    plainly but for its shadow drafts), kept across passes."""
    from luce_engine.spec_auto import AdaptiveSpeculator
    from luce_engine.speculative import ChainSpeculator
    from luce_engine.tree_speculative import TreeSpeculator

    runs = []
    for tokens, P, ct, cl in data:
        end = P + ct.shape[0]
        dear = {"auto*": "plain", "auto-": "spec"}.get(mode, "")
        eng = FakeEngine(tokens, P, end, clock, n_verify_max=max(budgets) + 1, dear=dear)
        drafter = FakeDrafter(ct, cl, P, clock)
        if mode == "plain":
            spec = PlainDecoder(eng, drafter)
        elif mode == "chain":
            spec = ChainSpeculator(eng, drafter)
        elif mode.startswith("tree"):
            spec = TreeSpeculator(eng, drafter, budget=int(mode[4:]))
        else:
            spec = AdaptiveSpeculator(eng, drafter, tree_budgets=budgets)
        runs.append((eng, spec))
    return runs


def one_pass(runs, digest=None, by_mode=None) -> int:
    """Every prompt's continuation once (a new reply each); returns the steps taken. by_mode: mode ->
    [steps, seconds] of auto's steps by the mode they took."""
    from luce_engine import Sampling

    s, stop, steps, clock = Sampling(), frozenset(), 0, time.perf_counter
    for eng, spec in runs:
        eng.restart()
        while eng.n_past < eng.end:
            t0 = clock() if by_mode is not None else 0.0
            r = spec.step(s, max_emit=eng.end - eng.n_past, stop_ids=stop)
            if by_mode is not None:
                acc = by_mode.setdefault(getattr(spec, "last_mode", None), [0, 0.0])
                acc[0] += 1
                acc[1] += clock() - t0
            steps += 1
            if digest is not None:
                tree = getattr(spec, "last_tree", None)
                acc = sorted(getattr(spec, "acceptance", {}).items())
                digest.update(repr((getattr(spec, "last_mode", None), r.tokens,
                                    (tree.tokens, tree.parents) if tree is not None else None,
                                    [(m, round(a, 12)) for m, a in acc])).encode())
    return steps


def replay(args, modes) -> dict:
    """mode -> (µs per step, steps per pass, digest, auto's [steps, s] by the mode it took, top-k sizes asked)."""
    data = load(args.data)
    budgets = [int(b) for b in args.budgets.split(",")]
    out = {}
    for mode in modes:
        with clock_patched(Clock()) as clock:
            runs = make_runs(data, mode, budgets, clock)
            digest = hashlib.sha256()
            steps = one_pass(runs, digest)   # the first pass: auto's start-up, calibrations; the digest
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                n = one_pass(runs)
                times.append((time.perf_counter() - t0) * 1e6 / n)
            by_mode: dict = {}
            if mode.startswith("auto"):
                for _ in range(args.repeats):
                    one_pass(runs, by_mode=by_mode)
            k_asked = sorted({k for _, sp in runs for k in sp.drafter.k_asked})
            out[mode] = (statistics.median(times), steps, digest.hexdigest()[:12], by_mode, k_asked)
    return out


def replay_only(args) -> None:
    """For callgrind: args.rounds passes of one mode after its first, nothing printed but the steps."""
    data = load(args.data)
    budgets = [int(b) for b in args.budgets.split(",")]
    with clock_patched(Clock()) as clock:
        if args.only == "build_tree":
            n = build_tree_loop(data, budgets, args.rounds)
        else:
            runs = make_runs(data, args.only, budgets, clock)
            n = sum(one_pass(runs) for _ in range(1 + args.rounds))
    print(f"steps {n}")


def build_tree_loop(data, budgets, rounds: int) -> int:
    """build_tree for every budget on every recorded position, `rounds` times; returns the calls."""
    from luce_engine.ddtree import build_tree

    n = 0
    for _ in range(rounds):
        for tokens, P, ct, cl in data:
            for j in range(ct.shape[0]):
                for b in budgets:
                    build_tree(int(tokens[P + j]), ct[j, :, :b], cl[j, :, :b], b, max_depth=ct.shape[1])
                    n += 1
    return n


def build_tree_us(args) -> dict:
    from luce_engine.ddtree import build_tree

    data = load(args.data)
    budgets = [int(b) for b in args.budgets.split(",")]
    out = {}
    for b in budgets:
        calls = [(int(tokens[P + j]), ct[j, :, :b], cl[j, :, :b])
                 for tokens, P, ct, cl in data for j in range(ct.shape[0])]
        ts = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for x0, t, lp in calls:
                build_tree(x0, t, lp, b, max_depth=t.shape[0])
            ts.append((time.perf_counter() - t0) * 1e6 / len(calls))
        out[b] = statistics.median(ts)
    return out


def callgrind_ir(args, only: str, rounds: int) -> tuple[int, int]:
    """(instructions, steps) of a run of `only` under callgrind."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
           "--data", str(args.data), "--budgets", args.budgets, "--only", only, "--rounds", str(rounds)]
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")   # OpenMP spinning: counts vary
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    ir = next(int(line.split()[-1].replace(",", "")) for line in p.stderr.splitlines() if "Collected" in line)
    steps = next(int(line.split()[-1]) for line in p.stdout.splitlines() if line.startswith("steps"))
    return ir, steps


def per_step_ir(args, only: str) -> float:
    ir1, s1 = callgrind_ir(args, only, 1)
    ir2, s2 = callgrind_ir(args, only, 1 + args.cg_rounds)
    return (ir2 - ir1) / (s2 - s1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true", help="record the candidates first (real model, CPU)")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=256, help="tokens recorded per prompt")
    ap.add_argument("--budgets", default="4,8,16,32", help="auto's tree budgets (--tree-budget 4 + AUTO_TREE_BUDGETS)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--callgrind", action="store_true", help="also count instructions per step (valgrind)")
    ap.add_argument("--cg-rounds", type=int, default=2)
    ap.add_argument("--only", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only:
        replay_only(args)
        return 0
    if args.record or not args.data.exists():
        record(args)
    first = args.budgets.split(",")[0]
    modes = ["plain", "chain", f"tree{first}", "auto", "auto*", "auto-"]
    res = replay(args, modes)
    print(f"\nPython per step on a fake engine ({args.data.name}; budgets {args.budgets}; "
          f"median of {args.repeats} passes)")
    print(f"  {'mode':<8} {'steps/pass':>10} {'µs/step':>9} {'Ir/step':>10}  digest")
    tree = f"tree{first}"
    for mode in modes:
        us, steps, dig, _, _ = res[mode]
        ir = f"{per_step_ir(args, mode):10.0f}" if args.callgrind else f"{'-':>10}"
        print(f"  {mode:<8} {steps:>10} {us:9.1f} {ir}  {dig}")
    for auto in ("auto", "auto*", "auto-"):
        by_mode = res[auto][3]
        total = sum(n for n, _ in by_mode.values())
        shares = sorted(by_mode.items(), key=lambda kv: -kv[1][0])
        parts = [f"{m} {n / total:.0%} ({s * 1e6 / n:.1f} µs)" for m, (n, s) in shares]
        print(f"  {auto}'s steps by mode: " + ", ".join(parts))
        ref = "plain" if auto == "auto-" else tree   # the fixed mode it mostly takes
        n, s = by_mode.get(ref, (1, 0.0))
        print(f"    {auto} - {ref}: {res[auto][0] - res[ref][0]:+.1f} µs/step; {auto}'s {ref} steps - {ref}'s: "
              f"{s * 1e6 / n - res[ref][0]:+.1f} µs; top-k sizes asked: {res[auto][4]}")
    bt = build_tree_us(args)
    line = ", ".join(f"budget {b}: {us:.1f} µs" for b, us in bt.items())
    print(f"build_tree per call on the recorded candidates: {line}")
    if args.callgrind:
        print(f"build_tree Ir per call, all budgets mixed: {per_step_ir(args, 'build_tree'):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
