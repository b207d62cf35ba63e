"""DFlash chain speculation at synthetic acceptance lengths: luce vs llama.cpp's draft-dflash, one run.

    python bench/bench_spec.py --target T.gguf --draft D.gguf --device cuda:0 \
        --llama-cli /tmp/lcpbuild/bin/llama-cli --lengths 1.5,3,4,6,8,12
    python bench/bench_spec.py --real [--device cpu --threads 2]   # the shipped draft on real prompts

--real measures real acceptance instead (bench/bench_spec_real.py): the held-out prompts of the
draft's corpus, T = 0 and 0.7, AL per category, acceptance by position, plain vs speculative tok/s.

Random-weight models accept no drafts, so both sides use llama.cpp's `--spec-synth-len L`
definition (bench/synthetic.py): draft i is accepted with a constant conditional probability p,
p + p² + … + p^K = L − 1, while the draft pass and the (K+1)-token verify still run in full. The
generated text is meaningless; the speed is what a real draft with mean acceptance length L gets.

Reports tokens/s plain and speculative for both engines, efficiency = spec ÷ (L × plain), our
measured AL and our draft / verify milliseconds per step. llama.cpp runs through `llama-cli`
(`-n N --ignore-eos`); its own "Generation: … t/s" line is parsed. JSON goes to bench/results/.
"""
from __future__ import annotations

import llama_cpp  # noqa: F401  (first: on some CUDA images its model load crashes if imported later)
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from luce_engine import DraftModel, Engine, Model, Sampling  # noqa: E402
from synthetic import SyntheticAcceptance, SyntheticSpeculator  # noqa: E402

PROMPT = "Write a detailed essay about the history of the printing press and its effects on Europe."


def synthetic_tokens(n: int, n_vocab: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(min(1000, n_vocab // 4), n_vocab, n)]


class LuceSpec:
    def __init__(self, target: str, draft: str, *, device: str, n_ctx: int, draft_max: int, threads: int,
                 model_params: dict, engine_params: dict):
        self.model = Model(target, device=device, n_threads=threads, **model_params)
        draft_flags = ("small_batch_kernels", "step_graphs")   # the draft runs on the same kernels
        draft_params = {k: v for k, v in engine_params.items() if k in draft_flags}
        if "step_kv_pad" in engine_params:   # the draft's block attends in the same steps
            draft_params["kv_pad"] = engine_params["step_kv_pad"]
        self.draft = DraftModel(draft, self.model, **draft_params)
        self.k = min(draft_max, self.draft.block_size - 1)
        self.engine = Engine(self.model, n_ctx=n_ctx, n_verify_max=self.k + 1, **engine_params)
        self.greedy = Sampling()

    def plain(self, prompt: list[int], n: int) -> float:
        eng = self.engine
        eng.truncate(0)
        eng.prefill(prompt)
        t0 = time.perf_counter()
        done = 0
        while done < n:
            done += len(eng.step(self.greedy).tokens)
        return done / (time.perf_counter() - t0)

    def spec(self, prompt: list[int], n: int, length: float, seed: int) -> dict:
        eng = self.engine
        eng.truncate(0)
        spec = SyntheticSpeculator(eng, self.draft, SyntheticAcceptance(length, self.k, seed=seed), max_draft=self.k)
        spec.attach()
        eng.prefill(prompt)
        t0 = time.perf_counter()
        done = 0
        while done < n:
            done += len(spec.step(self.greedy, max_emit=n - done).tokens)
        secs = time.perf_counter() - t0
        s = spec.stats
        return {"tok_s": done / secs, "al": s.acceptance_length, "steps": s.n_steps,
                "draft_ms": s.draft_ms / s.n_steps, "verify_ms": s.verify_ms / s.n_steps,
                "step_ms": secs * 1e3 / s.n_steps}


GEN_RE = re.compile(r"Generation:\s*([0-9.]+)\s*t/s")


def llama_cli(cli: str, target: str, draft: str | None, length: float | None, n: int, k: int) -> float | None:
    cmd = [cli, "-m", target, "-ngl", "99", "-fa", "on", "-n", str(n), "--ignore-eos", "-st",
           "-p", PROMPT, "--temp", "0"]
    if draft:
        cmd += ["-md", draft, "-ngld", "99", "--spec-type", "draft-dflash", "--spec-draft-n-max", str(k),
                "--spec-synth-len", f"{length:g}"]
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"llama-cli failed: {e}", file=sys.stderr)
        return None
    m = GEN_RE.findall(r.stdout + r.stderr)
    if not m:
        print(f"llama-cli printed no generation speed (rc {r.returncode}):\n{(r.stdout + r.stderr)[-1500:]}",
              file=sys.stderr)
        return None
    return float(m[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None, help="target GGUF (--real: default the bundled SmolLM2)")
    ap.add_argument("--draft", default=None, help="draft GGUF (--real: default the shipped draft)")
    ap.add_argument("--real", action="store_true", help="real prompts and real acceptance (bench_spec_real.py)")
    ap.add_argument("--per-category", type=int, default=0, help="--real: held-out prompts per category (0: all)")
    ap.add_argument("--spec", choices=("chain", "tree", "both", "auto", "all"), default="chain",
                    help="--real: chain, DDTree at each --tree-budget, both, auto (luce_engine.spec_auto weighing "
                         "plain, chain and the --tree-budget trees), or all of them")
    ap.add_argument("--tree-budget", default="4,8,16,22,32", help="--real: DDTree node budgets (comma list)")
    ap.add_argument("--temps", default="0,0.7", help="--real: temperatures (comma list)")
    ap.add_argument("--warmup-tokens", type=int, default=32,
                    help="--real: tokens of the unmeasured warm-up reply each mode decodes first (auto calibrates "
                         "its verify shapes there: a session's first reply; its time is reported apart)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--lengths", default="1.5,3,4,6,8,12", help="synthetic acceptance lengths L")
    ap.add_argument("--draft-max", type=int, default=15, help="draft tokens per step K (verify K+1)")
    ap.add_argument("--tokens", type=int, default=256, help="tokens generated per measurement")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--llama-cli", default=None, help="llama-cli binary for the side-by-side numbers")
    ap.add_argument("--rollback", choices=("snapshot", "replay"), default=None, help="default: the engine's")
    ap.add_argument("--fuse-weights", choices=("on", "off"), default=None, help="default: the engine's")
    ap.add_argument("--small-batch-kernels", choices=("on", "off"), default=None,
                    help="target and draft on luce's small-batch kernels (default: on)")
    ap.add_argument("--step-graphs", choices=("on", "off"), default=None,
                    help="their steps captured as one CUDA graph each (default: on)")
    ap.add_argument("--step-kv-pad", type=int, default=None,
                    help="the target's steps and verifies, and the draft's block, attend in steps of this many cells (default: "
                         "the engine's, 256): a step crossed rebuilds their graphs")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    model_params = {} if args.fuse_weights is None else {"fuse_weights": args.fuse_weights == "on"}
    engine_params = {} if args.rollback is None else {"rollback": args.rollback}
    if args.step_kv_pad is not None:
        engine_params["step_kv_pad"] = args.step_kv_pad
    for flag in ("small_batch_kernels", "step_graphs"):
        if getattr(args, flag) is not None:
            engine_params[flag] = getattr(args, flag) == "on"
    if args.real:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tools/ (the corpus)
        import bench_spec_real

        return bench_spec_real.main(args)
    if not args.target or not args.draft:
        ap.error("--target and --draft are required (except with --real)")

    lengths = [float(x) for x in args.lengths.split(",") if x]
    ours = LuceSpec(args.target, args.draft, device=args.device, n_ctx=args.prompt_tokens + args.tokens + 512,
                    draft_max=args.draft_max, threads=args.threads, model_params=model_params,
                    engine_params=engine_params)
    k = ours.k
    prompt = synthetic_tokens(args.prompt_tokens, ours.model.n_vocab, seed=1)
    ours.plain(prompt, 32)                       # warm-up: graphs and caches for every shape
    ours.spec(prompt, 64, lengths[0], seed=0)

    plain = statistics.median(ours.plain(prompt, args.tokens) for _ in range(args.repeats))
    spec = {}
    for L in lengths:
        runs = [ours.spec(prompt, args.tokens, L, seed=r) for r in range(args.repeats)]
        spec[L] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        spec[L]["runs_tok_s"] = [r["tok_s"] for r in runs]
        spec[L]["runs_al"] = [r["al"] for r in runs]

    # llama-cli draws its own acceptances: as many runs as ours, median of those that reported a speed
    def median_of(runs: list[float | None]) -> float | None:
        ok = [x for x in runs if x is not None]
        return statistics.median(ok) if ok else None

    theirs_plain, theirs, theirs_runs = None, {}, {}
    if args.llama_cli:
        theirs_plain = median_of([llama_cli(args.llama_cli, args.target, None, None, args.tokens, k)
                                  for _ in range(args.repeats)])
        for L in lengths:
            theirs_runs[L] = [llama_cli(args.llama_cli, args.target, args.draft, L, args.tokens, k)
                              for _ in range(args.repeats)]
            theirs[L] = median_of(theirs_runs[L])

    result = {"target": args.target, "draft": args.draft, "device": args.device, "draft_max": k,
              "model_params": model_params, "engine_params": engine_params,
              "tokens": args.tokens, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "luce_plain_tok_s": plain, "luce_spec": {str(L): v for L, v in spec.items()},
              "llama_plain_tok_s": theirs_plain, "llama_spec_tok_s": {str(L): v for L, v in theirs.items()},
              "llama_spec_runs_tok_s": {str(L): v for L, v in theirs_runs.items()},
              "draft_stats": ours.draft.stats(), "engine_stats": ours.engine.stats()}
    out = Path(args.json) if args.json else Path(__file__).resolve().parent / "results" / (
        f"spec-{args.device.replace(':', '')}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))

    def fmt(x, spec_w=8, p=1):
        return f"{x:>{spec_w}.{p}f}" if x is not None else f"{'—':>{spec_w}}"

    print(f"\n{ours.model.name} + {Path(args.draft).name} on {ours.model.device}, K={k} "
          f"(verify {k + 1}), {args.tokens} tokens, synthetic acceptance")
    print(f"plain decode tok/s: luce {plain:.1f}   llama.cpp {fmt(theirs_plain, 0)}")
    print(f"{'L':>5}{'luce':>8}{'eff':>6}{'AL':>6}{'draft':>7}{'verify':>8}{'step':>7}"
          f"{'llama':>8}{'eff':>6}{'ratio':>7}")
    for L in lengths:
        s, t = spec[L], theirs.get(L)
        eff = s["tok_s"] / (L * plain)
        teff = t / (L * theirs_plain) if t and theirs_plain else None
        ratio = s["tok_s"] / t if t else None
        print(f"{L:>5g}{s['tok_s']:>8.1f}{eff:>6.2f}{s['al']:>6.2f}{s['draft_ms']:>7.1f}{s['verify_ms']:>8.1f}"
              f"{s['step_ms']:>7.1f}{fmt(t)}{fmt(teff, 6, 2)}{fmt(ratio, 7, 2)}")
    for L in lengths:
        print(f"L={L:g} runs: luce {', '.join(f'{x:.1f}' for x in spec[L]['runs_tok_s'])} (AL "
              f"{', '.join(f'{x:.2f}' for x in spec[L]['runs_al'])}); llama.cpp "
              f"{', '.join('—' if x is None else f'{x:.1f}' for x in theirs_runs.get(L, []))}")
    print(f"(medians of {args.repeats} runs each; eff = spec tok/s ÷ (L × plain tok/s); "
          "draft/verify/step = our ms per step; ratio = luce ÷ llama.cpp)")
    ds = ours.draft.stats()
    print(f"draft graphs on the small-batch kernels: {ds['n_small_batch_evals']} "
          f"({ds['n_step_graph_replays']} replayed as one CUDA graph)")
    print(f"json: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
