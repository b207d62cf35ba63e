"""Does the draft accept less when the target's features come from one-token steps than from batches?
On one greedy text per held-out prompt (T = 0, the text one-token steps write), the engine's draft
walks chain-of-K steps (AL, tokens per step) fed the target's captured features from:

  steps      the one-token decode steps that wrote the text (what --spec auto's plain steps leave)
  prefill    one batched prefill of prompt + text (ggml's batch kernels)
  batches    prefills of `--rows` tokens at a time, a chain verify's shape (a chain of 7 verifies 8)

and, for the text's part, the same walk along the text a chain of K writes itself (greedy, its own
verifies' features: `chain text`). On a CPU the sources are the same bits and the texts the same. On
a GPU a verify batch and a one-token step run other kernels (docs/architecture.md §5) and greedy
texts part: the fixed chain's speed-up is measured on its own text, --spec auto's (mostly plain
steps) on the steps' text.

Also how far the sources' features are apart (max |a - b| / max |b| per position, over the text).

    python bench/al_by_feature_source.py [--device cuda:0] [--per-category 2] [--tokens 256] [--k 7]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from luce_engine import DraftModel, Engine, Model, Sampling, default_model_path  # noqa: E402
from luce_engine.default_draft import shipped_draft_path  # noqa: E402
from luce_engine.speculative import ChainSpeculator  # noqa: E402
from tools.dflash_train.corpus import CATEGORIES  # noqa: E402
from tools.dflash_train.prompt_ids import PromptEncoder  # noqa: E402

from bench.al_walk import (ALTable, capturing_engine, chain_al, engine_proposals, greedy_text,  # noqa: E402
                           heldout_by_category)

SOURCES = ("steps", "prefill", "batches")
ROWS = SOURCES + ("chain text",)


def captured(eng: Engine, n: int) -> np.ndarray:
    return np.stack([eng.captured(q).reshape(-1) for q in range(n)])


def rel_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b).max(axis=1) / np.maximum(np.abs(b).max(axis=1), 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--rows", type=int, default=8, help="tokens per batch of the 'batches' source")
    args = ap.parse_args()
    path = default_model_path()
    model = Model(path, device=args.device, n_threads=args.threads)
    draft = DraftModel(shipped_draft_path(), model)
    enc = PromptEncoder(path)
    eog = set(model.tokenizer.eog_ids)
    prompts = heldout_by_category(args.per_category)
    eng = capturing_engine(model, draft, [enc.encode(p.messages()) for p in prompts], args.tokens)
    table = ALTable(ROWS, CATEGORIES)
    chain = ChainSpeculator(eng, draft, max_draft=args.k)
    same = 0
    diffs = {s: [] for s in SOURCES[1:]}
    for p in prompts:
        ids = enc.encode(p.messages())
        text = greedy_text(eng, ids, args.tokens, eog)
        seq, c0 = ids + text, len(ids)
        n = len(seq) - 1   # positions with features: the last token is never evaluated
        feats = {"steps": captured(eng, n)}
        eng.truncate(0)
        eng.prefill(seq[:n])
        feats["prefill"] = captured(eng, n)
        eng.truncate(0)
        eng.prefill(ids)
        for i in range(c0, n, args.rows):
            eng.prefill(seq[i:min(i + args.rows, n)])
        feats["batches"] = captured(eng, n)
        for s in SOURCES:
            table.add(s, p.category, chain_al(engine_proposals(draft, feats[s], c0, text, args.k), text, args.k))
        for s in SOURCES[1:]:
            diffs[s].append(rel_diff(feats["steps"][c0:], feats[s][c0:]))
        eng.truncate(0)
        chain.attach()
        eng.prefill(ids)
        own = []
        while len(own) < args.tokens and not (own and own[-1] in eog):
            own += chain.step(Sampling(), max_emit=args.tokens - len(own), stop_ids=eog).tokens
        while own and own[-1] in eog:
            own.pop()
        own_feats = captured(eng, len(ids) + len(own) - 1)
        table.add("chain text", p.category, chain_al(engine_proposals(draft, own_feats, c0, own, args.k), own, args.k))
        same += own == text
        print(f"{p.id}: {len(text)} tokens, the chain's text {'the same' if own == text else 'another'}", flush=True)
    print(f"chain of {args.k}, AL on {len(prompts)} held-out prompts, T = 0, up to {args.tokens} tokens, {args.device}")
    table.print("features from", 14)
    print(f"the chain's own text equals the steps' text in {same} of {len(prompts)} replies")
    for s, d in diffs.items():
        d = np.concatenate(d)
        q = np.quantile(d, [0.5, 0.9, 0.99, 1.0])
        print(f"steps vs {s}: relative feature difference over the text, median {q[0]:.2e}, 90% {q[1]:.2e}, "
              f"99% {q[2]:.2e}, max {q[3]:.2e}")


if __name__ == "__main__":
    main()
