"""Why the shipped draft accepts less on one device than another: the text, the target's features or
the draft's compute? Chain-of-K acceptance length (AL, tokens per step, walked greedily as
`bench/sim_auto.py` does) of the shipped draft on the held-out prompts (T = 0), from:

  engine        the engine's draft on the engine's features (CPU), over the engine's greedy text
  torch feats   the engine's draft on the training code's float features (tools/dflash_train/target.py)
  torch draft   the training code's draft (draft_torch.py) on those features
  torch text    the training code's draft over the float target's own greedy text, with ggml's activation
                rounding (act_quant, as training generated its data) and without

The first three share one text (the engine's); the last changes the text only. Needs PyTorch (the
trainer's dependency, not the engine's):

    python bench/al_by_text.py [--per-category 4] [--tokens 256] [--k 7] [--threads 2]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from luce_engine import DraftModel, Model, default_model_path  # noqa: E402
from luce_engine.default_draft import shipped_draft_path  # noqa: E402
from tools.dflash_train.corpus import CATEGORIES  # noqa: E402
from tools.dflash_train.draft_torch import DFlashDraft, DraftConfig  # noqa: E402
from tools.dflash_train.prompt_ids import PromptEncoder  # noqa: E402
from tools.dflash_train.target import Target  # noqa: E402

from bench.al_walk import ALTable, capturing_engine, chain_al, engine_proposals, greedy_text, heldout_by_category  # noqa: E402


def torch_proposals(draft: DFlashDraft, tgt: Target, feats: torch.Tensor, seq: list[int], c0: int, k: int) -> np.ndarray:
    """The training code's draft: every block of the continuation at once, each seeing positions < its anchor."""
    anchors = torch.arange(c0, len(seq))[None]
    with torch.no_grad():
        h = draft(tgt.token_embd, feats, torch.tensor([seq]), anchors)
        return (h[0, :, 1:k + 1, :] @ tgt.output.T).argmax(-1).numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-category", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--k", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    path = default_model_path()
    model = Model(path, device="cpu", n_threads=args.threads)
    draft = DraftModel(shipped_draft_path(), model)
    cfg = DraftConfig()
    tdraft = DFlashDraft(cfg)
    tdraft.load_gguf(shipped_draft_path())
    tdraft.eval()
    targets = {q: Target.from_gguf(path, act_quant=q) for q in (True, False)}
    enc = PromptEncoder(path)
    eog = set(model.tokenizer.eog_ids)
    prompts = heldout_by_category(args.per_category)
    eng = capturing_engine(model, draft, [enc.encode(p.messages()) for p in prompts], args.tokens)
    rows = ("engine", "torch feats", "torch draft", "torch text, act_quant", "torch text, float")
    table = ALTable(rows, CATEGORIES)
    for p in prompts:
        ids = enc.encode(p.messages())
        text = greedy_text(eng, ids, args.tokens, eog)
        seq, c0 = ids + text, len(ids)
        eng.truncate(0)
        eng.prefill(seq[:-1])
        efeats = np.stack([eng.captured(q).reshape(-1) for q in range(len(seq) - 1)])
        with torch.no_grad():
            _, tfeats = targets[True](torch.tensor([seq[:-1]]), capture=cfg.capture, logits=False)
        runs = {"engine": engine_proposals(draft, efeats, c0, text, args.k),
                "torch feats": engine_proposals(draft, tfeats[0].numpy().astype(np.float32), c0, text, args.k),
                "torch draft": torch_proposals(tdraft, targets[True], tfeats, seq, c0, args.k)}
        for name, prop in runs.items():
            table.add(name, p.category, chain_al(prop, text, args.k))
        for q, name in ((True, "torch text, act_quant"), (False, "torch text, float")):
            tgt = targets[q]
            with torch.no_grad():
                out = [int(t) for t in tgt.generate([ids], max_new=args.tokens, stop_ids=eog)[0] if t >= 0]
            own = [t for t in out if t not in eog]
            seq2 = ids + own
            with torch.no_grad():
                _, f2 = tgt(torch.tensor([seq2[:-1]]), capture=cfg.capture, logits=False)
            table.add(name, p.category, chain_al(torch_proposals(tdraft, tgt, f2, seq2, c0, args.k), own, args.k))
        print(f"{p.category}: done", flush=True)
    print(f"chain of {args.k}, AL on {len(prompts)} held-out prompts, T = 0, up to {args.tokens} tokens")
    table.print("", 24)


if __name__ == "__main__":
    main()
