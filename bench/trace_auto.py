"""Where `--spec auto`'s time goes, step by step: runs bench_spec.py's arguments with every
AdaptiveSpeculator step timed and labelled (its mode, whether a shadow draft followed it, the previous mode, the
target's and the draft's graph builds during it), then prints per mode and per (previous -> mode)
switch: steps, tokens, ms per step and per token, builds. A diagnostic, not a benchmark.

    python bench/trace_auto.py --json trace.json -- --real --spec auto --target M --device cuda:0 ...
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from luce_engine import spec_auto  # noqa: E402

STEPS: list[dict] = []


def _traced(step):
    def wrapper(self, sampling, **kw):
        eng = self.engine
        before = eng.stats()["n_graph_builds"]
        d_before = _draft_builds(self)
        shadows, cals, last = self.n_shadows, self.n_calibrations, self.last_mode
        t0 = time.perf_counter()
        r = step(self, sampling, **kw)
        ms = (time.perf_counter() - t0) * 1e3
        mode = self.last_mode
        STEPS.append({"mode": mode, "prev": last, "ms": ms, "tokens": len(r.tokens),
                      "shadow": self.n_shadows > shadows, "calibrations": self.n_calibrations - cals,
                      "builds": eng.stats()["n_graph_builds"] - before,
                      "draft_builds": _draft_builds(self) - d_before})
        return r
    return wrapper


def _draft_builds(spec) -> int:
    stats = getattr(spec.drafter, "stats", None)   # a DraftModel's; a drafter without graphs has none
    return int(stats()["n_graph_builds"]) if stats else 0


def _table(groups: dict, title: str) -> None:
    print(f"\n{title}")
    print(f"{'':>22} | steps | tokens | ms/step med | ms/step mean | ms/token | builds | draft builds")
    for key, rows in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ms = [r["ms"] for r in rows]
        tok = sum(r["tokens"] for r in rows)
        print(f"{key:>22} | {len(rows):5d} | {tok:6d} | {statistics.median(ms):11.2f} | {statistics.mean(ms):12.2f} | "
              f"{sum(ms) / max(tok, 1):8.3f} | {sum(r['builds'] for r in rows):6d} | {sum(r['draft_builds'] for r in rows):6d}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write every step here")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then bench_spec.py's arguments")
    args = ap.parse_args()
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    spec_auto.AdaptiveSpeculator.step = _traced(spec_auto.AdaptiveSpeculator.step)
    import bench_spec
    sys.argv = ["bench_spec.py", *bench_args]
    rc = bench_spec.main()
    by_mode = collections.defaultdict(list)
    by_switch = collections.defaultdict(list)
    for r in STEPS:
        by_mode[r["mode"] + (" +shadow" if r["shadow"] else "") + (" +cal" if r["calibrations"] else "")].append(r)
        if r["prev"] != r["mode"]:
            by_switch[f"{r['prev']}->{r['mode']}"].append(r)
    total_ms = sum(r["ms"] for r in STEPS)
    total_tok = sum(r["tokens"] for r in STEPS)
    print(f"\nauto trace: {len(STEPS)} steps, {total_tok} tokens, {total_ms:.1f} ms ({total_ms / max(total_tok, 1):.3f} ms/token)")
    _table(by_mode, "by mode (steps that switched included)")
    _table(by_switch, "switches (previous -> this step's mode)")
    if args.json:
        Path(args.json).write_text(json.dumps(STEPS))
    return rc


if __name__ == "__main__":
    sys.exit(main())
