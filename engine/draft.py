"""DFlash draft model (native): a small non-causal drafter conditioned on the target's hidden states.

    target = Model("qwen3.6-27b.gguf")
    draft = DraftModel("dflash-draft.gguf", target)          # llama.cpp or lucebox dialect
    draft.inject(features, start_pos=0)                      # [n, len(capture_layers) * n_embd]
    proposals = draft.draft(x0, pos0)                        # block_size - 1 greedy tokens

It implements the `Drafter` protocol of luce_engine.speculative. `capture_layers` are in the
internal convention (index i = output of target layer i = `Engine.set_capture(..., output=True)`).
Every compute call releases the GIL.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from luce_engine import _core


class DraftModel:
    """A DFlash draft GGUF loaded on its target's device, with a draft KV cache of n_ctx_draft positions.

    Raises DraftMismatchError when the file is a valid draft for another target (hidden size,
    capture layers, fc width, mask token), ModelValidationError / UnsupportedModelError /
    ModelFormatError for a bad file; messages name the file and the key or tensor.
    """

    def __init__(self, path: str | os.PathLike, target_model, *, n_ctx_draft: int = 4096, use_mmap: bool = True,
                 small_batch_kernels: bool = True, step_graphs: bool = True, kv_pad: int = 256):
        """small_batch_kernels / step_graphs: on CUDA, the draft block and a speculative step's
        injection run on luce's small-batch kernels, each captured once as one CUDA graph (the
        Engine flags of the same names); kv_pad: the block attends its context in steps of this many
        positions (a multiple of 256; each step crossed rebuilds its graph: the Engine's step_kv_pad)."""
        target_model = _target(target_model)
        self.path = str(Path(path).expanduser())
        self.target = target_model
        self._core = _core.CoreDraft(self.path, target_model._core, n_ctx_draft, use_mmap, small_batch_kernels,
                                     step_graphs, kv_pad)
        self._info = self._core.info

    @staticmethod
    def plan(path: str | os.PathLike, target_model, *, n_ctx_draft: int = 4096, capture_ring: int = 4096) -> dict:
        """Memory a draft in use needs (bytes), without reading or allocating its weights.

        The file is validated against the target exactly as DraftModel() does and raises the same
        errors; the target may be a `Model(..., plan_only=True)`. Keys: weights, kv_cache (exact),
        compute (an upper bound of the measured scratch), capture_ring (the target engine's
        hidden-state ring of `capture_ring` positions that speculation allocates), total; plus
        n_ctx_draft, capture_ring_size and `info` (what DraftModel's properties would report).
        """
        info, plan = _core.draft_plan(str(Path(path).expanduser()), _target(target_model)._core,
                                      n_ctx_draft, capture_ring)
        plan["info"] = info
        return plan

    arch = property(lambda self: self._info["arch"])
    dialect = property(lambda self: self._info["dialect"])            # "llama" or "lucebox"
    block_size = property(lambda self: self._info["block_size"])
    mask_token_id = property(lambda self: self._info["mask_token_id"])
    capture_layers = property(lambda self: self._info["capture_layers"])
    n_layer = property(lambda self: self._info["n_layer"])
    n_embd = property(lambda self: self._info["n_embd"])
    n_vocab = property(lambda self: self._info["n_vocab"])
    n_ctx_draft = property(lambda self: self._info["n_ctx_draft"])
    sliding_window = property(lambda self: self._info["sliding_window"])

    @property
    def memory(self) -> dict:
        """Bytes: draft weights, draft KV cache, compute scratch (the target's embedding/head not counted)."""
        i = self._core.info
        return {"weights": i["weight_bytes"], "kv_cache": i["kv_bytes"], "compute": i["compute_bytes"]}

    def stats(self) -> dict:
        i = self._core.info
        return {k: i[k] for k in ("n_graph_builds", "n_graph_reuses", "n_small_batch_evals", "n_step_graph_replays")}

    def reset(self) -> None:
        """Forget every injected position."""
        self._core.reset()

    def inject(self, features: np.ndarray, start_pos: int) -> None:
        """Target features [n, len(capture_layers) * n_embd] (or [n, n_capture, n_embd]) of
        context positions start_pos..start_pos+n-1."""
        self._core.inject(features, int(start_pos))

    def inject_captured(self, engine, start_pos: int, n: int) -> None:
        """Features of context positions start_pos..start_pos+n-1 straight from the engine's capture
        rings on the device (the engine must capture `capture_layers` with output=True)."""
        self._core.inject_captured(engine._core, int(start_pos), int(n))

    def draft(self, x0: int, pos0: int) -> list[int]:
        """Greedy proposals for positions pos0+1..pos0+B-1 from the block [x0, M, ..., M] at pos0..."""
        return self._core.draft(int(x0), int(pos0))

    def logits(self) -> np.ndarray:
        """Logits of every row of the last block, float32 [block_size, n_vocab]."""
        return self._core.logits()

    def top_candidates(self, k: int, temperature: float = 1.0, n_depth: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k most probable tokens per depth 1..n_depth (logits rows 1..n_depth of the last block;
        default all B-1) and their full-vocabulary log-probabilities at `temperature`, computed on the
        draft's device: (tokens int64 [n_depth, k], logprobs float64 [n_depth, k]), each row by
        descending log-probability, equal ones by ascending token id (ddtree.top_candidates on
        logits() gives the same up to float32 rounding; which tokens tied at the k-th place are kept
        is unspecified in both). k is clamped to n_vocab."""
        if k < 1:
            raise ValueError("k must be >= 1")
        if not temperature > 0:
            raise ValueError("the tree temperature must be > 0")
        n = self.block_size - 1 if n_depth is None else int(n_depth)
        if not 1 <= n <= self.block_size - 1:
            raise ValueError(f"n_depth must be 1..{self.block_size - 1}, not {n_depth}")
        toks, lp = self._core.top_candidates(1, n, min(int(k), self.n_vocab), float(temperature))
        return toks.astype(np.int64), lp.astype(np.float64)

    def __repr__(self) -> str:
        return (f"DraftModel({Path(self.path).name!r}, {self.arch}/{self.dialect}, B={self.block_size}, "
                f"capture={list(self.capture_layers)}, n_ctx_draft={self.n_ctx_draft})")


def _target(target_model):
    """The Model a draft binds to (an Engine stands for its model)."""
    from luce_engine.model import Model

    if not isinstance(target_model, Model) and isinstance(getattr(target_model, "model", None), Model):
        target_model = target_model.model
    if not isinstance(target_model, Model):
        raise TypeError(f"target_model must be a luce_engine.Model (or an Engine), not {type(target_model).__name__}")
    return target_model
