"""Scorer pass alone on a GPU: time, sparse key share, allocated vs planned memory per length.

    python bench/gpu/pflash_scorer_speed.py SCORER.gguf 32768,65536,131072 [cuda:0]
Dense runs too up to 65536 tokens (the block-sparse forward starts above 32768)."""
import llama_cpp  # noqa: F401  (first, as on the GPU image)
import sys
import time

import numpy as np

from luce_engine import Model, Scorer

model = Model(sys.argv[1], device=sys.argv[3] if len(sys.argv) > 3 else "cuda:0")
print(f"{model.name} ({model.weight_types}) on {model.device}", flush=True)
for n in [int(x) for x in sys.argv[2].split(",")]:
    toks = np.random.default_rng(n).integers(1000, min(100000, model.n_vocab), n)
    for threshold in ((32768, 0) if n <= 65536 else (32768,)):
        s = Scorer(model, sparse_threshold=threshold)
        s.score(toks[:2048])   # warm-up
        t0 = time.perf_counter()
        sc = s.score(toks)
        dt = time.perf_counter() - t0
        st = s.stats()
        print(f"{n:>7} {'sparse' if st['n_sparse_batches'] else 'dense':<6} {dt:7.2f} s  forward {st['forward_ms'] / 1e3:6.2f} s"
              f"  tail {st['tail_ms'] / 1e3:5.2f} s  keys {st['attended_keys'] / st['dense_keys']:.3f} of dense"
              f"  kv {st['kv_bytes'] / 2**30:5.2f} GiB  scratch {st['compute_bytes'] / 2**20:6.0f} MiB"
              f" (plan {st['planned_compute_bytes'] / 2**20:.0f})  finite {bool(np.isfinite(sc).all())}", flush=True)
