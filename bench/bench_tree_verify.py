"""Verify cost by batch shape: a plain step, a chain verify of n rows and a DDTree verify of a tree
of n nodes, median ms of --repeats after a warm-up; what an `auto` rule would calibrate, and the
issue-19 bar on the 27B-shaped hybrid (tree verify at budget 22, 23 nodes, against the 16-token chain).

    python bench/bench_tree_verify.py [--target T.gguf] [--device cpu] [--threads 2] [--rows 5,9,16,17,23,33]
        [--tree-recurrence paths,nodes] [--small-batch-max-tokens 16,24]

Each verify is followed by commit(0), which changes nothing (the verify cost alone); then a commit of
a 4-token path (chain: commit(4), tree: commit_path of the deepest 4-node path; K/V rows moved, on a
hybrid model its recurrence replayed), measured as verify + commit minus the verify alone (the
context grows by 4 tokens each time, as in generation). Trees are best-first (engine/ddtree.py) from a synthetic draft
whose rank-r candidate has probability 0.5^(r+1) at every depth (--tree-shape random: random parents).
Each --tree-recurrence (a hybrid model's engine parameter: each root-to-leaf path from the committed
state, or each node once) and --small-batch-max-tokens (CUDA: the widest verify on luce's matmul
kernels) has an engine of its own; the largest difference between their tree logits on the same
context is printed beside the times.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from luce_engine import Engine, Model, default_model_path
from luce_engine.ddtree import build_tree

PATH_KEPT = 4


def best_first_tree(x0: int, n: int, rng, vocab: int) -> tuple[list[int], list[int]]:
    depth = min(n - 1, 15)
    toks = rng.integers(0, vocab, (depth, n)).tolist()
    logp = np.tile(np.log(0.5) * (np.arange(n) + 1), (depth, 1))
    tree = build_tree(x0, np.array(toks), logp, n - 1, max_depth=depth)
    return tree.tokens, tree.parents


def random_tree(x0: int, n: int, rng, vocab: int) -> tuple[list[int], list[int]]:
    return [x0] + [int(t) for t in rng.integers(0, vocab, n - 1)], [-1] + [int(rng.integers(0, i)) for i in range(1, n)]


def deepest_path(parents: list[int], k: int) -> list[int]:
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    node = max(range(len(parents)), key=lambda i: (depth[i], -i))
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1][:k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", default="5,9,16,17,23,33")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tree-shape", choices=("best-first", "random"), default="best-first")
    ap.add_argument("--tree-recurrence", default="auto", help="comma-separated: auto, paths, nodes (hybrid models)")
    ap.add_argument("--small-batch-max-tokens", default="16",
                    help="comma-separated: the widest verify on luce's CUDA kernels (an engine per value)")
    args = ap.parse_args()
    configs = [(m, int(t)) for t in args.small_batch_max_tokens.split(",") for m in args.tree_recurrence.split(",")]
    model = Model(args.target or default_model_path(), device=args.device, n_threads=args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    grows = (args.repeats + 1) * (2 * PATH_KEPT * len(rows) + 1)   # the commits' and plain steps' tokens
    engines = {c: Engine(model, n_ctx=args.context + grows + max(rows) + 64, n_verify_max=max(rows), tree_verify=True,
                         tree_recurrence=c[0], small_batch_max_tokens=c[1]) for c in configs}
    rng = np.random.default_rng(0)
    vocab = min(model.n_vocab, 5000)
    context = [int(t) for t in rng.integers(0, vocab, args.context)]
    for e in engines.values():
        e.prefill(context)

    def timed(fn) -> float:
        fn()   # warm-up: the graph of this shape
        ts = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)

    make = best_first_tree if args.tree_shape == "best-first" else random_tree
    x0 = int(rng.integers(0, vocab))
    shapes = []
    for n in rows:
        chain_toks = [x0] + [int(t) for t in rng.integers(0, vocab, n - 1)]
        shapes.append((n, chain_toks, *make(x0, n, rng, vocab)))
    # every engine's tree logits on the same context, before the timings grow their contexts apart
    apart = {}
    for n, _, toks, parents in shapes:
        logits = []
        for e in engines.values():
            logits.append(e.verify_tree(toks, parents))
            e.commit(0)
        apart[n] = max(float(np.abs(x - logits[0]).max() / max(np.abs(logits[0]).max(), 1e-30)) for x in logits)

    print(f"{model.name} ({model.arch}) on {model.device}, {args.threads} threads, context {args.context}, "
          f"{args.tree_shape} trees")
    for (mode, max_tokens), eng in engines.items():
        print(f"\ntree_recurrence {mode}, small_batch_max_tokens {max_tokens}: plain step {timed(eng.step):.2f} ms")
        print(f"{'rows':>4} | {'chain verify':>12} | {'tree verify':>11} | tree/chain | {'chain commit(4)':>15} | "
              f"{'tree commit_path(4)':>19} | tree: leaves, depth | logits apart (all engines)")
        chain_ms = {}
        for n, chain_toks, toks, parents in shapes:
            path = deepest_path(parents, PATH_KEPT)
            leaves = len(set(range(len(parents))) - set(parents))
            depth = len(deepest_path(parents, n))

            def chain_verify():
                eng.verify(chain_toks, logits=False)
                eng.commit(0)

            def tree_verify():
                eng.verify_tree(toks, parents, logits=False)
                eng.commit(0)

            def chain_commit():
                eng.verify(chain_toks, logits=False)
                eng.commit(min(PATH_KEPT, n))

            def tree_commit():
                eng.verify_tree(toks, parents, logits=False)
                eng.commit_path(path)

            cv, tv = timed(chain_verify), timed(tree_verify)
            cc, tc = timed(chain_commit) - cv, timed(tree_commit) - tv
            chain_ms[n] = cv
            print(f"{n:>4} | {cv:>9.2f} ms | {tv:>8.2f} ms | {tv / cv:>10.2f} | {cc:>12.2f} ms | {tc:>16.2f} ms | "
                  f"{leaves}, {depth} | {apart[n]:.1e}")
            if n == 23 and 16 in chain_ms:
                print(f"bar ({mode}, {max_tokens}): tree of 23 nodes (budget 22) / 16-token chain verify = "
                      f"{tv / chain_ms[16]:.2f} (at most 1.5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
