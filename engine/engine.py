"""Engine: a model's context (KV cache), prefill, stepping, generation and cancellation.

One thread drives an Engine; `cancel()` may be called from any other thread. Every native call
that computes releases the GIL, so a UI thread keeps running while the engine works.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from luce_engine import _core
from luce_engine.errors import GenerationCancelled
from luce_engine.model import ENGINE_DEFAULTS, Model
from luce_engine.sampling import Sampling

ProgressFn = Callable[[int, int], object]   # (done, total) -> False to cancel


@dataclasses.dataclass
class StepResult:
    """What one engine step committed.

    tokens/drafted: the committed tokens and, per token, whether it came from an accepted draft
    (always False without a draft model). text: the decoded text these tokens completed (held
    back while a stop string may be forming). spans: the same text cut into runs, each with
    whether the token that completed it was drafted (for highlighting; "".join of the span
    texts == text). finish_reason is set on the last result of a generation: "eos", "stop",
    "length", "context" or "cancelled".
    """

    tokens: list[int]
    drafted: list[bool]
    n_drafted: int = 0
    n_accepted: int = 0
    sample_ms: float = 0.0
    decode_ms: float = 0.0
    text: str = ""
    finish_reason: str | None = None
    spans: list[tuple[str, bool]] = dataclasses.field(default_factory=list)


class _StopMatcher:
    """Finds stop strings in streamed text, holding back any tail that could begin one."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        buf = self.pending + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.pending = ""
            return buf[: min(hits)], True
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), 0, -1):
                if buf.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        self.pending = buf[len(buf) - hold:] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class Engine:
    """Inference state for one conversation on one model.

    >>> eng = Engine(model, n_ctx=4096)
    >>> for r in eng.generate(model.tokenizer.encode("Hello"), max_tokens=16):
    ...     print(r.text, end="")
    """

    def __init__(self, model: Model, *, n_ctx: int = ENGINE_DEFAULTS["n_ctx"], n_batch: int = ENGINE_DEFAULTS["n_batch"],
                 cache_type_k: str = ENGINE_DEFAULTS["cache_type_k"], cache_type_v: str = ENGINE_DEFAULTS["cache_type_v"],
                 kv_rotation: bool = ENGINE_DEFAULTS["kv_rotation"], n_verify_max: int = ENGINE_DEFAULTS["n_verify_max"],
                 rollback: str = ENGINE_DEFAULTS["rollback"],
                 small_batch_kernels: bool = ENGINE_DEFAULTS["small_batch_kernels"],
                 step_graphs: bool = ENGINE_DEFAULTS["step_graphs"],
                 small_batch_max_tokens: int = ENGINE_DEFAULTS["small_batch_max_tokens"],
                 tree_verify: bool = ENGINE_DEFAULTS["tree_verify"],
                 tree_recurrence: str = ENGINE_DEFAULTS["tree_recurrence"],
                 step_kv_pad: int = ENGINE_DEFAULTS["step_kv_pad"],
                 debug_piecewise: bool = ENGINE_DEFAULTS["debug_piecewise"],
                 debug_staged_state_io: bool = ENGINE_DEFAULTS["debug_staged_state_io"]):
        """rollback: "replay" or "snapshot", how commit() restores a hybrid model's recurrent state
        after a verify (luce_rollback in luce.h); small_batch_kernels: CUDA decode steps and verifies
        of up to small_batch_max_tokens tokens on luce's own matmul kernels; step_graphs: each of
        those captured once as one CUDA graph and replayed; small_batch_max_tokens: the widest verify whose matmuls take luce's
        kernels (1..32; past it ggml's); tree_verify: a hybrid model's verify_tree() planned and possible
        (dense models tree-verify without it); tree_recurrence: how its recurrent layers run a tree,
        "paths" (each root-to-leaf path from the committed state, stock ggml ops), "nodes" (each node
        once from its parent's state: luce's kernel on CUDA, luce's op on the CPU) or "auto" (nodes
        where luce's CUDA kernels run, else paths); step_kv_pad: one-token steps and verifies attend the
        cache in steps of this many cells (a multiple of 256; each step crossed rebuilds their graphs,
        on a GPU recaptures them); debug_piecewise: CPU debugging, every graph computed in
        pieces (must match bit for bit); debug_staged_state_io: CPU debugging, load_state copies
        through the staging buffers as into a GPU."""
        self.model = model
        self.cache_type_k, self.cache_type_v = cache_type_k, cache_type_v
        self.rollback = rollback
        self.tree_verify = tree_verify
        self._core = _core.CoreEngine(model._core, dict(
            n_ctx=n_ctx, n_batch=n_batch, cache_type_k=cache_type_k, cache_type_v=cache_type_v, kv_rotation=kv_rotation,
            n_verify_max=n_verify_max, rollback=rollback, small_batch_kernels=small_batch_kernels,
            step_graphs=step_graphs, small_batch_max_tokens=small_batch_max_tokens, tree_verify=tree_verify, tree_recurrence=tree_recurrence,
            step_kv_pad=step_kv_pad, debug_piecewise=debug_piecewise,
            debug_staged_state_io=debug_staged_state_io))
        self.n_verify_max = n_verify_max
        self._lock = threading.Lock()
        self._native_cache: tuple[Sampling, _core.SamplingParams] | None = None

    # -- state -----------------------------------------------------------------------------
    @property
    def n_past(self) -> int:
        """Tokens in the context."""
        return self._core.n_past

    @property
    def n_ctx(self) -> int:
        """Context capacity in tokens."""
        return self._core.n_ctx

    @property
    def tokens(self) -> list[int]:
        return self._core.tokens()

    def stats(self) -> dict:
        return self._core.stats()

    def reset_stats(self) -> None:
        self._core.reset_stats()

    def memory_plan(self) -> dict:
        return self._core.memory_plan()

    # -- compute ---------------------------------------------------------------------------
    def prefill(self, tokens: Iterable[int], *, logits_all: bool = False, progress: ProgressFn | None = None) -> None:
        """Append tokens to the context and evaluate them (chunked; progress(done, total) per chunk).

        On cancel the completed chunks stay in the context; truncate() to undo them.
        """
        with self._lock:
            self._core.prefill(np.asarray(list(tokens), dtype=np.int32), logits_all, progress)

    def logits(self, i: int = -1) -> np.ndarray:
        """Logits row i of the last evaluation (-1: the last position)."""
        return self._core.logits(i)

    def all_logits(self) -> np.ndarray:
        """Every row kept by the last prefill(logits_all=True): [n, n_vocab]."""
        return self._core.all_logits()

    def sample(self, sampling: Sampling | None = None, i: int = -1) -> int:
        s = sampling or Sampling()
        with self._lock:
            return self._core.sample(_native(s), i)

    def set_seed(self, seed: int) -> None:
        self._core.set_seed(seed)

    def _native_params(self, s: Sampling) -> _core.SamplingParams:
        # Sampling is immutable, so the native copy of the last one can be reused every step
        if self._native_cache is None or self._native_cache[0] is not s:
            self._native_cache = (s, _native(s))
        return self._native_cache[1]

    def step(self, sampling: Sampling | None = None) -> StepResult:
        """Commit the next token(s) from the current logits and evaluate them."""
        s = sampling or _GREEDY
        with self._lock:
            toks, prov, sample_ms, decode_ms = self._core.step(self._native_params(s))
        return StepResult(toks, [p == 1 for p in prov], sample_ms=sample_ms, decode_ms=decode_ms)

    def verify(self, tokens: Sequence[int], *, logits: bool = True, keep_pre_logits: bool = True) -> np.ndarray:
        """Evaluate up to n_verify_max provisional tokens in one batch; returns their logits [n, n_vocab]
        (with logits=False only each row's greedy token, int32 [n]: nothing large is downloaded).

        Follow with commit(k) to keep the first k of them (the rest are rolled back, recurrent
        state included, without recomputation). keep_pre_logits=False: after commit(0) only the
        greedy token of the previous logits is known (their row is downloaded again on demand by
        recomputing it), which saves a row download per verify.
        """
        with self._lock:
            self._core.verify(np.asarray(list(tokens), dtype=np.int32), keep_pre_logits)
            return self._core.all_logits() if logits else self._core.all_argmax()

    def argmax(self, i: int = -1) -> int:
        """Greedy token of logits row i of the last evaluation (no row download)."""
        return self._core.argmax(i)

    def commit(self, k: int) -> None:
        """Keep the first k tokens of the pending verify()."""
        with self._lock:
            self._core.commit(k)

    def verify_tree(self, tokens: Sequence[int], parents: Sequence[int], *, logits: bool = True,
                    keep_pre_logits: bool = True) -> np.ndarray:
        """Tree verification (dense models): node i carries tokens[i], node 0 is the root (parent -1),
        parents[i] < i. Each node attends to the context and its own root path at position
        n_past + depth; returns per node the logits [n, n_vocab] (logits=False: the greedy tokens).
        Follow with commit_path(). Hybrid models raise UnsupportedModelError."""
        with self._lock:
            self._core.verify_tree(np.asarray(list(tokens), dtype=np.int32), np.asarray(list(parents), dtype=np.int32),
                                   keep_pre_logits)
            return self._core.all_logits() if logits else self._core.all_argmax()

    def commit_path(self, nodes: Sequence[int]) -> None:
        """Keep the root-to-node path `nodes` (nodes[0] = 0, each a child of the one before) of the
        pending verify_tree() (or verify()); its K/V and captured features move into place."""
        with self._lock:
            self._core.commit_path([int(x) for x in nodes])

    def truncate(self, n: int) -> None:
        """Keep the first n tokens of the context (logits for the next position are recomputed)."""
        with self._lock:
            self._core.truncate(n)

    def set_capture(self, layers: Sequence[int], *, output: bool = False, ring_size: int = 4096) -> None:
        """Capture the residual stream at these layers for every evaluated token (a DFlash draft's
        features): the input of each layer, or with output=True its output. [] turns it off."""
        with self._lock:
            self._core.set_capture(list(layers), output, ring_size)

    def captured(self, pos: int) -> np.ndarray:
        """Captured features of context position pos: [n_layers, n_embd]."""
        return self._core.captured(pos)

    def checkpoint(self) -> None:
        """Remember the recurrent state at the current length (hybrid models; e.g. at a turn
        boundary) so truncating back here is instant; a no-op for dense models."""
        with self._lock:
            self._core.checkpoint()

    # -- state files -------------------------------------------------------------------------
    def save_state(self, path, *, append: bool = True) -> dict:
        """Save the context to a state file (luce_engine.state_files describes it). append: when path
        holds an earlier state of this context, add only the new rows (crash-safe); else the whole
        file is written beside it and renamed over it. Returns n_tokens, bytes (written), appended, ms.
        Raises StateIOError (disk full, read-only, another writer) with the file left as it was."""
        with self._lock:
            return self._core.state_save(os.fspath(path), append)

    def load_state(self, path) -> dict:
        """Replace the context with a state file's: n_tokens, bytes (read), n_captured (draft feature
        rows put back into the capture ring), ms. StateMismatchError / StateDamagedError /
        StateNewerFormatError leave the engine as it was, except a payload whose checksum fails
        while it is read (StateDamagedError saying so): the context is then empty."""
        with self._lock:
            return self._core.state_load(os.fspath(path))

    def state_bytes(self) -> int:
        """Bytes a full save_state() would write now."""
        with self._lock:
            return self._core.state_bytes()

    def cancel(self) -> None:
        """Stop the running prefill/step at the next graph boundary (any thread). The request
        stays armed until clear_cancel() (generate() clears it when it starts)."""
        self._core.cancel()

    def clear_cancel(self) -> None:
        """Drop a cancel request left over from work that has ended, so the next truncate() or
        prefill() runs; a caller that starts a new turn clears first, then honours its own stop."""
        self._core.clear_cancel()

    def generate(self, prompt: Sequence[int] | None = None, *, sampling: Sampling | None = None,
                 max_tokens: int = 256, stop: Sequence[str] = (), stop_token_ids: Iterable[int] | None = None,
                 progress: ProgressFn | None = None, speculator=None) -> Iterator[StepResult]:
        """Prefill `prompt` (if given) and yield one StepResult per step until a stop condition.

        Stops at an end-of-generation token (not included in text), a stop string (text cut
        before it), max_tokens, a full context, or cancel(); the last result carries
        finish_reason. Tokens are decoded with the model's tokenizer. With a speculator
        (luce_engine.speculative.ChainSpeculator) a step may commit several tokens; stop
        conditions still apply at the exact token, also inside a step; without one, plain decoding.
        """
        s = sampling or Sampling()
        self._core.clear_cancel()
        self._core.set_seed(s.resolved_seed())
        tok = self.model.tokenizer
        eog = set(tok.eog_ids if stop_token_ids is None else stop_token_ids)
        decoder = tok.stream_decoder()
        matcher = _StopMatcher(stop)
        try:
            if speculator is not None:
                speculator.prepare()   # capture on before the prompt is evaluated
            if prompt:
                self.prefill(prompt, progress=progress)
            produced = 0
            while produced < max_tokens:
                if self.n_past >= self.n_ctx:
                    yield StepResult([], [], text=matcher.flush() + decoder.flush(), finish_reason="context")
                    return
                r = (self.step(s) if speculator is None
                     else speculator.step(s, max_emit=max_tokens - produced, stop_ids=eog))
                produced += len(r.tokens)
                spans: list[tuple[str, bool]] = []
                reason = None
                for j, (t, drafted) in enumerate(zip(r.tokens, r.drafted)):
                    if t in eog:
                        reason = "eos"
                    else:
                        piece, hit = matcher.feed(decoder.push(t))
                        add_span(spans, piece, drafted)
                        reason = "stop" if hit else None
                    if reason:
                        # inside a multi-token step: plain decoding would have stopped here
                        extra = len(r.tokens) - (j + 1)
                        if extra:
                            r.tokens, r.drafted = r.tokens[:j + 1], r.drafted[:j + 1]
                            produced -= extra
                            self.truncate(self.n_past - extra)
                        break
                if reason is None and produced >= max_tokens:
                    reason = "length"
                if reason in ("eos", "length"):
                    add_span(spans, matcher.feed(decoder.flush())[0] + matcher.flush(), False)
                r.spans = spans
                r.text, r.finish_reason = "".join(t for t, _ in spans), reason
                yield r
                if reason:
                    return
        except GenerationCancelled:
            yield StepResult([], [], text="", finish_reason="cancelled")


_GREEDY = Sampling()


def add_span(spans: list[tuple[str, bool]], text: str, drafted: bool) -> None:
    """Appends text to the runs, merging it into the last run when the provenance is the same."""
    if not text:
        return
    if spans and spans[-1][1] == drafted:
        spans[-1] = (spans[-1][0] + text, drafted)
    else:
        spans.append((text, drafted))


def _native(s: Sampling) -> _core.SamplingParams:
    return _core.SamplingParams(s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.presence_penalty,
                                s.penalty_last_n, 0 if s.seed is None else s.seed)
