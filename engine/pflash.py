"""PFlash: an attachment and a question → the target tokens worth prefilling (the rest is dropped).

    scorer tokens of attachment + question ──Scorer──► token scores ──select──► kept scorer spans
        ──byte offsets──► kept spans of the attachment's target tokens ──► compressed attachment

Only the attachment is compressed: the caller renders the rest of the prompt (system prompt,
tools, earlier turns, the question) unchanged and substitutes `Compression.kept_tokens` for the
attachment's tokens (docs/algorithms.md §4.1). Scorer and target may use different tokenizers: kept
scorer spans become byte ranges of the attachment's UTF-8 text, and the target tokens whose bytes
touch a kept range are kept, so every kept target token keeps its own id (no re-tokenization
at the span edges, no split characters; §4.5).

Positions: the kept tokens are prefilled as a new contiguous prompt (renumbered positions,
lucebox's choice), not at their original positions (SpecPrefill's choice, §4.6a). The selection
also depends on the question: a later question may need other parts of the attachment, so keep
the raw attachment and compress again for it.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import numpy as np

from luce_engine.engine import ProgressFn
from luce_engine.pflash_selection import Selection, SelectionConfig, map_spans, select, token_byte_offsets


@dataclasses.dataclass(frozen=True)
class CompressionConfig:
    keep_ratio: float = 0.05        # fraction of the attachment's 32-token chunks kept
    n_tail: int = 8                 # the question's last tokens whose attention scores the attachment
    pre_rope: bool = True           # score with Q/K before RoPE (no distance decay; §4.3)
    selection: SelectionConfig | None = None   # chunking, forced ends, anchors (keep_ratio wins)

    def selection_config(self) -> SelectionConfig:
        base = self.selection or SelectionConfig()
        return dataclasses.replace(base, keep_ratio=self.keep_ratio)


@dataclasses.dataclass
class Compression:
    """The outcome of compress(): what to prefill instead of the attachment, and what it cost."""

    target_tokens: list[int]                 # the attachment's target tokens, all of them
    spans: list[tuple[int, int]]             # kept [start, end) ranges of target_tokens, in order
    scorer_tokens: int                       # the attachment's length in scorer tokens
    selection: Selection                     # the selection on scorer tokens
    scorer_ms: float                         # the scorer's pass (forward + tail scores)
    total_ms: float                          # tokenizing, scoring, selecting and mapping

    @property
    def kept_tokens(self) -> list[int]:
        return [t for s, e in self.spans for t in self.target_tokens[s:e]]

    @property
    def n_original(self) -> int:
        return len(self.target_tokens)

    @property
    def n_kept(self) -> int:
        return sum(e - s for s, e in self.spans)

    @property
    def ratio(self) -> float:
        return self.n_kept / self.n_original if self.n_original else 1.0

    def summary(self) -> str:
        """'compressed 183,412 → 9,170 tokens (5%)'"""
        return f"compressed {self.n_original:,} → {self.n_kept:,} tokens ({self.ratio:.0%})"

    def kept_text(self, target_tokenizer) -> str:
        """The kept parts of the attachment as text, gaps marked by a blank line and an ellipsis."""
        return "\n\n…\n\n".join(target_tokenizer.decode(self.target_tokens[s:e]) for s, e in self.spans)


def _offsets(tokenizer, ids: Sequence[int], text_bytes: bytes) -> np.ndarray:
    off = token_byte_offsets(ids, lambda i: tokenizer.token_to_piece(int(i)))
    if off[-1] != len(text_bytes):
        raise ValueError(f"the tokenizer's pieces cover {off[-1]} bytes of a {len(text_bytes)}-byte attachment "
                         "(it normalizes text), so kept spans cannot be mapped through byte offsets")
    return off


def compress(attachment: str, question: str, scorer, target_tokenizer, cfg: CompressionConfig = CompressionConfig(),
             *, progress: ProgressFn | None = None, target_tokens: Sequence[int] | None = None) -> Compression:
    """Chooses the parts of `attachment` that the target prefills for `question`.

    scorer: a luce_engine.Scorer (its model's tokenizer tokenizes the scorer input);
    target_tokenizer: the target model's Tokenizer; target_tokens: the attachment's target tokens
    if the caller has them already (they must be target_tokenizer's tokens of `attachment`,
    special tokens not parsed). progress(done, total) follows the scorer's forward.
    Raises GenerationCancelled when the scorer is cancelled.
    """
    t0 = time.perf_counter()
    stok = scorer.tokenizer
    doc = stok.encode(attachment, parse_special=False)
    q = stok.encode(question, parse_special=False) if question else []
    tgt = list(target_tokens) if target_tokens is not None else target_tokenizer.encode(attachment, parse_special=False)
    if not doc or not tgt:
        return Compression(tgt, [(0, len(tgt))] if tgt else [], len(doc), select([], []), 0.0, 0.0)

    # The tail queries are the question's last tokens (the attachment's own end without one).
    n_tail = max(1, min(cfg.n_tail, len(q) if q else len(doc)))
    scores = scorer.score(doc + q, n_tail=n_tail, pre_rope=cfg.pre_rope, progress=progress)
    scorer_ms = scorer.stats()["total_ms"]
    sel = select(scores[: len(doc)], doc, q, cfg.selection_config())

    if list(tgt) == list(doc):   # one tokenizer: the spans are target spans already
        spans = list(sel.spans)
    else:
        text = attachment.encode("utf-8")
        spans = map_spans(sel.spans, _offsets(stok, doc, text), _offsets(target_tokenizer, tgt, text), text)
    return Compression(tgt, spans, len(doc), sel, scorer_ms, (time.perf_counter() - t0) * 1e3)


class AttachmentCompressor:
    """When and how an application compresses attachments: a scorer, the target's tokenizer, and the
    policy of `--pflash-mode off|auto|always`, `--pflash-threshold`, `--pflash-keep-ratio`.

    auto compresses a message whose attachments hold more than `threshold` target tokens; always
    compresses every attachment; off never does. A per-attachment choice (force=True/False) wins.
    """

    MODES = ("off", "auto", "always")

    def __init__(self, scorer, target_tokenizer, *, mode: str = "auto", threshold: int = 32000,
                 keep_ratio: float = 0.05, config: CompressionConfig | None = None):
        if mode not in self.MODES:
            raise ValueError(f"the PFlash mode must be one of {', '.join(self.MODES)}, not {mode!r}")
        if threshold < 0:
            raise ValueError("the PFlash threshold must be >= 0")
        self.scorer, self.target_tokenizer = scorer, target_tokenizer
        self.mode, self.threshold = mode, threshold
        self.config = dataclasses.replace(config or CompressionConfig(), keep_ratio=keep_ratio)
        self.config.selection_config()   # validates keep_ratio now, not at the first long attachment

    def applies(self, n_tokens: int, force: bool | None = None) -> bool:
        if force is not None:
            return bool(force)
        return self.mode == "always" or (self.mode == "auto" and n_tokens > self.threshold)

    def compress(self, text: str, question: str, *, progress: ProgressFn | None = None) -> Compression:
        return compress(text, question, self.scorer, self.target_tokenizer, self.config, progress=progress)

    def cancel(self) -> None:
        self.scorer.cancel()

    def describe(self) -> str:
        m = self.scorer.model
        when = {"auto": f"above {self.threshold:,} tokens", "always": "always", "off": "off"}[self.mode]
        return f"{m.path} ({m.arch} scorer on {m.device}; {when}, keep {self.config.keep_ratio:.0%})"
