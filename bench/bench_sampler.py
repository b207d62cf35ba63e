"""Milliseconds per draw of the engine's sampler on the default model's 49,152-token vocabulary.

    python bench/bench_sampler.py [--draws 200]

A draw at T > 0 runs on the host for every decoded token and every verified row of a speculative
step (engine/native/src/runtime/sampler.cpp), so it adds to the step on any device."""
from __future__ import annotations

import argparse
import statistics
import time

import luce_engine as le
from luce_engine import Sampling

SETTINGS = {
    "greedy": Sampling(),
    "T 0.7 (an OpenAI request's usual fields)": Sampling(temperature=0.7),
    "T 0.7, top-p 0.95": Sampling(temperature=0.7, top_p=0.95),
    "T 0.7, min-p 0.05": Sampling(temperature=0.7, min_p=0.05),
    "chat default (top-k 40, top-p 0.95, min-p 0.05)": Sampling.chat_default(),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    model = le.Model(le.default_model_path(), device="cpu", n_threads=1)
    eng = le.Engine(model, n_ctx=64)
    eng.prefill(model.tokenizer.encode("My favourite"))   # a flat next-token distribution
    print(f"{model.n_vocab}-token vocabulary, {args.draws} draws x {args.rounds} rounds (median)")
    for name, s in SETTINGS.items():
        rounds = []
        for r in range(args.rounds):
            eng.set_seed(r)
            t0 = time.perf_counter()
            for _ in range(args.draws):
                eng.sample(s)
            rounds.append((time.perf_counter() - t0) * 1e3 / args.draws)
        print(f"{name:50s} {statistics.median(rounds):7.3f} ms a draw")


if __name__ == "__main__":
    main()
