"""CPU decode and prefill: luce with ggml's repacked weights, luce with the file's layout, and
llama.cpp (llama-cpp-python, which repacks by default), interleaved in one process.

    python bench/bench_cpu_repack.py --model M.gguf --threads 2 [--rounds 7]

Each round times every engine once (decode of --decode-tokens after a 32-token prompt, then a
prefill of --prefill tokens), in a rotating order, so drift and background load hit all three
alike; medians are reported with the spread (min..max) of the rounds, ratios against llama.cpp.
"""
from __future__ import annotations

import llama_cpp  # noqa: F401  (first, as bench_engine.py)
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_engine import LucePeer, synthetic_tokens  # noqa: E402
from llama_cpp_peer import LlamaCppPeer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    n_ctx = args.prefill + 256
    peers = {
        "luce, repacked": LucePeer(args.model, device="cpu", n_ctx=n_ctx, n_threads=args.threads,
                                   model_params={"repack_weights": True}),
        "luce, file layout": LucePeer(args.model, device="cpu", n_ctx=n_ctx, n_threads=args.threads,
                                      model_params={"repack_weights": False}),
        "llama.cpp": LlamaCppPeer(args.model, n_ctx=n_ctx, n_threads=args.threads, gpu=False),
    }
    n_vocab = peers["luce, repacked"].model.n_vocab
    print(f"{Path(args.model).name}: {peers['luce, repacked'].model.weight_types}, "
          f"{peers['luce, repacked'].model.n_repacked} weights repacked, {args.threads} threads", flush=True)
    prompt, long_prompt = synthetic_tokens(32, n_vocab), synthetic_tokens(args.prefill, n_vocab, seed=1)
    names = list(peers)
    decode = {n: [] for n in names}
    prefill = {n: [] for n in names}
    for peer in peers.values():   # warm-up
        peer.decode_seconds(prompt, 8)
    for r in range(args.rounds):
        order = names[r % 3:] + names[:r % 3]
        for n in order:
            secs, _ = peers[n].decode_seconds(prompt, args.decode_tokens)
            decode[n].append(args.decode_tokens / secs)
            prefill[n].append(args.prefill / peers[n].prefill_seconds(long_prompt))
        print(f"round {r + 1}: " + ", ".join(f"{n} {decode[n][-1]:.1f}" for n in names), flush=True)
    ref_d, ref_p = statistics.median(decode["llama.cpp"]), statistics.median(prefill["llama.cpp"])
    print(f"\n{'':20s} {'decode tok/s':>14s} {'(range)':>14s} {'ratio':>6s} {'prefill tok/s':>14s} {'ratio':>6s}")
    for n in names:
        d, p = statistics.median(decode[n]), statistics.median(prefill[n])
        print(f"{n:20s} {d:14.1f} {min(decode[n]):6.1f}..{max(decode[n]):<6.1f} {d / ref_d:6.3f} {p:14.1f} {p / ref_p:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
