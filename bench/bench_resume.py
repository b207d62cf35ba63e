"""Resuming a session from its engine state file against prefilling it again, on one GGUF.

    python bench/bench_resume.py                                   # SmolLM2-135M, CPU, 2 threads, 4K tokens
    python bench/bench_resume.py --model M.gguf --device cuda:0 --tokens 32768,131072 --cache-type f16,q4_0

For each context length and KV cache type: prefill a context of that many tokens (timed), save its
state (a full write, timed, file size), then the never-closed engine answers a next turn greedily
(the reference). A fresh engine loads the file (timed twice: warm, then cold after the file was
dropped from the page cache with posix_fadvise) and answers the same turn: the reply must be
identical, token for token. Then the per-turn incremental write: the resumed session goes on for
--turns turns of a short message and reply, each followed by a save that appends only the new rows
(timed, bytes). The bar of issue 21 is printed: at the longest context measured (128K on the
H200), resume at least 20x faster than prefill from a cold read; every reply identical.
"""
from __future__ import annotations

import llama_cpp  # noqa: F401  (first: on some CUDA images its model load crashes if imported later)
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from luce_engine import Engine, Model, default_model_path  # noqa: E402

BAR = 20.0


def drop_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def greedy(engine, tokens, n):
    return [t for r in engine.generate(tokens, max_tokens=n, stop_token_ids=()) for t in r.tokens]


def one(model, n_tokens, cache, args, work: Path) -> dict:
    rng = np.random.default_rng(n_tokens)
    hi = min(model.n_vocab, 30000)
    context = [int(t) for t in rng.integers(100, hi, n_tokens)]
    follow = [int(t) for t in rng.integers(100, hi, 16)]
    n_ctx = n_tokens + 1024 + args.turns * 64
    kw = dict(n_ctx=n_ctx, cache_type_k=cache, cache_type_v=cache)
    path = work / f"resume-{n_tokens}-{cache}.state"

    a = Engine(model, **kw)
    t0 = time.perf_counter()
    a.prefill(context)
    prefill_s = time.perf_counter() - t0
    io = a.save_state(path, append=False)
    save_s = io["ms"] / 1e3
    size = path.stat().st_size
    want = greedy(a, follow, args.reply_tokens)          # the never-closed session's next turn
    del a

    b = Engine(model, **kw)
    t0 = time.perf_counter()
    b.load_state(path)
    warm_s = time.perf_counter() - t0
    drop_from_page_cache(path)
    t0 = time.perf_counter()
    b.load_state(path)
    cold_s = time.perf_counter() - t0
    got = greedy(b, follow, args.reply_tokens)
    appends = []   # the resumed session goes on: each turn's save appends its rows
    for _ in range(args.turns):
        greedy(b, [int(t) for t in rng.integers(100, hi, 24)], 24)
        io = b.save_state(path)
        appends.append((io["ms"], io["bytes"], io["appended"]))
    del b
    return {
        "tokens": n_tokens, "cache": cache, "prefill_s": prefill_s, "save_s": save_s, "file_bytes": size,
        "resume_cold_s": cold_s, "resume_warm_s": warm_s,
        "speedup_cold": prefill_s / cold_s, "speedup_warm": prefill_s / warm_s,
        "cold_gb_s": size / cold_s / 1e9, "warm_gb_s": size / warm_s / 1e9,
        "identical": got == want, "reply_tokens": len(want),
        "append_ms_median": statistics.median(m for m, _, _ in appends) if appends else None,
        "append_bytes_median": statistics.median(b for _, b, _ in appends) if appends else None,
        "appends_compacted": sum(not ap for _, _, ap in appends),
        "final_file_bytes": _size_then_remove(path),
    }


def _size_then_remove(path: Path) -> int:
    size = path.stat().st_size
    path.unlink()   # a 128K f16 state of the 27B is 8 GiB: one at a time on the disk
    return size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF path (default: the embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", default="4096", help="comma-separated context lengths")
    ap.add_argument("--cache-type", default="f16", help="comma-separated KV cache types (f16, q8_0, q4_0)")
    ap.add_argument("--reply-tokens", type=int, default=32)
    ap.add_argument("--turns", type=int, default=8, help="turns of incremental writes measured after the resume")
    ap.add_argument("--dir", default=None, help="where the state files go (default: a temporary directory)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    model = Model(args.model or default_model_path(), device=args.device, n_threads=args.threads)
    print(f"model {Path(model.path).name} ({model.arch}) on {model.device}, threads {args.threads}")
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for n in [int(x) for x in args.tokens.split(",")]:
            for cache in args.cache_type.split(","):
                r = one(model, n, cache, args, Path(d))
                rows.append(r)
                print(f"{n:>7} tok {cache:>5}: prefill {r['prefill_s']:8.2f} s | save {r['save_s']:6.2f} s, "
                      f"{r['file_bytes'] / 2**20:9.1f} MiB | resume cold {r['resume_cold_s']:6.3f} s "
                      f"({r['speedup_cold']:6.1f}x, {r['cold_gb_s']:.2f} GB/s), warm {r['resume_warm_s']:6.3f} s "
                      f"({r['speedup_warm']:6.1f}x, {r['warm_gb_s']:.2f} GB/s) | "
                      f"next reply identical: {r['identical']} | per-turn append {r['append_ms_median']:.1f} ms, "
                      f"{r['append_bytes_median'] / 2**10:.0f} KiB", flush=True)
    ok = all(r["identical"] for r in rows)
    longest = max(r["tokens"] for r in rows)
    fast = all(r["speedup_cold"] >= BAR for r in rows if r["tokens"] == longest)
    print(f"bar: at {longest} tokens resume >= {BAR:.0f}x faster than prefill (cold read): {'PASS' if fast else 'FAIL'}; "
          f"next greedy reply identical: {'PASS' if ok else 'FAIL'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": model.path, "device": model.device, "threads": args.threads,
                                               "rows": rows}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
