"""PFlash chunk selection: which parts of a long attachment the target prefills.

A scorer model gives every attachment token an importance score (the attention the question's
tokens pay it; docs/algorithms.md §4). This module turns those scores into the kept token spans:

    scores ──pool──► 32-token chunk scores ──► forced head/tail + question anchors + best chunks
           ──► kept chunks in original order, merged into spans ──► target-token spans

Pooling (default "lookback"): a token's pooled score is the maximum score among itself, the
`pool_back` tokens before it and the `pool_forward` after it. The question's attention lands on
the *key* of what it asks for ("... magic wolverine number is: 6469242" → "wolverine"), while the
target needs what follows the key; the sliding maximum lets the next dozen tokens inherit the key's
relevance, so a key at the end of one chunk carries the value in the next chunk with it. Max rather
than mean pooling (as SnapKV clusters attention) keeps one strong key from being averaged away.
On the needle haystacks of tests/test_pflash_needle.py (SmolLM2 scorer, 34 multi-key cases) this
kept the asked needle in 34/34 cases at keep 0.1 and 29/34 at keep 0.05, against 26/34 and 18/34
for the centered 5-token mean ("mean", lucebox's kernel), which remains available.

Only attachment text goes through here: the system prompt, earlier turns and the question are
never compressed (the caller substitutes the kept spans for the attachment alone). When scorer and
target tokenizers differ, kept scorer spans map to target tokens through byte offsets into the
attachment's UTF-8 text, so span edges keep the target's own ids and no character is split.

Pure Python + numpy; the scoring pass itself lives in the engine.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Callable, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class SelectionConfig:
    chunk: int = 32               # tokens per chunk
    keep_ratio: float = 0.05      # fraction of chunks kept (at least one)
    head_chunks: int = 8          # the attachment's first chunks, always kept ...
    tail_chunks: int = 8          # ... and its last ones (scaled down to fit the budget)
    pool: str = "lookback"        # "lookback": sliding max over [j - pool_back, j + pool_forward];
                                  # "mean": centered average over pool_kernel tokens
    pool_kernel: int = 5          # "mean": window (odd)
    pool_back: int = 12           # "lookback": tokens before j whose score j inherits
    pool_forward: int = 2         # "lookback": tokens after j
    anchor_n: int = 4             # question n-grams that force the chunks they occur in
    anchor_max_occurrences: int = 8   # an n-gram found more often than this is not distinctive
    anchor_neighbours: int = 2    # chunks kept on each side of an anchor's chunk

    def __post_init__(self):
        if self.chunk < 1:
            raise ValueError("chunk must be >= 1")
        if not 0.0 < self.keep_ratio <= 1.0:
            raise ValueError("keep_ratio must be in (0, 1]")
        if self.pool_kernel < 1 or self.pool_kernel % 2 == 0:
            raise ValueError("pool_kernel must be a positive odd number")
        if self.pool not in ("lookback", "mean"):
            raise ValueError("pool must be 'lookback' or 'mean'")
        if self.pool_back < 0 or self.pool_forward < 0:
            raise ValueError("pool_back and pool_forward must be >= 0")
        if min(self.head_chunks, self.tail_chunks, self.anchor_n, self.anchor_neighbours) < 0:
            raise ValueError("head_chunks, tail_chunks, anchor_n and anchor_neighbours must be >= 0")


@dataclasses.dataclass(frozen=True)
class Selection:
    """Kept chunks (ascending) and the token spans [start, end) they make, in original order."""

    n_tokens: int
    n_chunks: int
    n_keep: int                   # the ratio's budget (anchors may exceed it)
    chunks: tuple[int, ...]
    spans: tuple[tuple[int, int], ...]
    forced: frozenset[int]        # head/tail chunks
    anchored: frozenset[int]      # chunks forced by question n-grams

    @property
    def n_kept_tokens(self) -> int:
        return sum(e - s for s, e in self.spans)

    def keep(self, tokens: Sequence[int]) -> list[int]:
        """The kept tokens of the sequence the selection was made on."""
        if len(tokens) != self.n_tokens:
            raise ValueError(f"selection was made on {self.n_tokens} tokens, not {len(tokens)}")
        return [t for s, e in self.spans for t in tokens[s:e]]


def smooth(scores: np.ndarray, kernel: int) -> np.ndarray:
    """Centered moving average; at the edges the window shrinks to the scores that exist."""
    s = np.asarray(scores, dtype=np.float64)
    if kernel <= 1 or s.size == 0:
        return s.copy()
    c = np.concatenate([[0.0], np.cumsum(s)])
    h = kernel // 2
    idx = np.arange(s.size)
    lo, hi = np.maximum(idx - h, 0), np.minimum(idx + h + 1, s.size)
    return (c[hi] - c[lo]) / (hi - lo)


def lookback_max(scores: np.ndarray, back: int, forward: int) -> np.ndarray:
    """out[j] = max(scores[j - back .. j + forward]), the window clipped at the edges."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0 or back + forward == 0:
        return s.copy()
    padded = np.concatenate([np.full(back, -np.inf), s, np.full(forward, -np.inf)])
    return np.lib.stride_tricks.sliding_window_view(padded, back + forward + 1).max(axis=1)


def pool_scores(scores: np.ndarray, cfg: "SelectionConfig") -> np.ndarray:
    """The token scores as the chunk ranking sees them (cfg.pool)."""
    if cfg.pool == "mean":
        return smooth(scores, cfg.pool_kernel)
    return lookback_max(scores, cfg.pool_back, cfg.pool_forward)


def chunk_scores(token_scores: np.ndarray, chunk: int) -> np.ndarray:
    """Mean score of each chunk (the last one may be shorter)."""
    s = np.asarray(token_scores, dtype=np.float64)
    n = -(-s.size // chunk)
    return np.array([s[i * chunk:(i + 1) * chunk].mean() for i in range(n)])


def anchor_chunks(doc: Sequence[int], question: Sequence[int], cfg: SelectionConfig) -> set[int]:
    """Chunks containing an n-gram of the question that occurs 1..anchor_max_occurrences times in
    the attachment, each with anchor_neighbours chunks on both sides."""
    n = cfg.anchor_n
    if n == 0 or len(question) < n or len(doc) < n:
        return set()
    wanted = {tuple(question[i:i + n]) for i in range(len(question) - n + 1)}
    where: dict[tuple, list[int]] = defaultdict(list)
    for i in range(len(doc) - n + 1):
        g = tuple(doc[i:i + n])
        if g in wanted:
            where[g].append(i)
    n_chunks = -(-len(doc) // cfg.chunk)
    out: set[int] = set()
    for starts in where.values():
        if len(starts) > cfg.anchor_max_occurrences:
            continue
        for i in starts:
            # every chunk the n-gram touches, plus neighbours
            first, last = i // cfg.chunk, (i + n - 1) // cfg.chunk
            for c in range(first - cfg.anchor_neighbours, last + cfg.anchor_neighbours + 1):
                if 0 <= c < n_chunks:
                    out.add(c)
    return out


def select(token_scores: Sequence[float], doc: Sequence[int], question: Sequence[int] = (),
           cfg: SelectionConfig = SelectionConfig()) -> Selection:
    """Chooses the chunks of `doc` (the attachment's scorer tokens, scored by `token_scores`) to keep."""
    scores = np.asarray(token_scores, dtype=np.float64)
    if scores.shape != (len(doc),):
        raise ValueError(f"{scores.size} scores for {len(doc)} tokens")
    if not np.isfinite(scores).all():
        raise ValueError("token scores must be finite")
    n_tokens = len(doc)
    n_chunks = -(-n_tokens // cfg.chunk)
    if n_chunks == 0:
        return Selection(0, 0, 0, (), (), frozenset(), frozenset())
    n_keep = max(1, int(n_chunks * cfg.keep_ratio))

    # head and tail share the budget minus one chunk for the scores, scaled down together
    head, tail = cfg.head_chunks, cfg.tail_chunks
    budget = max(0, n_keep - 1)
    if head + tail > budget:
        head = budget * head // max(1, cfg.head_chunks + cfg.tail_chunks)
        tail = budget - head
    forced = set(range(min(head, n_chunks))) | set(range(max(0, n_chunks - tail), n_chunks))
    anchored = anchor_chunks(doc, question, cfg) - forced
    kept = forced | anchored

    ranked = np.argsort(-chunk_scores(pool_scores(scores, cfg), cfg.chunk), kind="stable")
    for c in ranked:   # best first; a stable sort keeps the earlier chunk on ties
        if len(kept) >= n_keep:
            break
        kept.add(int(c))

    chunks = tuple(sorted(kept))
    spans: list[tuple[int, int]] = []
    for c in chunks:
        s, e = c * cfg.chunk, min((c + 1) * cfg.chunk, n_tokens)
        if spans and spans[-1][1] == s:
            spans[-1] = (spans[-1][0], e)
        else:
            spans.append((s, e))
    return Selection(n_tokens, n_chunks, n_keep, chunks, tuple(spans), frozenset(forced), frozenset(anchored))


# -- cross-tokenizer mapping -----------------------------------------------------------------------

def byte_offsets(pieces: Sequence[bytes]) -> np.ndarray:
    """[n + 1] start offsets of each token's bytes in the concatenated text (last = total length)."""
    return np.concatenate([[0], np.cumsum([len(p) for p in pieces], dtype=np.int64)])


def token_byte_offsets(ids: Sequence[int], piece: Callable[[int], bytes]) -> np.ndarray:
    """byte_offsets of a token sequence, given the tokenizer's id → bytes function."""
    return byte_offsets([piece(i) for i in ids])


def map_spans(spans: Sequence[tuple[int, int]], src_offsets: np.ndarray, dst_offsets: np.ndarray,
              text: bytes | None = None) -> list[tuple[int, int]]:
    """Token spans of one tokenization → token spans of another tokenization of the same bytes.

    A destination token is kept when any of its bytes lies in a kept source span, so a kept
    range never loses a character at its edges (it may gain up to one token on each side). With
    the UTF-8 `text`, spans also grow until they start and end on character boundaries (byte-level
    tokenizers split emoji and CJK characters over several tokens).
    """
    if src_offsets[-1] != dst_offsets[-1]:
        raise ValueError(f"the two tokenizations cover {src_offsets[-1]} and {dst_offsets[-1]} bytes of text")
    if text is not None and len(text) != dst_offsets[-1]:
        raise ValueError(f"the text has {len(text)} bytes, the tokenizations {dst_offsets[-1]}")

    def inside_char(b: int) -> bool:   # byte b continues a multi-byte character
        return text is not None and 0 < b < len(text) and (text[b] & 0xC0) == 0x80

    out: list[tuple[int, int]] = []
    starts, ends = dst_offsets[:-1], dst_offsets[1:]
    n_dst = len(starts)
    for s, e in spans:
        b0, b1 = int(src_offsets[s]), int(src_offsets[e])
        if b1 <= b0:
            continue
        first = int(np.searchsorted(ends, b0, side="right"))   # first token ending after b0
        last = int(np.searchsorted(starts, b1, side="left"))   # tokens starting before b1
        if first >= last:
            continue
        while first > 0 and inside_char(int(dst_offsets[first])):
            first -= 1
        while last < n_dst and inside_char(int(dst_offsets[last])):
            last += 1
        if out and out[-1][1] >= first:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out
