"""Verify cost by batch shape on the default model: a plain step, a chain verify and a DDTree verify
(random tree) of n rows, median ms of --repeats after a warm-up; what an `auto` rule would calibrate.

    python bench/bench_tree_verify.py [--device cpu] [--threads 2] [--rows 5,9,16,17,23,33]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from luce_engine import Engine, Model, default_model_path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="5,9,16,17,23,33")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    model = Model(args.target or default_model_path(), device=args.device, n_threads=args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    eng = Engine(model, n_ctx=args.context + max(rows) + 64, n_verify_max=max(rows))
    rng = np.random.default_rng(0)
    eng.prefill([int(t) for t in rng.integers(100, 5000, args.context)])

    def timed(fn) -> float:
        fn()   # warm-up: the graph of this shape
        ts = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)

    def step():
        eng.step()
        eng.truncate(args.context)

    # every measurement ends with truncate(), which re-evaluates the context's last token: subtracted
    base = timed(lambda: eng.truncate(args.context))
    print(f"{model.name} on {model.device}, {args.threads} threads, context {args.context}")
    print(f"plain step: {timed(step) - base:.1f} ms (truncate's 1-token re-evaluation, {base:.1f} ms, subtracted)")
    for n in rows:
        toks = [int(t) for t in rng.integers(100, 5000, n)]
        parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]

        def chain():
            eng.verify(toks, logits=False)
            eng.commit(1)
            eng.truncate(args.context)

        def tree():
            eng.verify_tree(toks, parents, logits=False)
            eng.commit_path([0])
            eng.truncate(args.context)

        print(f"{n:>3} rows: chain verify {timed(chain) - base:.1f} ms, tree verify + commit_path {timed(tree) - base:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
