"""Scorer memory plan vs measured compute buffers on a device (the bound tests/test_pflash_scorer.py
asserts), for dense and sparse inputs of a tiny qwen3 scorer: one line per length.

    python bench/gpu/scorer_plan_probe.py --device cuda:0
"""
from __future__ import annotations

import llama_cpp  # noqa: F401  (first, as in every GPU script)
import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]
from luce_engine import Model, Scorer  # noqa: E402
from tools.tiny_gguf import TinyConfig, write_tiny_gguf  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    path = write_tiny_gguf(Path(tempfile.mkdtemp()) / "qwen3.gguf", TinyConfig(arch="qwen3", n_vocab=256, head_dim=32))
    model = Model(str(path), device=args.device, n_threads=2)
    print(f"{'threshold':>9}{'tokens':>8}{'planned':>12}{'measured':>12}{'ratio':>7}")
    for threshold in (0, 2048):
        scorer = Scorer(model, sparse_threshold=threshold, sparse_window=512)
        for S in (4096, 8192, 16384):
            plan = scorer.plan(S)
            scorer.score(np.random.default_rng(S).integers(0, 255, S).astype(np.int32))
            got = scorer.stats()["compute_bytes"]
            print(f"{threshold:>9}{S:>8}{plan['compute']:>12,}{got:>12,}{got / plan['compute']:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
