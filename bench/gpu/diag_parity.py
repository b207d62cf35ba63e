"""Diagnostic for the GPU: where do our SmolLM2 logits and llama.cpp's differ, and is it batch shape?

Prints top-1 agreement and max |diff| of teacher-forced logits for: ours with 64-token micro-batches,
ours with one 512-token batch (llama.cpp's partition), and llama.cpp, pairwise.
"""
import llama_cpp  # noqa: F401  (first, see bench_engine.py)
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from reference import reference_llama, reference_logits  # noqa: E402
from test_parity import LONG_TEXT, _tokenize  # noqa: E402

import luce_engine  # noqa: E402
from luce_engine import Engine, Model  # noqa: E402

device = sys.argv[1] if len(sys.argv) > 1 else "cuda:0"
path = luce_engine.default_model_path()
model = Model(path, device=device)
ref = reference_llama(path, n_ctx=512)
tokens = _tokenize(ref, LONG_TEXT)[:257]
runs = {}
for nb in (64, 512):
    eng = Engine(model, n_ctx=512, n_batch=nb)
    eng.prefill(tokens, logits_all=True)
    runs[f"luce b{nb}"] = eng.all_logits()[:256]
runs["llama.cpp"] = reference_logits(ref, tokens)[:256]
names = list(runs)
for i, a in enumerate(names):
    for b in names[i + 1:]:
        x, y = runs[a], runs[b]
        agree = float((x.argmax(1) == y.argmax(1)).mean())
        print(f"{a:>10} vs {b:<10} top-1 {agree:.4f}  max|diff| {np.abs(x - y).max():.4g}  "
              f"mean|diff| {np.abs(x - y).mean():.3g}")
