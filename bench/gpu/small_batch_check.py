"""Does the CUDA small-batch path compute what the scheduler path computes, and how fast is it?

    python bench/gpu/small_batch_check.py --model T.gguf [--device cuda:0] [--timing]

Two engines on one model: "kernels" with luce's small-batch kernels (cuda/small_batch_gemm.h, the
default), and "slow" without them (small_batch_kernels=False: every graph on ggml's scheduler).
All prefill the same short prompt (itself a small batch) and verify the same 16 tokens; printed:
how far each one's logits rows are from the scheduler's, and, for scale, how far the scheduler's
own rows move when the 16 tokens go one at a time (another kernel, other rounding): on a model
whose outputs amplify rounding (deep random weights), that baseline is large too. A greedy decode
through verify/commit follows. --timing adds the steady-state cost of verifying n tokens
(verify + commit(0) repeated) and of a decode step, per engine.
Set LUCE_SMALL_BATCH_CHECK=1 (a debug switch) to have every replaced matmul compared with ggml's
on its first run.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from luce_engine import Engine, Model, Sampling


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def verify_ms(eng: Engine, prompt: list[int], batch: list[int], reps: int = 10) -> float:
    eng.truncate(0)
    eng.prefill(prompt)
    out = []
    for i in range(reps + 3):
        t0 = time.perf_counter()
        eng.verify(batch, logits=False)
        if i >= 3:
            out.append((time.perf_counter() - t0) * 1e3)
        eng.commit(0)
    return statistics.median(out)


def decode_ms(eng: Engine, prompt: list[int], n: int = 32) -> float:
    eng.truncate(0)
    eng.prefill(prompt)
    eng.step(Sampling())
    t0 = time.perf_counter()
    for _ in range(n):
        eng.step(Sampling())
    return (time.perf_counter() - t0) * 1e3 / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--timing", action="store_true")
    args = ap.parse_args()

    model = Model(args.model, device=args.device)
    engines = {name: Engine(model, n_ctx=4096, n_verify_max=32, small_batch_kernels=on)
               for name, on in (("kernels", True), ("slow", False))}
    rng = np.random.default_rng(7)
    hi = max(2, min(model.n_vocab - 1, 200_000))
    lo = min(1000, hi // 2)
    prompt = [int(t) for t in rng.integers(lo, hi, 24)]
    batch = [int(t) for t in rng.integers(lo, hi, 16)]
    rows = {}
    for name, eng in engines.items():
        eng.prefill(prompt)
        rows[name] = np.array(eng.verify(batch, logits=True), dtype=np.float64)
        eng.commit(0)
    slow = engines["slow"]
    one_by_one = []
    for tok in batch:   # the scheduler path again, a token at a time
        one_by_one.append(np.array(slow.verify([tok], logits=True), dtype=np.float64)[0])
        slow.commit(1)
    baseline = rel(np.array(one_by_one), rows["slow"])
    print(f"{model.name}: verify 16 after a 24-token prompt, max |difference| / max |logit| against the scheduler:")
    close = {}   # engine -> within tolerance of the scheduler
    for name in (k for k in engines if k != "slow"):
        d = rel(rows[name], rows["slow"])
        agree = int((rows[name].argmax(-1) == rows["slow"].argmax(-1)).sum())
        close[name] = d <= max(10 * baseline, 1e-3)
        print(f"  {name:<7} {d:.2e}   greedy tokens agree on {agree}/16 rows{'' if close[name] else '   TOO FAR'}")
    ok = all(close.values())
    print(f"  baseline: the scheduler one token at a time {baseline:.2e} "
          f"(agree on {int((np.array(one_by_one).argmax(-1) == rows['slow'].argmax(-1)).sum())}/16)")

    outs = {}
    for name, eng in engines.items():   # greedy decode through verify/commit, 1 sure + 7 random guesses per block
        eng.truncate(0)
        eng.prefill(prompt)
        grng = np.random.default_rng(11)
        out, nxt = [], eng.argmax()
        while len(out) < 32:
            block = [nxt] + [int(t) for t in grng.integers(lo, hi, 7)]
            eng.verify(block, logits=False)
            keep, last = 1, eng.argmax(0)
            while keep < len(block) and block[keep] == last:
                last = eng.argmax(keep)
                keep += 1
            eng.commit(keep)
            out += block[:keep]
            nxt = last
        outs[name] = out[:32]
    print("greedy decode of 32 tokens via verify/commit: " +
          ", ".join(f"{k} {'==' if outs[k] == outs['slow'] else '!='} slow" for k in engines if k != "slow"))
    evals = {k: e.stats()["n_small_batch_evals"] for k, e in engines.items()}
    print(f"small-batch evaluations: {evals}")
    ok &= all(evals[k] > 0 for k in engines if k != "slow") and evals["slow"] == 0

    if args.timing:
        print(f"\nsteady-state ms (median of 10): decode step, then verify n + commit(0)")
        steps = {k: decode_ms(e, prompt) for k, e in engines.items()}
        print(f"{'':<10}" + "".join(f"{k:>16}" for k in engines))
        print(f"{'decode':<10}" + "".join(f"{steps[k]:>16.2f}" for k in engines))
        for n in (1, 2, 4, 8, 16, 32):
            b = [int(t) for t in rng.integers(lo, hi, n)]
            ms = {k: verify_ms(e, prompt, b) for k, e in engines.items()}
            print(f"{f'verify {n}':<10}" + "".join(f"{ms[k]:>9.2f} ({ms[k] / steps[k]:.2f})" for k in engines))
    print("CHECK", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
