"""The draft side of one DDTree step, part by part, on the default model and the shipped draft: the
draft pass, the candidates (on the draft's device: DraftModel.top_candidates; or the logits
downloaded and ranked by numpy: ddtree.top_candidates), and commit_path of a path that moves
nearly every kept row (after verify_tree, timed alone). Median ms of --repeats after a warm-up.

    python bench/bench_tree_step_parts.py [--device cpu] [--threads 2] [--budget 16] [--repeats 21]

On a build without DraftModel.top_candidates (before it existed) that line is left out.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from luce_engine import DraftModel, Engine, Model, default_model_path
from luce_engine.ddtree import Tree, top_candidates
from luce_engine.default_draft import shipped_draft_path


def median_ms(fn, repeats: int) -> float:
    fn()   # warm-up: graphs built, buffers allocated
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=21)
    args = ap.parse_args()
    model = Model(args.target or default_model_path(), device=args.device, n_threads=args.threads)
    draft = DraftModel(shipped_draft_path(), model)
    n_depth = draft.block_size - 1
    eng = Engine(model, n_ctx=args.context + 4 * (args.budget + 1) * (args.repeats + 2), n_verify_max=args.budget + 1)
    eng.set_capture(list(draft.capture_layers), output=True, ring_size=4096)
    rng = np.random.default_rng(0)
    eng.prefill([int(t) for t in rng.integers(100, 5000, args.context)])
    draft.inject_captured(eng, 0, eng.n_past)
    x0, c = eng.argmax(), eng.n_past

    rows = {"draft pass": median_ms(lambda: draft.draft(x0, c), args.repeats)}
    if hasattr(draft, "top_candidates"):
        rows["candidates on the device"] = median_ms(lambda: draft.top_candidates(args.budget, 1.0, n_depth),
                                                     args.repeats)
    rows["candidates: logits to the host + numpy"] = median_ms(
        lambda: top_candidates(draft.logits()[1:1 + n_depth], args.budget, 1.0), args.repeats)

    # A comb of budget + 1 nodes: each path node has an off-path child first, so the path
    # 0, 2, 4, ... ends at row 2d and nearly every kept row moves (the costliest commit of that size).
    parents = [-1] + [2 * ((i - 1) // 2) for i in range(1, args.budget + 1)]
    tokens = [x0] + [int(t) for t in rng.integers(100, 5000, args.budget)]
    path = list(range(0, args.budget + 1, 2))
    tree = Tree(tokens, parents, [0] * len(tokens), [0.0] * len(tokens))
    commit_ms = []
    for _ in range(args.repeats + 1):
        eng.verify_tree(tree.tokens, tree.parents, logits=False)
        t0 = time.perf_counter()
        eng.commit_path(path)
        commit_ms.append((time.perf_counter() - t0) * 1e3)
    rows[f"commit_path ({len(path)} of {len(tree)} nodes, {sum(1 for d, n in enumerate(path) if n != d)} rows moved)"] = \
        statistics.median(commit_ms[1:])

    print(f"{model!r} on {args.device}, {args.threads} threads; budget {args.budget}, depth {n_depth}; "
          f"median of {args.repeats}")
    for name, ms in rows.items():
        print(f"  {name:<58} {ms:8.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
