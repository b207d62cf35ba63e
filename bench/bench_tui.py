"""TUI responsiveness under a fast token stream: the real app and widgets, a synthetic source.

    python bench/bench_tui.py [--tokens 20000] [--rate 2000]

A SYNTHETIC token source stands in for the engine's generation (labelled as such in the output):
it wraps a real tiny engine (so the prompt path is real) and yields steps of 4 tokens — words,
code and Markdown, every other step "drafted" (--highlight shows them coloured) — paced at --rate
tokens/s. While it streams through the app's worker → queue → ~30 Hz timer pipeline into the
reply's Markdown view (or, with --highlight, its provenance view), the benchmark measures:

  * UI frame gaps: a 60 Hz interval callback inside the app; the worst gap between two of its
    runs is the longest the event loop was blocked (by rendering, parsing, ...);
  * key-press latency: every 100 ms a key event is posted to the prompt box; the time from the
    press until the widget holds the character and the next 60 Hz frame has run;
  * memory: the process's resident size before, during and after the stream.

Prints a table and writes JSON to bench/results/ (or --json PATH).
"""
from __future__ import annotations

import llama_cpp  # noqa: F401  (first: see bench_engine.py)
import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from textual import events

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from luce_engine import Engine, Model, Sampling, StepResult, default_model_path  # noqa: E402
from luce_tui.app import ChatOptions, LuceApp  # noqa: E402
from luce_tui.runtime import Runtime  # noqa: E402
from tools.tiny_gguf import TinyConfig, write_tiny_gguf  # noqa: E402

WORDS = ("The engine verifies **sixteen** drafted tokens in one batch; `commit(k)` keeps the prefix. "
         "def step(self):\n    return self.engine.verify(block)\n\n- item one\n- item two\n").split(" ")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class SyntheticStream:
    """SYNTHETIC TOKEN SOURCE: a real engine for the prompt, a paced fake stream for the reply."""

    def __init__(self, engine, n_tokens: int, rate: float):
        self._engine, self.n_tokens, self.rate = engine, n_tokens, rate
        self.t_start = self.t_end = 0.0

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def generate(self, prompt=None, *, sampling=None, max_tokens=256, progress=None, **kw):
        for _ in self._engine.generate(max_tokens=0):
            pass
        if prompt:
            self._engine.prefill(prompt, progress=progress)
        per_step = 4
        self.t_start = time.perf_counter()
        for i in range(0, self.n_tokens, per_step):
            due = self.t_start + i / self.rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            pieces = [WORDS[(i + j) % len(WORDS)] + " " for j in range(per_step)]
            drafted = (i // per_step) % 2 == 1
            last = i + per_step >= self.n_tokens
            yield StepResult(tokens=[0] * per_step, drafted=[drafted] * per_step, n_drafted=per_step if drafted else 0,
                             n_accepted=per_step if drafted else 0, text="".join(pieces),
                             finish_reason="length" if last else None, spans=[("".join(pieces), drafted)])
        self.t_end = time.perf_counter()


async def measure(app: LuceApp, stream: SyntheticStream, key_every: float) -> dict:
    ticks: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        app.set_interval(1 / 60, lambda: ticks.append(time.perf_counter()))
        prompt = app.query_one("#input")
        prompt.focus()
        await pilot.pause()
        prompt.text = "Stream a long answer."
        rss0 = rss_mib()
        # keys go in as events, the way a terminal delivers them (pilot.press would wait for the
        # app to be idle, which it never is while streaming)
        prompt.post_message(events.Key("enter", None))
        while stream.t_start == 0.0:
            await asyncio.sleep(0.005)
        latencies, rss_samples = [], []
        while stream.t_end == 0.0:
            await asyncio.sleep(key_every)
            before = prompt.text
            t0 = time.perf_counter()
            prompt.post_message(events.Key("x", "x"))
            while prompt.text == before:
                await asyncio.sleep(0.0005)
            t1 = time.perf_counter()
            while not ticks or ticks[-1] < t1:   # the next frame after the change shows it
                await asyncio.sleep(0.0005)
            latencies.append((ticks[-1] - t0) * 1e3)
            rss_samples.append(rss_mib())
        await pilot.pause(0.3)   # let the last frames drain
        rss1 = rss_mib()
    window = [t for t in ticks if stream.t_start <= t <= stream.t_end]
    gaps = [(b - a) * 1e3 for a, b in zip(window, window[1:])]
    return {
        "tokens": stream.n_tokens, "rate_target": stream.rate,
        "rate_achieved": stream.n_tokens / (stream.t_end - stream.t_start),
        "frame_gap_ms": {"worst": max(gaps), "p99": sorted(gaps)[int(0.99 * (len(gaps) - 1))],
                         "median": statistics.median(gaps)},
        "key_latency_ms": {"worst": max(latencies), "median": statistics.median(latencies), "n": len(latencies)},
        "rss_mib": {"before": rss0, "peak_during": max(rss_samples), "after": rss1},
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=20_000)
    ap.add_argument("--rate", type=float, default=2_000.0, help="synthetic tokens per second")
    ap.add_argument("--key-every", type=float, default=0.1, help="seconds between key presses")
    ap.add_argument("--highlight", action="store_true", help="stream into the provenance view (drafted tokens coloured)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp())
    os.environ["LUCE_DATA_DIR"] = str(tmp / "data")
    os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
    path = write_tiny_gguf(tmp / "tiny.gguf", TinyConfig(arch="llama", n_vocab=0, tokenizer_from=default_model_path()))
    engine = Engine(Model(path, device="cpu"), n_ctx=1024)
    stream = SyntheticStream(engine, args.tokens, args.rate)
    app = LuceApp(Runtime(stream), Sampling(), ChatOptions(max_tokens=args.tokens, highlight=args.highlight))
    result = asyncio.run(measure(app, stream, args.key_every))
    result["source"] = "SYNTHETIC token stream through the real app and widgets"
    result["view"] = "provenance (highlight)" if args.highlight else "markdown"
    out = Path(args.json) if args.json else ROOT / "bench" / "results" / f"tui-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    r = result
    print(f"\nSYNTHETIC stream: {r['tokens']} tokens at {r['rate_achieved']:.0f} tok/s (target {r['rate_target']:.0f}), "
          f"{r['view']} view")
    print(f"{'UI frame gap ms':<28} worst {r['frame_gap_ms']['worst']:7.1f}  p99 {r['frame_gap_ms']['p99']:6.1f}  "
          f"median {r['frame_gap_ms']['median']:5.1f}")
    print(f"{'key-press latency ms':<28} worst {r['key_latency_ms']['worst']:7.1f}  median "
          f"{r['key_latency_ms']['median']:5.1f}  ({r['key_latency_ms']['n']} presses)")
    print(f"{'resident memory MiB':<28} before {r['rss_mib']['before']:.0f}  peak {r['rss_mib']['peak_during']:.0f}  "
          f"after {r['rss_mib']['after']:.0f}")
    print(f"json: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
