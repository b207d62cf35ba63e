"""PFlash scorer: ranks the tokens of a long prompt by the attention its last tokens pay them.

    >>> scorer = Scorer(Model("Qwen3-0.6B-BF16.gguf", device="cuda:0"))
    >>> scores = scorer.score(attachment_ids + question_ids, n_tail=8)   # float32 [S]

score[j] = mean over the n_tail tail queries of (max over layers and heads of the softmax
attention row of that query), computed on the device without ever forming the [S, S] matrix
(docs/algorithms.md §4.3). The scorer owns its KV cache and scratch for the duration of a call — sized
to that call's input, planned before anything is allocated, freed when the call returns — so it
never disturbs an Engine, not even one on the same Model. Inputs longer than `sparse_threshold`
tokens run the scorer's own forward with block-sparse attention (a sink + a local window per
micro-batch, §4.7); the tail queries always see every key.
"""

from __future__ import annotations

import threading
from typing import Iterable, Sequence

import numpy as np

from luce_engine import _core
from luce_engine.engine import ProgressFn
from luce_engine.model import Model

DEFAULTS = _core.scorer_defaults()


class Scorer:
    """A PFlash scorer on a loaded dense (llama / qwen3) Model.

    n_batch: tokens per micro-batch (also the sparse query block); sparse_threshold: inputs longer
    than this use block-sparse attention in the scorer's forward (<= 0: always dense);
    sparse_sink / sparse_window: keys at the start / before its block that a sparse query sees;
    n_layers: score with the model's first n_layers layers only (<= 0: all). The cost is
    proportional to the layers run, and early-middle layers already locate retrieval targets
    (GemFilter, Shi et al. 2024), so a truncated scorer trades little quality for speed.
    """

    def __init__(self, model: Model, *, n_batch: int = DEFAULTS["n_batch"],
                 sparse_threshold: int = DEFAULTS["sparse_threshold"], sparse_sink: int = DEFAULTS["sparse_sink"],
                 sparse_window: int = DEFAULTS["sparse_window"], n_layers: int = DEFAULTS["n_layers"]):
        self.model = model
        self.n_batch, self.sparse_threshold = n_batch, sparse_threshold
        self.sparse_sink, self.sparse_window = sparse_sink, sparse_window
        self.n_layers = min(n_layers, model.n_layer) if n_layers > 0 else model.n_layer
        self._core = _core.CoreScorer(model._core, n_batch, sparse_threshold, sparse_sink, sparse_window, n_layers)
        self._lock = threading.Lock()

    @property
    def tokenizer(self):
        return self.model.tokenizer

    def plan(self, n_tokens: int, *, n_tail: int = 8, check: bool = True) -> dict:
        """Memory (bytes) a score() of n_tokens needs: kv_cache, compute, outputs (host), total,
        device_free. Raises InsufficientMemoryError when it does not fit (unless check=False)."""
        return self._core.plan(n_tokens, n_tail, check)

    def score(self, tokens: Iterable[int], *, n_tail: int = 8, pre_rope: bool = True,
              progress: ProgressFn | None = None) -> np.ndarray:
        """float32 [len(tokens)] token scores; the last n_tail tokens are the queries.

        pre_rope: compare queries and keys before RoPE (after the q/k norms), which removes RoPE's
        decay with distance (docs/algorithms.md §4.3). progress(done, total) is called per micro-batch
        (return False to cancel); cancel() from another thread stops at the next graph boundary.
        Both raise GenerationCancelled.
        """
        arr = np.asarray(list(tokens) if not isinstance(tokens, np.ndarray) else tokens, dtype=np.int32)
        with self._lock:
            self._core.clear_cancel()
            return self._core.score(arr, n_tail, pre_rope, progress)

    def score_questions(self, body: Iterable[int], questions: Sequence[Sequence[int]], *, n_tail: int = 8,
                        pre_rope: bool = True, progress: ProgressFn | None = None) -> np.ndarray:
        """float32 [len(questions), len(body)]: the body scored for each question.

        The body's forward runs once; each question (n_tail to max(n_batch, 256) tokens) is then
        evaluated after it in turn and scores it with its last n_tail tokens — several questions
        about one attachment for the price of one pass over it. Row i equals
        score(body + questions[i], n_tail=n_tail)[:len(body)].
        """
        b = np.asarray(list(body) if not isinstance(body, np.ndarray) else body, dtype=np.int32)
        with self._lock:
            self._core.clear_cancel()
            return self._core.score_questions(b, [list(q) for q in questions], n_tail, pre_rope, progress)

    def cancel(self) -> None:
        """Stop a running score() (any thread)."""
        self._core.cancel()

    def stats(self) -> dict:
        """Of the last score(): times (forward_ms, tail_ms, total_ms), batches (dense/sparse),
        attended_keys vs dense_keys, planned and allocated kv/compute bytes; graph counts."""
        return self._core.stats()

    @staticmethod
    def plan_for(model: Model, n_tokens: int, *, n_tail: int = 8, check: bool = True, **params) -> dict:
        """plan() without a Scorer: `model` may be opened with plan_only=True (nothing is read).
        params: n_batch, sparse_threshold, sparse_sink, sparse_window, n_layers."""
        p = {k: params.get(k, DEFAULTS[k]) for k in DEFAULTS}
        return _core.scorer_plan(model._core, n_tokens, n_tail, p["n_batch"], p["sparse_threshold"],
                                 p["sparse_sink"], p["sparse_window"], p["n_layers"], check)

    def __repr__(self) -> str:
        return f"Scorer({self.model.name!r}, sparse above {self.sparse_threshold} tokens)"
