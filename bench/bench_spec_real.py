"""Real-prompt mode of bench/bench_spec.py: the shipped (or a given) DFlash draft on the held-out
prompts of its corpus (tools/dflash_train/corpus.py, never trained on), plain vs speculative.

    python bench/bench_spec.py --real [--device cpu] [--threads 2] [--per-category 40] [--tokens 256]

Per temperature (0 and 0.7, same seed for plain and speculative): AL per category (tokens
emitted per target verify), acceptance rate, acceptance by draft position (share of steps whose
i-th draft was accepted), decode tok/s plain vs speculative (prefill excluded), draft and verify ms
per step. Each reply ends at the model's end of turn or after --tokens tokens. JSON to bench/results/.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from luce_engine import DraftModel, Engine, Model, Sampling, default_model_path
from luce_engine.default_draft import shipped_draft_path
from luce_engine.speculative import ChainSpeculator, SpecStats
from tools.dflash_train.corpus import CATEGORIES, heldout_prompts
from tools.dflash_train.prompt_ids import PromptEncoder


def _decode(eng: Engine, ids: list[int], sampling: Sampling, n: int, spec=None) -> tuple[list[int], float]:
    eng.speculator = None
    eng.truncate(0)
    if spec is not None:
        spec.attach()          # capture on before the prompt is evaluated
        spec.stats = SpecStats()
    eng.prefill(ids)
    t0 = time.perf_counter()
    out = [t for r in eng.generate(None, sampling=sampling, max_tokens=n, speculator=spec) for t in r.tokens]
    return out, time.perf_counter() - t0


def run(args) -> dict:
    target = args.target or default_model_path()
    draft_path = args.draft or shipped_draft_path()
    model = Model(target, device=args.device, n_threads=args.threads)
    draft = DraftModel(draft_path, model)
    k = min(args.draft_max, draft.block_size - 1)
    enc = PromptEncoder(target)
    prompts = heldout_prompts()
    if args.per_category:
        prompts = [p for c in CATEGORIES for p in [q for q in prompts if q.category == c][:args.per_category]]
    n_ctx = max(len(enc.encode(p.messages())) for p in prompts) + args.tokens + 64
    eng = Engine(model, n_ctx=n_ctx, n_verify_max=k + 1)
    spec = ChainSpeculator(eng, draft, max_draft=k)
    warm = enc.encode(prompts[0].messages())
    _decode(eng, warm, Sampling(), 32)
    _decode(eng, warm, Sampling(), 32, spec)

    result = {"target": target, "draft": draft_path, "device": model.device, "threads": args.threads,
              "draft_max": k, "tokens": args.tokens, "n_prompts": len(prompts),
              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "temperatures": {}}
    for temp in (0.0, 0.7):
        per_cat = {c: {"emitted": 0, "steps": 0, "drafted": 0, "accepted": 0} for c in CATEGORIES}
        acc_at = np.zeros(k)
        plain_tok = spec_tok = 0
        plain_s = spec_s = draft_ms = verify_ms = 0.0
        same = 0
        for i, p in enumerate(prompts):
            ids = enc.encode(p.messages())
            sampling = Sampling(temperature=temp, seed=1000 + i)
            plain, tp = _decode(eng, ids, sampling, args.tokens)
            got, ts = _decode(eng, ids, sampling, args.tokens, spec)
            st = spec.stats
            same += int(got == plain)
            plain_tok, plain_s = plain_tok + len(plain), plain_s + tp
            spec_tok, spec_s = spec_tok + len(got), spec_s + ts
            draft_ms, verify_ms = draft_ms + st.draft_ms, verify_ms + st.verify_ms
            c = per_cat[p.category]
            c["emitted"] += st.n_emitted
            c["steps"] += st.n_steps
            c["drafted"] += st.n_drafted
            c["accepted"] += st.n_accepted
            for j, a in enumerate(st.accepted_at[:k]):
                acc_at[j] += a
        steps = sum(c["steps"] for c in per_cat.values())
        emitted = sum(c["emitted"] for c in per_cat.values())
        drafted = sum(c["drafted"] for c in per_cat.values())
        accepted = sum(c["accepted"] for c in per_cat.values())
        result["temperatures"][str(temp)] = {
            "al": emitted / steps, "acceptance_rate": accepted / drafted if drafted else 0.0,
            "al_by_category": {c: v["emitted"] / v["steps"] if v["steps"] else 0.0 for c, v in per_cat.items()},
            "acceptance_by_position": (acc_at / steps).round(4).tolist(),
            "plain_tok_s": plain_tok / plain_s, "spec_tok_s": spec_tok / spec_s,
            "speedup": (spec_tok / spec_s) / (plain_tok / plain_s),
            "draft_ms_per_step": draft_ms / steps, "verify_ms_per_step": verify_ms / steps,
            "steps": steps, "tokens_plain": plain_tok, "tokens_spec": spec_tok,
            "replies_identical_to_plain": same, "per_category": per_cat,
        }
        print(f"T={temp}: " + json.dumps({k: v for k, v in result["temperatures"][str(temp)].items()
                                          if k != "per_category"}), flush=True)
    return result


def report(result: dict) -> None:
    print(f"\n{Path(result['target']).name} + {Path(result['draft']).name} on {result['device']} "
          f"({result['threads']} threads), K={result['draft_max']}, {result['n_prompts']} held-out prompts, "
          f"up to {result['tokens']} tokens each")
    print(f"{'T':>4}{'AL':>6}" + "".join(f"{c:>7}" for c in CATEGORIES) +
          f"{'acc%':>6}{'plain':>8}{'spec':>8}{'x':>6}{'draft':>7}{'verify':>8}{'same':>6}")
    for t, r in result["temperatures"].items():
        print(f"{float(t):>4g}{r['al']:>6.2f}" + "".join(f"{r['al_by_category'][c]:>7.2f}" for c in CATEGORIES) +
              f"{100 * r['acceptance_rate']:>6.1f}{r['plain_tok_s']:>8.1f}{r['spec_tok_s']:>8.1f}"
              f"{r['speedup']:>6.2f}{r['draft_ms_per_step']:>7.1f}{r['verify_ms_per_step']:>8.1f}"
              f"{r['replies_identical_to_plain']:>6d}")
    for t, r in result["temperatures"].items():
        print(f"T={t} acceptance by position: " + " ".join(f"{x:.2f}" for x in r["acceptance_by_position"]))
    print("(AL = tokens per target verify; plain/spec = decode tok/s, prefill excluded; draft/verify = ms per "
          "step; same = replies identical to plain decoding)")


def main(args) -> int:
    result = run(args)
    out = Path(args.json) if args.json else Path(__file__).resolve().parent / "results" / (
        f"spec-real-{args.device.replace(':', '')}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    report(result)
    print(f"json: {out}")
    return 0

