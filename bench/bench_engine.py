"""Decode and prefill speed: luce vs llama.cpp (llama-cpp-python) on the same GGUF, in one run.

    python bench/bench_engine.py                       # SmolLM2-135M on CPU
    python bench/bench_engine.py --device cuda:0 --model M.gguf --prefill 512,8192 --verify 1,16
    python bench/bench_engine.py ... --llama-bench /tmp/lcpbuild/bin/llama-bench   # + llama.cpp's own tool
    python bench/bench_engine.py ... --rollback snapshot --skip-llama-cpp          # one engine setting alone

--rollback, --small-batch-kernels and --fuse-weights are luce-chat's flags of the same names; left
out, the engine's defaults apply. llama-bench (prefill at each length, decode of --decode-tokens,
and one batch of n tokens for each verify size n) runs as a separate process after ours.

Runs are interleaved (ours, theirs, ours, ...) after a warm-up so that drift in clocks or
background load hits both alike; medians are reported. Decoding is greedy with EOS ignored.
Writes a table to stdout and JSON to bench/results/ (or --json PATH).
"""
from __future__ import annotations

import llama_cpp  # noqa: F401  (first: on some CUDA images its model load crashes if imported later)
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llama_cpp_peer import LlamaCppPeer  # noqa: E402

import luce_engine  # noqa: E402
from luce_engine import Engine, Model, Sampling  # noqa: E402


class LucePeer:
    def __init__(self, path: str, *, device: str, n_ctx: int, n_threads: int, n_batch: int = 512,
                 n_verify_max: int = 16, model_params: dict | None = None, engine_params: dict | None = None):
        self.model = Model(path, device=device, n_threads=n_threads, **(model_params or {}))
        self.engine = Engine(self.model, n_ctx=n_ctx, n_batch=n_batch, n_verify_max=n_verify_max,
                             **(engine_params or {}))
        self.greedy = Sampling()

    def prefill_seconds(self, tokens: list[int]) -> float:
        self.engine.truncate(0)
        t0 = time.perf_counter()
        self.engine.prefill(tokens)
        return time.perf_counter() - t0

    def verify_seconds(self, prompt: list[int], batch: list[int]) -> float:
        """verify(batch) after the prompt, greedy tokens of every row back (what a greedy speculative
        step reads); commit(0) (the rollback) is not timed."""
        self.prefill_seconds(prompt)
        t0 = time.perf_counter()
        self.engine.verify(batch, logits=False)
        secs = time.perf_counter() - t0
        self.engine.commit(0)
        return secs

    def verify_steady_ms(self, prompt: list[int], batch: list[int], reps: int) -> list[float]:
        """verify(batch) + commit(0) again and again after one prefill: a speculative loop's steady
        state, where the verify graph is reused (and replayed as CUDA graphs). Milliseconds per verify."""
        self.prefill_seconds(prompt)
        out = []
        for i in range(reps + 3):       # 3 warm-up rounds
            t0 = time.perf_counter()
            self.engine.verify(batch, logits=False)
            secs = time.perf_counter() - t0
            self.engine.commit(0)
            if i >= 3:
                out.append(secs * 1e3)
        return out

    def commit_ms(self, prompt: list[int], batch: list[int], k: int, reps: int) -> list[float]:
        """commit(k) after verify(batch): the rollback a speculative step pays when k of its tokens
        are kept (copies from snapshots, or the recurrence again with --rollback replay). Milliseconds."""
        self.prefill_seconds(prompt)
        self.engine.checkpoint()   # truncating back here is then instant
        out = []
        for i in range(reps + 3):
            self.engine.verify(batch, logits=False)
            t0 = time.perf_counter()
            self.engine.commit(k)
            secs = time.perf_counter() - t0
            self.engine.truncate(len(prompt))
            if i >= 3:
                out.append(secs * 1e3)
        return out

    def decode_seconds(self, prompt: list[int], n: int) -> tuple[float, list[int]]:
        self.prefill_seconds(prompt)
        out = []
        t0 = time.perf_counter()
        for _ in range(n):
            out.extend(self.engine.step(self.greedy).tokens)
        return time.perf_counter() - t0, out


def llama_bench(binary: str, path: str, *, prefill: list[int], verify: list[int], decode: int, repeats: int,
                threads: int, gpu: bool) -> dict:
    """llama.cpp's llama-bench on the same file: {"decode_tok_s": x, "prefill_tok_s": {n: x}, "batch_ms": {n: ms}}."""
    cmd = [binary, "-m", path, "-ngl", "99" if gpu else "0", "-fa", "on", "-t", str(threads), "-r", str(repeats),
           "-p", ",".join(str(n) for n in sorted(set(prefill + verify))), "-n", str(decode), "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({r.returncode}): {r.stderr[-1500:]}")
    out = {"decode_tok_s": None, "prefill_tok_s": {}, "batch_ms": {}, "command": " ".join(cmd)}
    for row in json.loads(r.stdout):
        if row["n_gen"] and not row["n_prompt"]:
            out["decode_tok_s"] = row["avg_ts"]
        elif row["n_prompt"] and not row["n_gen"]:
            n = row["n_prompt"]
            if n in prefill:
                out["prefill_tok_s"][n] = row["avg_ts"]
            if n in verify:   # one n-token batch on an empty context: llama.cpp's cost of verifying n
                out["batch_ms"][n] = n / row["avg_ts"] * 1e3
    return out


def llama_bench_decode(binary: str, path: str, *, decode: int, threads: int, gpu: bool) -> float:
    """One llama-bench decode run (tg of `decode` tokens, one repetition): tok/s."""
    cmd = [binary, "-m", path, "-ngl", "99" if gpu else "0", "-fa", "on", "-t", str(threads), "-r", "1",
           "-p", "0", "-n", str(decode), "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({r.returncode}): {r.stderr[-1500:]}")
    return float(json.loads(r.stdout)[0]["avg_ts"])


def synthetic_tokens(n: int, n_vocab: int, seed: int = 0) -> list[int]:
    # ordinary-looking ids away from the special tokens at the start of the vocabulary
    return [int(t) for t in np.random.default_rng(seed).integers(min(1000, n_vocab // 4), n_vocab, n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF path (default: the embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda:0, ... (llama.cpp offloads all layers on a GPU)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=32, help="prompt before the timed decode")
    ap.add_argument("--prefill", default="512", help="comma-separated prefill lengths")
    ap.add_argument("--verify", default="", help="comma-separated batch sizes n: cost of verifying n tokens "
                                                  "in one batch, relative to one decode step (n <= 64)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rollback", choices=("snapshot", "replay"), default=None,
                    help="how a verify's rejected tokens are rolled back (default: the engine's)")
    ap.add_argument("--small-batch-kernels", choices=("on", "off"), default=None,
                    help="luce's CUDA kernels for small batches (default: the engine's)")
    ap.add_argument("--step-graphs", choices=("on", "off"), default=None,
                    help="each small-batch step as one captured CUDA graph (default: the engine's)")
    ap.add_argument("--fuse-weights", choices=("on", "off"), default=None,
                    help="fused projection weights at load (default: the engine's)")
    ap.add_argument("--repack-weights", choices=("on", "off"), default=None,
                    help="CPU: ggml's repacked weight layout, as llama.cpp uses it (default: the engine's)")
    ap.add_argument("--llama-bench", default=None, metavar="BIN", help="also run llama.cpp's llama-bench on the file")
    ap.add_argument("--interleave-llama-bench", action="store_true",
                    help="also run llama-bench's decode once between each of our decode repeats (a shared host's "
                         "drift then hits both alike; its own run after ours does not interleave)")
    ap.add_argument("--skip-llama-cpp", action="store_true", help="measure luce alone (no llama-cpp-python peer)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    path = args.model or luce_engine.default_model_path()
    gpu = args.device != "cpu"
    prefill_lengths = [int(x) for x in args.prefill.split(",") if x]
    n_ctx = max(prefill_lengths + [args.prompt_tokens + args.decode_tokens]) + 256
    verify_sizes = [int(x) for x in args.verify.split(",") if x]
    model_params = {} if args.fuse_weights is None else {"fuse_weights": args.fuse_weights == "on"}
    if args.repack_weights is not None:
        model_params["repack_weights"] = args.repack_weights == "on"
    engine_params = {} if args.rollback is None else {"rollback": args.rollback}
    if args.small_batch_kernels is not None:
        engine_params["small_batch_kernels"] = args.small_batch_kernels == "on"
    if args.step_graphs is not None:
        engine_params["step_graphs"] = args.step_graphs == "on"
    ours = LucePeer(path, device=args.device, n_ctx=n_ctx, n_threads=args.threads,
                    n_verify_max=max(verify_sizes + [16]), model_params=model_params, engine_params=engine_params)
    n_vocab = ours.model.n_vocab
    peers = {"luce": ours}
    if not args.skip_llama_cpp:
        peers["llama.cpp"] = LlamaCppPeer(path, n_ctx=n_ctx, n_threads=args.threads, gpu=gpu)

    # decode: warm-up, then interleaved repeats
    prompt = synthetic_tokens(args.prompt_tokens, n_vocab, seed=1)
    for p in peers.values():
        p.decode_seconds(prompt, 16)
    decode = {k: [] for k in peers}
    interleaved = args.interleave_llama_bench and args.llama_bench
    if interleaved:
        decode["llama-bench"] = []
    same_tokens = True
    for _ in range(args.repeats):
        outs = {}
        for name, p in peers.items():
            secs, outs[name] = p.decode_seconds(prompt, args.decode_tokens)
            decode[name].append(args.decode_tokens / secs)
        if interleaved:
            decode["llama-bench"].append(llama_bench_decode(args.llama_bench, path, decode=args.decode_tokens,
                                                            threads=args.threads, gpu=gpu))
        same_tokens &= outs["luce"] == outs.get("llama.cpp", outs["luce"])

    prefill = {k: {} for k in peers}
    for n in prefill_lengths:
        toks = synthetic_tokens(n, n_vocab, seed=n)
        for p in peers.values():
            p.prefill_seconds(toks)   # warm-up for this shape
        runs = {k: [] for k in peers}
        for _ in range(max(2, args.repeats // 2)):
            for name, p in peers.items():
                runs[name].append(n / p.prefill_seconds(toks))
        for name in peers:
            prefill[name][n] = statistics.median(runs[name])

    med = {k: statistics.median(v) for k, v in decode.items()}
    verify = {k: {} for k in peers}
    for n in verify_sizes:
        batch = synthetic_tokens(n, n_vocab, seed=100 + n)
        runs = {k: [] for k in peers}
        for _ in range(max(3, args.repeats)):
            for name, p in peers.items():
                runs[name].append(p.verify_seconds(prompt, batch) * 1e3)
        for name in peers:   # milliseconds, and in units of one decode step
            ms = statistics.median(runs[name])
            verify[name][n] = {"ms": ms, "decode_steps": ms / (1e3 / med[name])}
        steady = statistics.median(ours.verify_steady_ms(prompt, batch, max(10, args.repeats)))
        verify["luce"][n].update({"steady_ms": steady, "steady_steps": steady / (1e3 / med["luce"]),
                                  "commit_half_ms": statistics.median(ours.commit_ms(prompt, batch, n // 2, max(10, args.repeats)))})
    small_batch_evals = ours.engine.stats().get("n_small_batch_evals", 0)
    step_graph_replays = ours.engine.stats().get("n_step_graph_replays", 0)
    info = {"model": ours.model.name, "weights": ours.model.weight_types, "backend_device": ours.model.device}
    has_peer = "llama.cpp" in peers
    del ours, peers   # free the device before llama-bench loads the file again
    bench = llama_bench(args.llama_bench, path, prefill=prefill_lengths, verify=verify_sizes,
                        decode=args.decode_tokens, repeats=max(3, args.repeats), threads=args.threads,
                        gpu=gpu) if args.llama_bench else None
    ratio = (lambda a, b: a / b) if has_peer else (lambda a, b: None)
    result = {
        **info, "path": path, "device": args.device, "threads": args.threads, "host": platform.node(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model_params": model_params, "engine_params": engine_params,
        "decode_tok_s": med, "decode_runs": decode,
        "decode_ratio": ratio(med["luce"], med.get("llama.cpp")),
        "greedy_tokens_identical": same_tokens if has_peer else None,
        "prefill_tok_s": prefill,
        "verify": verify,
        "small_batch_evals": small_batch_evals, "step_graph_replays": step_graph_replays,
        "prefill_ratio": {n: ratio(prefill["luce"][n], prefill.get("llama.cpp", {}).get(n)) for n in prefill_lengths},
        "llama_bench": bench,
    }
    out = Path(args.json) if args.json else Path(__file__).resolve().parent / "results" / (
        f"engine-{args.device.replace(':', '')}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))

    def num(x, w=12, p=1):
        return f"{x:>{w}.{p}f}" if x is not None else f"{'-':>{w}}"

    lb = bench or {"decode_tok_s": None, "prefill_tok_s": {}, "batch_ms": {}}
    settings = ", ".join(f"{k}={v}" for k, v in {**model_params, **engine_params}.items()) or "engine defaults"
    print(f"\n{info['model']} ({info['weights']}) on {info['backend_device']}, {args.threads} threads, {settings}")
    print(f"{'metric':<22}{'luce':>12}{'llama.cpp':>12}{'ratio':>9}{'llama-bench':>13}")
    print(f"{'decode tok/s':<22}{med['luce']:>12.1f}{num(med.get('llama.cpp'))}{num(result['decode_ratio'], 9, 3)}"
          f"{num(lb['decode_tok_s'], 13)}")
    if "llama-bench" in med:
        print(f"{'decode, interleaved':<22}{med['luce']:>12.1f}{'':>12}{med['luce'] / med['llama-bench']:>9.3f}"
              f"{med['llama-bench']:>13.1f}   (llama-bench run once between our repeats; ratio: luce / llama-bench)")
    for n in prefill_lengths:
        print(f"{f'prefill {n} tok/s':<22}{prefill['luce'][n]:>12.1f}{num(prefill.get('llama.cpp', {}).get(n))}"
              f"{num(result['prefill_ratio'][n], 9, 3)}{num(lb['prefill_tok_s'].get(n), 13)}")
    for n in verify["luce"]:
        a, b = verify["luce"][n], verify.get("llama.cpp", {}).get(n)
        theirs = f"{b['ms']:>6.1f} ({b['decode_steps']:.1f}){b['ms'] / a['ms']:>6.2f}x" if b else f"{'-':>18}"
        print(f"{f'verify {n} ms (steps)':<22}{a['ms']:>7.1f} ({a['decode_steps']:.1f}){theirs}"
              f"   luce steady {a['steady_ms']:.1f} ({a['steady_steps']:.2f})   commit n/2 {a['commit_half_ms']:.2f}"
              + (f"   llama-bench {lb['batch_ms'][n]:.1f}" if n in lb["batch_ms"] else ""))
    print("verify: after a fresh prefill each time (both engines); luce steady: repeated verify + commit(0); "
          "commit n/2: the rollback keeping half the tokens; llama-bench: one n-token batch on an empty context")
    print(f"luce evaluations on the CUDA small-batch kernels: {small_batch_evals}, "
          f"of them replayed as one CUDA graph: {step_graph_replays}")
    print(f"greedy tokens identical: {result['greedy_tokens_identical']}   json: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
