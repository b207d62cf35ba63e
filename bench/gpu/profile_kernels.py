"""Where a decode step and an n-token verify spend their GPU time: kernel totals per step.

    python bench/gpu/profile_kernels.py --model T.gguf --verify 16 [--tree 23] [--draft D.gguf]

Uses torch.profiler (CUPTI), which records every CUDA kernel in the process, including ggml's.
Prints, per mode, the kernels grouped by name with their summed time per step, the kernel count
and the step's wall time; the gap between wall time and kernel time is launch/host overhead.
Diagnostic only (not a benchmark: the profiler adds overhead of its own).
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # bench/: bench_tree_verify's trees

from luce_engine import DraftModel, Engine, Model, Sampling


def short(name: str) -> str:
    name = re.sub(r"<.*", "", name)          # template arguments
    name = re.sub(r"\(.*", "", name)
    return name[:60]


def profile(label: str, fn, steps: int, engine=None):
    import torch
    from torch.profiler import ProfilerActivity, profile as tprofile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    wall = (time.perf_counter() - t0) * 1e3 / steps
    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    totals, counts = collections.defaultdict(float), collections.defaultdict(int)
    for ev in prof.events():
        if ev.device_type is not None and "CUDA" in str(ev.device_type):
            totals[short(ev.name)] += ev.device_time_total / 1e3 / steps if hasattr(ev, "device_time_total") \
                else ev.cuda_time_total / 1e3 / steps
            counts[short(ev.name)] += 1
    kernel_ms = sum(totals.values())
    n_kernels = sum(counts.values()) / steps
    print(f"\n== {label}: wall {wall:.2f} ms/step (unprofiled), kernels {kernel_ms:.2f} ms/step, "
          f"{n_kernels:.0f} kernels/step")
    for name, ms in sorted(totals.items(), key=lambda kv: -kv[1])[:18]:
        print(f"  {ms:8.3f} ms  {counts[name] / steps:6.0f}x  {name}")
    if engine is not None:   # whether the steps ran as one captured CUDA graph (cumulative counts)
        st = engine.stats()
        print("  engine: " + ", ".join(f"{k} {st.get(k, 0)}" for k in (
            "n_graph_builds", "n_graph_reuses", "n_small_batch_evals", "n_step_graph_replays")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft", default=None)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--verify", default="16")
    ap.add_argument("--tree", default="", help="also tree verifies of these node counts (best-first trees, "
                    "bench_tree_verify.py's synthetic draft), each discarded with commit(0)")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()

    sizes = [int(x) for x in args.verify.split(",") if x]
    trees = [int(x) for x in args.tree.split(",") if x]
    model = Model(args.model, device=args.device)
    eng = Engine(model, n_ctx=2048, n_verify_max=max(sizes + trees + [16]), tree_verify=bool(trees))
    greedy = Sampling()
    prompt = [t % model.n_vocab for t in range(1000, 1064)]
    eng.prefill(prompt)

    def decode():
        eng.step(greedy)
        if eng.n_past > 1500:
            eng.truncate(64)

    profile("decode (1 token)", decode, args.steps, eng)
    for n in sizes:
        batch = [t % model.n_vocab for t in range(2000, 2000 + n)]

        def verify(batch=batch):
            eng.verify(batch, logits=False)
            eng.argmax(n - 1)
            eng.commit(1)
            if eng.n_past > 1500:
                eng.truncate(64)

        profile(f"verify {n} + commit", verify, args.steps, eng)
    for n in trees:
        import numpy as np
        from bench_tree_verify import best_first_tree
        toks, parents = best_first_tree(2000 % model.n_vocab, n, np.random.default_rng(0), min(model.n_vocab, 5000))

        def tree_verify(toks=toks, parents=parents):
            eng.verify_tree(toks, parents, logits=False)
            eng.commit(0)

        profile(f"tree verify {n} nodes + commit(0)", tree_verify, args.steps, eng)
    if args.draft:
        draft = DraftModel(args.draft, model)
        import numpy as np
        feats = np.zeros((64, len(draft.capture_layers) * model.n_embd), np.float32)
        draft.inject(feats, 0)
        profile("draft pass", lambda: draft.draft(1000, 64), args.steps)
        for k in (4, 16):   # a tree's candidates: the top-k graph on the draft's device, k x 15 values back
            profile(f"draft pass + top-{k} candidates",
                    lambda k=k: (draft.draft(1000, 64), draft.top_candidates(k, 1.0, draft.block_size - 1)), args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
