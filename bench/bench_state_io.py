"""Raw throughput of engine state files: one big state file saved and loaded again, GB/s.

    python bench/bench_state_io.py                       # a ~1 GiB f16 state of a tiny wide model, CPU
    python bench/bench_state_io.py --dir /tmp/sio --keep # keep model and state for another build's run
    python bench/bench_state_io.py --model M.gguf --device cuda:0 --tokens 32768

Without --model a random llama-shaped GGUF is written (tools/tiny_gguf.py, deterministic: the same
file every time, so a state kept with --keep loads in another checkout's engine too) whose KV rows
are wide (64 layers x 32 KV heads x 128: 1 MiB a token at f16) and whose weights are tiny, so a
prefill of 1,024 tokens makes a 1 GiB file in seconds of compute. The state is saved once (full
write, timed), then loaded --rounds times warm (the file in the page cache) and cold (dropped from
it with posix_fadvise(DONTNEED) after an fsync: the container cannot drop the whole cache, so this
is the coldest a single file gets here). Medians; GB/s = file bytes / seconds.
"""
from __future__ import annotations

import llama_cpp  # noqa: F401  (first: see bench_resume.py)
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_resume import drop_from_page_cache  # noqa: E402  (the same "cold" as the resume bench)
from luce_engine import Engine, Model  # noqa: E402
from tools.tiny_gguf import TinyConfig, write_tiny_gguf  # noqa: E402

WIDE = TinyConfig(arch="llama", n_vocab=256, n_embd=64, n_layer=64, n_head=32, n_head_kv=32, head_dim=128,
                  n_ff=64, n_ctx_train=8192, seed=11)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF (default: the wide random model, written into --dir)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--cache-type", default="f16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/luce-state-io")
    ap.add_argument("--keep", action="store_true", help="keep the state file (reused when it is there)")
    ap.add_argument("--staged", action="store_true",
                    help="CPU: load through the staging ring as into a GPU (debug_staged_state_io)")
    args = ap.parse_args(argv)

    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    model_path = args.model or str(d / "wide.gguf")
    if not args.model and not Path(model_path).exists():
        write_tiny_gguf(model_path, WIDE)
    model = Model(model_path, device=args.device, n_threads=args.threads)
    kw = dict(n_ctx=args.tokens + 256, cache_type_k=args.cache_type, cache_type_v=args.cache_type)
    path = d / f"big-{args.tokens}-{args.cache_type}.state"
    if not path.exists():
        a = Engine(model, **kw)
        t0 = time.perf_counter()
        a.prefill([1 + (i * 7) % 200 for i in range(args.tokens)])
        print(f"prefill {args.tokens} tokens: {time.perf_counter() - t0:.1f} s", flush=True)
        io = a.save_state(path, append=False)
        print(f"save (full write, fsync): {io['ms'] / 1e3:.3f} s, {path.stat().st_size / 2**30:.2f} GiB, "
              f"{path.stat().st_size / io['ms'] / 1e6:.2f} GB/s", flush=True)
        del a
    size = path.stat().st_size
    b = Engine(model, **kw, **({"debug_staged_state_io": True} if args.staged else {}))
    b.load_state(path)   # warms the page cache and the engine
    warm, cold = [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        b.load_state(path)
        warm.append(time.perf_counter() - t0)
        drop_from_page_cache(path)
        t0 = time.perf_counter()
        b.load_state(path)
        cold.append(time.perf_counter() - t0)
    assert b.n_past == args.tokens
    w, c = statistics.median(warm), statistics.median(cold)
    print(f"state {size / 2**30:.2f} GiB on {model.device}{' (staged)' if args.staged else ''}: load warm {w:.3f} s ({size / w / 1e9:.2f} GB/s, "
          f"range {min(warm):.3f}-{max(warm):.3f}), cold {c:.3f} s ({size / c / 1e9:.2f} GB/s, "
          f"range {min(cold):.3f}-{max(cold):.3f})")
    if not args.keep:
        path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
