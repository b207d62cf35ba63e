"""Diagnostic: do a verify batch's logits differ from one-token steps' by rounding, or by more?

    python bench/gpu/diag_verify_vs_step.py [--device cuda:0] [--model M.gguf] [--tokens 64] [--rows 16]
    python bench/gpu/diag_verify_vs_step.py --llama-cpp ...     llama.cpp's rows alone (its own process)

On 2026-12-06 the H200 gave no speculative SmolLM2 reply equal to plain decoding, and the shipped
draft's greedy test diverged at a top-2 gap of 4e-2, while the CPU is exact. For the same greedy
continuation of a held-out prompt this prints, per batch shape, how far each row's logits lie from
the one-token step's at the same position (max |diff| / max |logit|) and where the argmax differs,
with plain decoding's top-2 gap there:
  step      Engine.step, one token at a time (plain decoding)
  verify    Engine.verify of `rows` tokens, then commit (the chain's path)
  prefill   Engine.prefill(logits_all) of `rows` tokens (ggml's batch kernels without our verify)
  llama.cpp with --llama-cpp, instead of ours: llama-cpp-python on the same file and device, its
            batches of `rows` against its one-token evals on its own greedy continuation, the same
            measure: whether ggml's kernels alone part batch rows from steps as far as ours. A run
            of its own: loading llama.cpp's CUDA model after ours in one process crashed it (H100,
            2026-12-06)
Rounding by batch shape shows as differences of ~1e-3 in both batched rows alike; a verify that
differs from the same-size prefill points at our verify path. Each row kind is also measured against
the CPU engine's rows on the same tokens (`vs cpu`; on the CPU one-token steps and batches agree bit
for bit, as llama.cpp's CPU kernels do): the GPU path far from it is the one that rounds more.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import luce_engine  # noqa: E402
from luce_engine import Engine, Model  # noqa: E402
from tools.dflash_train.corpus import heldout_prompts  # noqa: E402
from tools.dflash_train.prompt_ids import PromptEncoder  # noqa: E402


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6))


def gap(row: np.ndarray) -> float:
    a, b = np.sort(row)[-2:][::-1]
    return float((a - b) / max(abs(a), 1e-6))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--model", default=None, help="default: the embedded SmolLM2")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--llama-cpp", action="store_true", help="llama.cpp's own batch-vs-step rows instead of ours")
    args = ap.parse_args()
    path = args.model or luce_engine.default_model_path()
    encoder = PromptEncoder(path)
    picked = [next(p for p in heldout_prompts() if p.category == c) for c in ("chat", "code", "prose")]
    if args.llama_cpp:
        print(f"{Path(path).name}, llama.cpp on {args.device}: {args.tokens} greedy tokens, batches of {args.rows}")
        for prompt in picked[: args.prompts]:
            llama_cpp_batch_vs_step(path, args.device, encoder.encode(prompt.messages()), args.tokens, args.rows,
                                    prompt.category)
        return
    model = Model(path, device=args.device)
    cpu_model = Model(path, device="cpu") if model.device.lower() != "cpu" else None
    print(f"{Path(path).name} on {model.device}: {args.tokens} greedy tokens, batches of {args.rows}")
    for prompt in picked[: args.prompts]:
        ids = encoder.encode(prompt.messages())
        eng = Engine(model, n_ctx=1024, n_verify_max=args.rows)
        eng.prefill(ids)
        step_rows, tokens = [eng.logits().copy()], []
        for _ in range(args.tokens):
            tokens.append(int(np.argmax(step_rows[-1])))
            eng.prefill([tokens[-1]])
            step_rows.append(eng.logits().copy())
        # row i of a batch fed tokens[s:s+rows] predicts position s+i+1: step_rows[s+i+1]
        batched = {"verify": [], "prefill": []}
        ver, pre = Engine(model, n_ctx=1024, n_verify_max=args.rows), Engine(model, n_ctx=1024)
        ver.prefill(ids)
        pre.prefill(ids)
        for s in range(0, args.tokens, args.rows):
            chunk = tokens[s:s + args.rows]
            batched["verify"] += list(ver.verify(chunk))
            ver.commit(len(chunk))
            pre.prefill(chunk, logits_all=True)
            batched["prefill"] += list(pre.all_logits()[-len(chunk):])
        for name, rows in batched.items():
            diffs = [rel(r, step_rows[i + 1]) for i, r in enumerate(rows)]
            flips = [(i, gap(step_rows[i + 1])) for i, r in enumerate(rows) if np.argmax(r) != np.argmax(step_rows[i + 1])]
            print(f"  {prompt.category:6s} {name:8s} max {max(diffs):.2e} median {np.median(diffs):.2e}; "
                  f"argmax flips {len(flips)}" + "".join(f" [row {i}, step gap {g:.2e}]" for i, g in flips[:4]))
        print(f"  {prompt.category:6s} verify vs prefill: max {max(rel(a, b) for a, b in zip(batched['verify'], batched['prefill'])):.2e}")
        if cpu_model is not None:
            ref = Engine(cpu_model, n_ctx=1024)
            ref.prefill(ids[:-1])
            ref.prefill([ids[-1]] + tokens, logits_all=True)
            cpu_rows = ref.all_logits()[-(len(tokens) + 1):]   # row j: after ids + tokens[:j], as step_rows[j]
            parts = []
            for name, rows in {"step": step_rows[1:], **batched}.items():
                d = [rel(r, cpu_rows[i + 1]) for i, r in enumerate(rows)]
                parts.append(f"{name} median {np.median(d):.2e} max {max(d):.2e}")
            print(f"  {prompt.category:6s} vs cpu: " + "; ".join(parts))


def llama_cpp_batch_vs_step(path: str, device: str, ids: list[int], n_tokens: int, rows: int, label: str) -> None:
    """llama.cpp's own rows on its greedy continuation: one-token evals against batches of `rows`."""
    import llama_cpp

    def fresh():
        return llama_cpp.Llama(model_path=path, n_ctx=1024, n_batch=512, n_ubatch=512, logits_all=True, flash_attn=True,
                               n_gpu_layers=0 if device == "cpu" else -1, verbose=False, seed=0)

    step = fresh()
    step.eval(ids)
    tokens = [int(np.argmax(step.scores[len(ids) - 1]))]
    while len(tokens) < n_tokens:
        step.eval([tokens[-1]])
        tokens.append(int(np.argmax(step.scores[step.n_tokens - 1])))
    n0 = len(ids)
    step_rows = np.array(step.scores[n0 - 1:n0 + len(tokens) - 1], dtype=np.float32)   # predicts tokens[i]
    del step
    batch = fresh()
    batch.eval(ids)
    for s in range(0, len(tokens) - 1, rows):
        batch.eval(tokens[s:min(s + rows, len(tokens) - 1)])
    batch_rows = np.array(batch.scores[n0:n0 + len(tokens) - 1], dtype=np.float32)      # predicts tokens[i + 1]
    diffs = [rel(b, step_rows[i + 1]) for i, b in enumerate(batch_rows)]
    flips = [(i, gap(step_rows[i + 1])) for i, b in enumerate(batch_rows) if np.argmax(b) != np.argmax(step_rows[i + 1])]
    print(f"  {label:6s} llama.cpp max {max(diffs):.2e} median {np.median(diffs):.2e}; argmax flips {len(flips)}"
          + "".join(f" [row {i}, step gap {g:.2e}]" for i, g in flips[:4]))


if __name__ == "__main__":
    main()
