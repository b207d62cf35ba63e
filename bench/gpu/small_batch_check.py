"""Does the CUDA small-batch path compute what the scheduler path computes, on a real-size model?

    python bench/gpu/small_batch_check.py --model T.gguf [--device cuda:0]

Two engines on one model: one with luce's small-batch kernels (the default), one without
(LUCE_SMALL_BATCH_GEMM=0, every graph on ggml's scheduler). Both prefill the same short prompt
(itself a small batch) and verify the same 16 tokens; prints how far their logits rows are apart,
whether the rows' greedy tokens agree, and the logit margin where they do not (near-ties that
float rounding may flip). Then a greedy decode of 32 tokens through verify/commit on both.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from luce_engine import Engine, Model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()

    model = Model(args.model, device=args.device)
    os.environ.pop("LUCE_SMALL_BATCH_GEMM", None)
    fast = Engine(model, n_ctx=4096, n_verify_max=32)
    os.environ["LUCE_SMALL_BATCH_GEMM"] = "0"
    slow = Engine(model, n_ctx=4096, n_verify_max=32)
    os.environ.pop("LUCE_SMALL_BATCH_GEMM")

    rng = np.random.default_rng(7)
    prompt = [int(t) for t in rng.integers(1000, model.n_vocab // 2, 24)]
    batch = [int(t) for t in rng.integers(1000, model.n_vocab // 2, 16)]
    worst = 0.0
    for eng in (fast, slow):
        eng.prefill(prompt)
    rows = {}
    for name, eng in (("fast", fast), ("slow", slow)):
        rows[name] = np.array(eng.verify(batch, logits=True), dtype=np.float64)
        eng.commit(0)
    a, b = rows["fast"], rows["slow"]
    scale = np.abs(b).max()
    worst = float(np.abs(a - b).max() / scale)
    agree = int((a.argmax(-1) == b.argmax(-1)).sum())
    print(f"verify 16: max |fast - slow| / max |logit| = {worst:.2e}; greedy tokens agree on {agree}/16 rows")
    for i in np.nonzero(a.argmax(-1) != b.argmax(-1))[0]:
        top = np.sort(b[i])[-2:]
        print(f"  row {i}: tokens {a[i].argmax()} vs {b[i].argmax()}, the scheduler's top-2 margin {top[1] - top[0]:.3e}")

    # greedy decode through verify/commit: the verified block is the previous block's greedy tokens
    outs = {}
    for name, eng in (("fast", fast), ("slow", slow)):
        out = []
        nxt = eng.argmax()
        while len(out) < 32:
            block = [nxt] + [int(t) for t in rng.integers(1000, model.n_vocab // 2, 7)]   # 1 sure + 7 random guesses
            eng.verify(block, logits=False)
            keep = 1
            toks = [eng.argmax(0)]
            while keep < len(block) and block[keep] == toks[-1]:
                toks.append(eng.argmax(keep))
                keep += 1
            eng.commit(keep)
            out += block[:keep]
            nxt = toks[-1]
        outs[name] = out[:32]
    same = outs["fast"] == outs["slow"]
    print(f"greedy decode 32 tokens via verify/commit identical: {same}")
    print(f"small-batch evaluations: fast {fast.stats()['n_small_batch_evals']}, slow {slow.stats()['n_small_batch_evals']}")
    ok = fast.stats()["n_small_batch_evals"] > 0 and slow.stats()["n_small_batch_evals"] == 0 and worst < 1e-2
    print("CHECK", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
