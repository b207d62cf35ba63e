"""llama.cpp's own acceptance with a DFlash draft on the held-out prompts, beside ours.

    python bench/gpu/llama_cli_acceptance.py --llama-cli /tmp/lcpbuild/bin/llama-cli \
        --target T.gguf --draft D.gguf --ours bench/results/spec-real-cuda0-....json [--per-category 10]

Runs `llama-cli -m T -md D --spec-type draft-dflash --spec-draft-n-max 15 -st -p TEXT --temp 0 -n 256`
per prompt (its chat template renders the same prompt as ours: the template's default system prompt,
the user message, the assistant header) and parses the slot's "draft acceptance = R (A accepted / G
generated), mean len = L" line. Prints its acceptance rate and mean length next to ours at T = 0
(from bench_spec.py --real's JSON) and their ratio; the issue asks for agreement within 10%.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.dflash_train.corpus import CATEGORIES, heldout_prompts  # noqa: E402

ACC_RE = re.compile(r"draft acceptance = ([0-9.]+) \(\s*(\d+) accepted /\s*(\d+) generated\), mean len =\s*([0-9.]+)")


def run_one(cli: str, target: str, draft: str, text: str, n: int, k: int, extra=()) -> tuple[int, int] | None:
    cmd = [cli, "-m", target, "-md", draft, "-ngl", "99", "-ngld", "99", "-fa", "on", "--spec-type", "draft-dflash",
           "--spec-draft-n-max", str(k), "-n", str(n), "-st", "-p", text, "--temp", "0", "-lv", "3", *extra]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    m = ACC_RE.findall(r.stdout + r.stderr)
    if not m:
        print(f"no acceptance line (rc {r.returncode}): {(r.stdout + r.stderr)[-800:]}", file=sys.stderr)
        return None
    _, acc, gen, _ = m[-1]
    return int(acc), int(gen)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cli", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--ours", default=None, help="bench_spec.py --real JSON of the same prompts")
    ap.add_argument("--per-category", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--draft-max", type=int, default=15)
    ap.add_argument("--extra", default="", help="more llama-cli flags, later ones win (e.g. '-fa off')")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    extra = shlex.split(a.extra)
    prompts = heldout_prompts()
    if a.per_category:
        prompts = [p for c in CATEGORIES for p in [q for q in prompts if q.category == c][:a.per_category]]
    per_cat = {c: [0, 0] for c in CATEGORIES}
    failed = 0
    for p in prompts:
        r = run_one(a.llama_cli, a.target, a.draft, p.text, a.tokens, a.draft_max, extra)
        if r is None:
            failed += 1
            continue
        per_cat[p.category][0] += r[0]
        per_cat[p.category][1] += r[1]
    acc = sum(v[0] for v in per_cat.values())
    gen = sum(v[1] for v in per_cat.values())
    theirs = {"acceptance_rate": acc / gen if gen else None, "failed_prompts": failed, "extra": a.extra,
              "n_prompts": len(prompts), "tokens": a.tokens,
              "by_category": {c: (v[0] / v[1] if v[1] else None) for c, v in per_cat.items()}}
    print(f"llama.cpp draft-dflash{' ' + a.extra if a.extra else ''} on {len(prompts) - failed} held-out prompts: acceptance "
          f"{theirs['acceptance_rate']:.4f} ({acc} / {gen} drafted)" if gen else "llama.cpp: no acceptance measured")
    for c in CATEGORIES:
        v = theirs["by_category"][c]
        print(f"  {c}: {v:.4f}" if v is not None else f"  {c}: —")
    if a.ours and gen:
        ours = json.loads(Path(a.ours).read_text())["temperatures"]["0.0"]
        ratio = theirs["acceptance_rate"] / ours["acceptance_rate"] if ours["acceptance_rate"] else None
        theirs["ours_acceptance_rate"], theirs["ratio"] = ours["acceptance_rate"], ratio
        print(f"ours (T=0): acceptance {ours['acceptance_rate']:.4f}, AL {ours['al']:.2f}; "
              f"llama.cpp / ours = {ratio:.3f} (within 10%: {abs(ratio - 1) <= 0.10 if ratio else '—'})")
    if a.json:
        Path(a.json).write_text(json.dumps(theirs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
