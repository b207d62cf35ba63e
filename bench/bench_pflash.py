"""PFlash time to first token: compressed prefill vs dense prefill (ours and llama.cpp's), one run.

    python bench/bench_pflash.py --target T.gguf --scorer S.gguf --lengths 32768,65536,131072 \\
        --keep 0.05 --device cuda:0

For each length L: a synthetic attachment of exactly L target tokens (prose and code filler) and a
question after it. Measured, after a warm-up of every path:
  PFlash      scorer pass over the attachment + question (scorer tokens), selection and mapping to
              target tokens, target prefill of kept tokens + question, first token (greedy argmax)
  luce dense  target prefill of the whole attachment + question, first token
  llama.cpp   the same dense prefill through llama-cpp-python on the same GGUF and ggml, first token
With random-weight models the kept chunks are arbitrary: this measures speed only (the needle suite,
tests/test_pflash_needle.py, measures quality). Prints a table last; writes JSON.
"""
from __future__ import annotations

import llama_cpp  # noqa: F401  (first: on the GPU image its CUDA model load crashes if imported later)
import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llama_cpp_peer import LlamaCppPeer  # noqa: E402

from luce_engine import Engine, Model, Scorer  # noqa: E402
from luce_engine.pflash import CompressionConfig, compress  # noqa: E402

WORDS = ("river stone market ledger winter signal copper harbor lantern orchard quarry meadow "
         "archive beacon canyon delta ember falcon glacier harvest island junction kettle").split()


def filler_paragraph(rng: random.Random) -> str:
    """A paragraph of prose or of Python-like code (attachments are often code)."""
    if rng.random() < 0.5:
        return " ".join(f"The {rng.choice(WORDS)} {rng.choice(WORDS)} was {rng.choice(WORDS)}ed "
                        f"{rng.randint(2, 9999)} times." for _ in range(rng.randint(3, 7)))
    name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
    body = "\n".join(f"    {rng.choice(WORDS)} = {rng.choice(WORDS)}({rng.randint(0, 999)}) + {rng.randint(0, 99)}"
                     for _ in range(rng.randint(2, 6)))
    return f"def {name}(x):\n{body}\n    return x"


def attachment_tokens(tokenizer, n_tokens: int, seed: int = 0) -> tuple[str, list[int]]:
    """Text of exactly n_tokens target tokens: filler tokenized once and cut at n_tokens."""
    rng = random.Random(seed)
    parts, approx = [], 0
    while approx < n_tokens * 1.05 + 64:
        p = filler_paragraph(rng)
        parts.append(p)
        approx += len(tokenizer.encode(p, parse_special=False)) + 1
    ids = tokenizer.encode("\n\n".join(parts), parse_special=False)[:n_tokens]
    # the text of exactly these tokens (ASCII filler: no character is cut)
    return tokenizer.decode_bytes(ids).decode("utf-8"), ids


class Paths:
    """The three ways to the first token, each timed from the attachment text to the token."""

    def __init__(self, args, n_ctx: int):
        self.target = Model(args.target, device=args.device, n_threads=args.threads)
        self.engine = Engine(self.target, n_ctx=n_ctx, n_batch=args.batch)
        self.scorer = Scorer(Model(args.scorer, device=args.device, n_threads=args.threads), n_batch=args.batch,
                             sparse_threshold=args.sparse_threshold, sparse_window=args.sparse_window)
        self.cfg = CompressionConfig(keep_ratio=args.keep, n_tail=args.n_tail)
        self.peer = None if args.skip_llama else LlamaCppPeer(args.target, n_ctx=n_ctx, n_threads=args.threads,
                                                              gpu=args.device != "cpu", n_batch=args.batch)
        self.tok = self.target.tokenizer

    def first_token(self, prompt: list[int]) -> float:
        t0 = time.perf_counter()
        self.engine.truncate(0)
        self.engine.prefill(prompt)
        self.engine.argmax(-1)   # the greedy first token, computed on the device
        return time.perf_counter() - t0

    def pflash(self, text: str, ids: list[int], question: str, q_ids: list[int]) -> dict:
        t0 = time.perf_counter()
        c = compress(text, question, self.scorer, self.tok, self.cfg, target_tokens=ids)
        t1 = time.perf_counter()
        prefill = self.first_token(c.kept_tokens + q_ids)
        st = self.scorer.stats()
        return {"ttft": t1 - t0 + prefill, "compress_s": t1 - t0, "scorer_s": c.scorer_ms / 1e3,
                "prefill_s": prefill, "kept": c.n_kept, "original": c.n_original, "scorer_tokens": c.scorer_tokens,
                "anchored_chunks": len(c.selection.anchored), "sparse_batches": st["n_sparse_batches"], "attended_keys_ratio": st["attended_keys"] / max(1, st["dense_keys"])}

    def dense(self, ids: list[int], q_ids: list[int]) -> float:
        return self.first_token(ids + q_ids)

    def llama(self, ids: list[int], q_ids: list[int]) -> float:
        t0 = time.perf_counter()
        self.peer.prefill_seconds(ids + q_ids)
        llama_cpp.llama_sampler_sample(self.peer.sampler, self.peer.ctx, -1)
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="target GGUF (e.g. a 27B-shaped random qwen35)")
    ap.add_argument("--scorer", required=True, help="scorer GGUF (qwen3/llama, e.g. Qwen3-0.6B-shaped BF16)")
    ap.add_argument("--lengths", default="32768,65536,131072", help="attachment lengths in target tokens")
    ap.add_argument("--keep", type=float, default=0.05, help="keep ratio of the attachment's chunks")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--batch", type=int, default=512, help="prefill micro-batch of every path")
    ap.add_argument("--n-tail", type=int, default=8)
    ap.add_argument("--sparse-threshold", type=int, default=32768, help="scorer: block-sparse forward above this")
    ap.add_argument("--sparse-window", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=1, help="measurements per length and path (median)")
    ap.add_argument("--skip-dense", action="store_true", help="skip our dense prefill")
    ap.add_argument("--dense-max", type=int, default=0,
                    help="our dense prefill only for attachments up to this many tokens (0: all)")
    ap.add_argument("--skip-llama", action="store_true", help="skip llama.cpp")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    lengths = [int(x) for x in args.lengths.split(",") if x]
    # no word of the filler: with the synthetic tokenizers of random-weight files, shared words make
    # question 4-grams that anchor many chunks (docs/algorithms.md §4.4) and the kept size balloons
    question = "\n\nQuestion: please summarize the key facts of this document briefly."
    t_load = time.perf_counter()
    paths = Paths(args, n_ctx=max(lengths) + 512)
    load_s = time.perf_counter() - t_load
    q_ids = paths.tok.encode(question, parse_special=False)

    # warm-up: graph builds, device initialisation, caches of every path
    text, ids = attachment_tokens(paths.tok, min(2048, min(lengths)), seed=1)
    paths.pflash(text, ids, question, q_ids)
    if not args.skip_dense:
        paths.dense(ids, q_ids)
    if paths.peer:
        paths.llama(ids, q_ids)

    rows = []
    for n in lengths:
        text, ids = attachment_tokens(paths.tok, n, seed=n)
        runs = {"pflash": [], "dense": [], "llama": []}
        for _ in range(args.repeats):
            runs["pflash"].append(paths.pflash(text, ids, question, q_ids))
            if not args.skip_dense and (not args.dense_max or n <= args.dense_max):
                runs["dense"].append(paths.dense(ids, q_ids))
            if paths.peer:
                runs["llama"].append(paths.llama(ids, q_ids))
        pf = min(runs["pflash"], key=lambda r: r["ttft"]) if args.repeats == 1 else \
            sorted(runs["pflash"], key=lambda r: r["ttft"])[len(runs["pflash"]) // 2]
        row = {"length": n, "pflash": pf, "pflash_ttft_runs": [r["ttft"] for r in runs["pflash"]],
               "dense_ttft": statistics.median(runs["dense"]) if runs["dense"] else None,
               "llama_ttft": statistics.median(runs["llama"]) if runs["llama"] else None}
        rows.append(row)
        print(f"{n}: {json.dumps(row)}", flush=True)

    result = {"target": paths.target.name, "target_path": args.target, "target_weights": paths.target.weight_types,
              "scorer": paths.scorer.model.name, "scorer_path": args.scorer, "scorer_weights": paths.scorer.model.weight_types,
              "device": paths.target.device, "threads": args.threads, "keep": args.keep, "batch": args.batch,
              "sparse_threshold": args.sparse_threshold, "sparse_window": args.sparse_window, "repeats": args.repeats,
              "load_s": load_s, "host": platform.node(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "question_tokens": len(q_ids), "rows": rows}
    out = Path(args.json) if args.json else Path(__file__).resolve().parent / "results" / (
        f"pflash-{args.device.replace(':', '')}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))

    print(f"\nPFlash TTFT: target {paths.target.name} ({paths.target.weight_types}), scorer {paths.scorer.model.name} "
          f"({paths.scorer.model.weight_types}) on {paths.target.device}; keep {args.keep}; json: {out}")
    print(f"{'tokens':>8} {'kept':>7} {'scorer s':>9} {'prefill s':>9} {'PFlash s':>9} {'luce dense s':>12} "
          f"{'llama.cpp s':>11} {'vs llama':>8} {'vs dense':>8}")
    for r in rows:
        pf = r["pflash"]
        fmt = lambda v: f"{v:.2f}" if v is not None else "-"
        ratio = lambda v: f"{v / pf['ttft']:.1f}x" if v else "-"
        print(f"{r['length']:>8} {pf['kept']:>7} {pf['scorer_s']:>9.2f} {pf['prefill_s']:>9.2f} {pf['ttft']:>9.2f} "
              f"{fmt(r['dense_ttft']):>12} {fmt(r['llama_ttft']):>11} {ratio(r['llama_ttft']):>8} {ratio(r['dense_ttft']):>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
