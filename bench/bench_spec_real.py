"""Real-prompt mode of bench/bench_spec.py: the shipped (or a given) DFlash draft on the held-out
prompts of its corpus (tools/dflash_train/corpus.py, never trained on), plain vs speculative.

    python bench/bench_spec.py --real [--device cpu] [--threads 2] [--per-category 40] [--tokens 256]
    python bench/bench_spec.py --real --spec both --tree-budget 4,8,16,22,32 --temps 0,0.7
    python bench/bench_spec.py --real --spec all --tree-budget 8,16,32 --temps 0 --per-category 3

Per temperature (0 and 0.7, same seed for plain and speculative): AL per category (tokens
emitted per target verify), acceptance rate, acceptance by draft position (share of steps whose
i-th draft was accepted), per mode (chain, and DDTree at each --tree-budget), decode tok/s plain vs speculative (prefill excluded), draft and verify ms
per step, decode tok/s per category; `auto` (luce_engine.spec_auto, weighing plain, the chain and
the --tree-budget trees) also reports its share of tokens per mode. Each reply ends at the model's
end of turn or after --tokens tokens. JSON to bench/results/.
"""
from __future__ import annotations

import collections
import json
import time
from pathlib import Path

import numpy as np

from luce_engine import DraftModel, Engine, Model, Sampling, default_model_path
from luce_engine.default_draft import shipped_draft_path
from luce_engine.spec_auto import AdaptiveSpeculator
from luce_engine.speculative import ChainSpeculator, SpecStats
from luce_engine.tree_speculative import TreeSpeculator
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


def _modes(args) -> list[tuple[str, int]]:
    """(name, tree budget; 0 = chain, -1 = auto) for --spec chain|tree|both|auto|all and --tree-budget."""
    budgets = [int(b) for b in str(args.tree_budget).split(",") if b]
    spec = getattr(args, "spec", "chain") or "chain"
    modes = [("chain", 0)] if spec in ("chain", "both", "all") else []
    if spec in ("tree", "both", "all"):
        modes += [(f"tree{b}", b) for b in budgets]
    if spec in ("auto", "all"):
        modes.append(("auto", -1))
    return modes


def _summary(per_cat, acc_at, steps_k, totals, auto_tokens=None) -> dict:
    plain_tok, plain_s, spec_tok, spec_s, draft_ms, verify_ms, same, nodes = totals
    steps = sum(c["steps"] for c in per_cat.values())
    emitted = sum(c["emitted"] for c in per_cat.values())
    drafted = sum(c["drafted"] for c in per_cat.values())
    accepted = sum(c["accepted"] for c in per_cat.values())
    return {
        "al": emitted / steps, "acceptance_rate": accepted / drafted if drafted else 0.0,
        "al_by_category": {c: v["emitted"] / v["steps"] if v["steps"] else 0.0 for c, v in per_cat.items()},
        "plain_tok_s_by_category": {c: v["plain_tok"] / v["plain_s"] if v["plain_s"] else 0.0
                                    for c, v in per_cat.items()},
        "spec_tok_s_by_category": {c: v["spec_tok"] / v["spec_s"] if v["spec_s"] else 0.0 for c, v in per_cat.items()},
        "acceptance_by_position": (acc_at / steps).round(4).tolist(),
        "plain_tok_s": plain_tok / plain_s, "spec_tok_s": spec_tok / spec_s,
        "speedup": (spec_tok / spec_s) / (plain_tok / plain_s),
        "draft_ms_per_step": draft_ms / steps, "verify_ms_per_step": verify_ms / steps,
        "verified_per_step": nodes / steps + 1,
        "steps": steps, "tokens_plain": plain_tok, "tokens_spec": spec_tok,
        "replies_identical_to_plain": same, "per_category": per_cat,
        **({"auto_tokens_by_mode": dict(auto_tokens)} if auto_tokens else {}),
    }


def _auto_state(spec: AdaptiveSpeculator) -> dict:
    """auto's cost estimates (ms), acceptance estimates and predictions (ms per token) as they stand."""
    c = spec.costs
    r3 = lambda v: None if v is None else round(float(v), 3)   # noqa: E731
    return {"plain": r3(c.plain), "draft": {x: r3(v) for x, v in c.draft.items()},
            "verify": {f"{kind}{rows}": r3(v) for (kind, rows), v in sorted(c.verify.items())},
            "inject_call": r3(c.inject_call), "inject_row": r3(c.inject_row),
            "steady_step": {x: r3(v) for x, v in c.step_ms.items()}, "switch": r3(c.switch_cost()),
            "shadow": r3(c.shadow),
            "acceptance": {x: r3(v) for x, v in spec.acceptance.items()},
            "predicted_ms_per_token": {x: r3(v) for x, v in spec.predictions().items()},
            "shadows": spec.n_shadows, "calibrations": spec.n_calibrations}


def run(args) -> dict:
    target = args.target or default_model_path()
    draft_path = args.draft or shipped_draft_path()
    model = Model(target, device=args.device, n_threads=args.threads)
    step_kv_pad = getattr(args, "step_kv_pad", None)   # the target's steps and the draft's block alike
    draft = DraftModel(draft_path, model, **({} if step_kv_pad is None else {"kv_pad": step_kv_pad}))
    k = min(args.draft_max, draft.block_size - 1)
    enc = PromptEncoder(target)
    prompts = heldout_prompts()
    if args.per_category:
        prompts = [p for c in CATEGORIES for p in [q for q in prompts if q.category == c][:args.per_category]]
    modes = _modes(args)
    n_ctx = max(len(enc.encode(p.messages())) for p in prompts) + args.tokens + 64
    budgets = [int(b) for b in str(args.tree_budget).split(",") if b]
    auto = any(b < 0 for _, b in modes)
    pad = {} if step_kv_pad is None else {"step_kv_pad": step_kv_pad}
    eng = Engine(model, n_ctx=n_ctx, n_verify_max=max([k + 1] + [b + 1 for _, b in modes] +
                                                      [b + 1 for b in budgets if auto]), **pad)

    def make(b: int):
        if b < 0:
            return AdaptiveSpeculator(eng, draft, max_draft=k, tree_budgets=budgets)
        return ChainSpeculator(eng, draft, max_draft=k) if b == 0 else TreeSpeculator(eng, draft, budget=b, max_depth=k)

    specs = {name: make(b) for name, b in modes}
    # a session's first reply (auto's calibrations, the first graphs of each shape), timed apart
    warm, n_warm = enc.encode(prompts[0].messages()), getattr(args, "warmup_tokens", 32)
    _decode(eng, warm, Sampling(), 8)
    warm_plain, warm_plain_s = _decode(eng, warm, Sampling(), n_warm)
    warmup = {"tokens": len(warm_plain), "plain_s": warm_plain_s, "modes": {}}
    for m, spec in specs.items():
        got, s = _decode(eng, warm, Sampling(), n_warm, spec)
        warmup["modes"][m] = {"tokens": len(got), "s": s}

    result = {"target": target, "draft": draft_path, "device": model.device, "threads": args.threads,
              "warmup": warmup, "draft_max": k, "tokens": args.tokens, "n_prompts": len(prompts),
              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "modes": {m: {"temperatures": {}} for m, _ in modes}}
    for temp in [float(t) for t in str(args.temps).split(",") if t]:
        acc = {m: ({c: {"emitted": 0, "steps": 0, "drafted": 0, "accepted": 0, "plain_tok": 0, "plain_s": 0.0,
                        "spec_tok": 0, "spec_s": 0.0} for c in CATEGORIES}, np.zeros(k),
                   [0, 0.0, 0, 0.0, 0.0, 0.0, 0, 0]) for m, _ in modes}
        auto_tokens = collections.Counter()
        for i, p in enumerate(prompts):
            ids = enc.encode(p.messages())
            sampling = Sampling(temperature=temp, seed=1000 + i)
            # plain first on even prompts, last on odd ones: on the 2-core CPU a reply decoded right
            # after another of the same prompt ran ~1.5% faster, a bias for whichever came second
            if i % 2 == 0:
                plain, tp = _decode(eng, ids, sampling, args.tokens)
            runs = {m: _decode(eng, ids, sampling, args.tokens, spec) for m, spec in specs.items()}
            if i % 2 == 1:
                plain, tp = _decode(eng, ids, sampling, args.tokens)
            for m, spec in specs.items():
                got, ts = runs[m]
                st = spec.stats
                per_cat, acc_at, t = acc[m]
                for j, x in enumerate((len(plain), tp, len(got), ts, st.draft_ms, st.verify_ms, int(got == plain),
                                       st.n_drafted)):
                    t[j] += x
                c = per_cat[p.category]
                c["emitted"] += st.n_emitted
                c["steps"] += st.n_steps
                c["drafted"] += st.n_drafted
                c["accepted"] += st.n_accepted
                c["plain_tok"] += len(plain)
                c["plain_s"] += tp
                c["spec_tok"] += len(got)
                c["spec_s"] += ts
                if isinstance(spec, AdaptiveSpeculator):
                    auto_tokens.update(spec.reply_tokens)
                for j, a in enumerate(st.accepted_at[:k]):
                    acc_at[j] += a
        for m, _ in modes:
            r = result["modes"][m]["temperatures"][str(temp)] = _summary(
                acc[m][0], acc[m][1], k, acc[m][2], auto_tokens if isinstance(specs[m], AdaptiveSpeculator) else None)
            if isinstance(specs[m], AdaptiveSpeculator):   # what auto believed at the end: why it chose
                r["auto_state"] = _auto_state(specs[m])
            print(f"{m} T={temp}: " + json.dumps({x: v for x, v in r.items() if x != "per_category"}), flush=True)
    if "chain" in result["modes"]:
        result["temperatures"] = result["modes"]["chain"]["temperatures"]   # the layout before tree modes
    # how the target's steps ran: whole CUDA graphs replayed, our kernels, graphs rebuilt
    st = eng.stats()
    result["target_engine"] = {x: st[x] for x in ("n_graph_builds", "n_graph_reuses", "n_small_batch_evals",
                                                  "n_step_graph_replays")}
    print("target engine: " + json.dumps(result["target_engine"]), flush=True)
    return result


def report(result: dict) -> None:
    w = result.get("warmup")
    if w:
        print(f"warm-up reply (the first of each mode, unmeasured below; {w['tokens']} tokens): plain "
              f"{w['tokens'] / w['plain_s']:.1f} tok/s; " + ", ".join(
                  f"{m} {v['tokens'] / v['s']:.1f} ({v['tokens'] / v['s'] / (w['tokens'] / w['plain_s']):.2f}x)"
                  for m, v in w["modes"].items()))
    print(f"\n{Path(result['target']).name} + {Path(result['draft']).name} on {result['device']} "
          f"({result['threads']} threads), K={result['draft_max']}, {result['n_prompts']} held-out prompts, "
          f"up to {result['tokens']} tokens each")
    print(f"{'mode':>8}{'T':>5}{'AL':>6}" + "".join(f"{c:>7}" for c in CATEGORIES) +
          f"{'acc%':>6}{'rows':>6}{'plain':>8}{'spec':>8}{'x':>6}{'draft':>7}{'verify':>8}{'same':>6}")
    for m, mode in result["modes"].items():
        for t, r in mode["temperatures"].items():
            print(f"{m:>8}{float(t):>5g}{r['al']:>6.2f}" + "".join(f"{r['al_by_category'][c]:>7.2f}" for c in CATEGORIES) +
                  f"{100 * r['acceptance_rate']:>6.1f}{r['verified_per_step']:>6.1f}{r['plain_tok_s']:>8.1f}"
                  f"{r['spec_tok_s']:>8.1f}{r['speedup']:>6.2f}{r['draft_ms_per_step']:>7.1f}"
                  f"{r['verify_ms_per_step']:>8.1f}{r['replies_identical_to_plain']:>6d}")
    for m, mode in result["modes"].items():
        for t, r in mode["temperatures"].items():
            print(f"{m} T={t} acceptance by depth: " + " ".join(f"{x:.2f}" for x in r["acceptance_by_position"]))
    print("decode tok/s by category (plain measured beside each mode, on the same prompts):")
    for m, mode in result["modes"].items():
        for t, r in mode["temperatures"].items():
            cats = "  ".join(f"{c} {r['plain_tok_s_by_category'][c]:.1f} -> {r['spec_tok_s_by_category'][c]:.1f} "
                             f"({r['spec_tok_s_by_category'][c] / r['plain_tok_s_by_category'][c]:.2f}x)"
                             for c in CATEGORIES if r["plain_tok_s_by_category"][c])
            modes = r.get("auto_tokens_by_mode")
            share = (" | tokens by mode: " + ", ".join(f"{k} {100 * v / sum(modes.values()):.0f}%"
                                                       for k, v in sorted(modes.items(), key=lambda x: -x[1]))
                     if modes else "")
            print(f"{m:>8} T={t}: {cats}{share}")
    print("(AL = tokens per target verify; rows = tokens verified per step; plain/spec = decode tok/s, prefill "
          "excluded; draft/verify = ms per step (tree: verify includes the walk and commit); same = replies "
          "identical to plain decoding)")


def main(args) -> int:
    result = run(args)
    out = Path(args.json) if args.json else Path(__file__).resolve().parent / "results" / (
        f"spec-real-{args.device.replace(':', '')}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    report(result)
    print(f"json: {out}")
    return 0

