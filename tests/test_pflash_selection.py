"""PFlash chunk selection (luce_engine.pflash_selection): properties of the kept chunks and the mapping of
kept spans between two tokenizers of the same text."""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import default_model_path
from luce_engine.pflash_selection import (Selection, SelectionConfig, anchor_chunks, byte_offsets, chunk_scores, map_spans,
                                select, smooth, token_byte_offsets)
from luce_engine.tokenizer import Tokenizer


def doc_and_scores(n_tokens: int, seed: int = 0, vocab: int = 5000):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(100, vocab, n_tokens)], rng.random(n_tokens)


def test_smooth_is_a_centered_mean_with_shrinking_edges():
    s = np.arange(10, dtype=float) ** 2
    got = smooth(s, 5)
    want = [np.mean(s[max(0, i - 2):i + 3]) for i in range(10)]
    np.testing.assert_allclose(got, want)
    np.testing.assert_array_equal(smooth(s, 1), s)


def test_chunk_scores_average_each_chunk_including_a_short_last_one():
    np.testing.assert_allclose(chunk_scores(np.arange(10.0), 4), [1.5, 5.5, 8.5])


@pytest.mark.parametrize("n_tokens,keep", [(32 * 400, 0.05), (32 * 200 + 7, 0.1), (32 * 50, 0.3)])
def test_ratio_head_tail_and_order(n_tokens, keep):
    doc, scores = doc_and_scores(n_tokens)
    cfg = SelectionConfig(keep_ratio=keep)
    sel = select(scores, doc, (), cfg)
    n_chunks = -(-n_tokens // 32)
    assert sel.n_chunks == n_chunks and sel.n_keep == max(1, int(n_chunks * keep))
    assert len(sel.chunks) == sel.n_keep                                # the ratio, exactly, without anchors
    assert list(sel.chunks) == sorted(set(sel.chunks))                  # original order, no duplicates
    head = min(cfg.head_chunks, (sel.n_keep - 1) * cfg.head_chunks // (cfg.head_chunks + cfg.tail_chunks))
    assert set(range(head)) <= set(sel.chunks) and 0 in sel.chunks     # the attachment's start ...
    assert n_chunks - 1 in sel.chunks                                   # ... and its end
    kept = sel.keep(doc)
    assert len(kept) == sel.n_kept_tokens
    # spans are merged, ascending, inside the document, and reproduce the kept chunks' tokens
    assert all(a[1] < b[0] for a, b in zip(sel.spans, sel.spans[1:]))
    assert kept == [doc[i] for c in sel.chunks for i in range(c * 32, min((c + 1) * 32, n_tokens))]


def test_best_scored_chunks_fill_the_rest():
    doc, scores = doc_and_scores(32 * 300, seed=1)
    scores = scores * 0.01
    hot = [40, 41, 150, 220]
    for c in hot:
        scores[c * 32:(c + 1) * 32] += 5.0
    sel = select(scores, doc, (), SelectionConfig(keep_ratio=0.05, head_chunks=2, tail_chunks=2))
    assert set(hot) <= set(sel.chunks)
    assert len(sel.chunks) == 15


def test_question_ngrams_anchor_their_chunks_and_neighbours():
    doc, scores = doc_and_scores(32 * 300, seed=2)
    needle = [7, 7001, 7002, 7003, 7004, 8]          # ids outside the random filler's range
    at = 32 * 170 + 30                                # straddles chunks 170 and 171
    doc[at:at + len(needle)] = needle
    scores[:] = 0.0                                   # nothing but the anchor can pick it
    question = [9001, 7001, 7002, 7003, 7004, 9002]
    cfg = SelectionConfig(keep_ratio=0.02)
    sel = select(scores, doc, question, cfg)
    assert set(range(168, 174)) <= set(sel.anchored) and set(range(168, 174)) <= set(sel.chunks)
    # an n-gram repeated more often than anchor_max_occurrences anchors nothing
    common = [1, 2, 3, 4]
    rep = list(doc)
    for k in range(20):
        rep[k * 400:k * 400 + 4] = common
    assert anchor_chunks(rep, [0] + common, cfg) == set()
    assert anchor_chunks(doc, [1, 2], cfg) == set()   # question shorter than n


def test_tiny_inputs_and_bad_arguments():
    assert select([], [], ()).chunks == ()
    sel = select([1.0] * 5, [1, 2, 3, 4, 5])
    assert sel.chunks == (0,) and sel.spans == ((0, 5),)
    with pytest.raises(ValueError, match="scores"):
        select([1.0], [1, 2])
    with pytest.raises(ValueError, match="finite"):
        select([float("nan"), 1.0], [1, 2])
    with pytest.raises(ValueError):
        SelectionConfig(keep_ratio=0)
    with pytest.raises(ValueError):
        SelectionConfig(pool_kernel=4)
    with pytest.raises(ValueError, match="made on"):
        sel.keep([1, 2])


@pytest.fixture(scope="module")
def smol_tokenizer():
    return Tokenizer.from_gguf(default_model_path())


TEXT = ("def parse(line):\n    key, _, value = line.partition('=')\n    return key.strip(), value.strip()\n\n"
        "Größe: 12 µm — naïve café. 東京タワーの高さは333メートルです。🚀🎉 emoji too.\n" * 12)


def test_kept_spans_map_to_the_other_tokenizer_without_losing_characters(smol_tokenizer):
    tok = smol_tokenizer
    target_ids = tok.encode(TEXT)
    t_off = token_byte_offsets(target_ids, lambda i: tok.token_to_piece(i, special=False))
    raw = TEXT.encode()
    assert t_off[-1] == len(raw)
    # the "scorer" tokenizes the same text differently: 3-byte pieces
    s_pieces = [raw[i:i + 3] for i in range(0, len(raw), 3)]
    s_off = byte_offsets(s_pieces)
    rng = np.random.default_rng(3)
    sel = select(rng.random(len(s_pieces)), list(range(len(s_pieces))), (),
                 SelectionConfig(chunk=8, keep_ratio=0.3, head_chunks=1, tail_chunks=1))
    spans = map_spans(sel.spans, s_off, t_off, raw)
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
    for s, e in sel.spans:    # every kept scorer byte lies in some kept target token
        b0, b1 = s_off[s], s_off[e]
        assert any(t_off[a] <= b0 and b1 <= t_off[b] for a, b in spans), (s, e)
    for a, b in spans:        # and each kept target span decodes to valid text of the attachment
        piece = tok.decode(target_ids[a:b])
        assert piece in TEXT
    # mapping a tokenization onto itself is the identity
    assert map_spans(sel.spans, s_off, s_off) == list(sel.spans)
    with pytest.raises(ValueError, match="bytes"):
        map_spans(sel.spans, s_off, t_off[:-1])


def test_selection_is_a_dataclass_of_plain_values():
    sel = select([0.5] * 64, list(range(64)))
    assert isinstance(sel, Selection) and isinstance(sel.spans, tuple)


def test_lookback_pool_lets_a_value_inherit_its_key():
    from luce_engine.pflash_selection import lookback_max, pool_scores

    s = np.zeros(64)
    s[30] = 1.0
    got = lookback_max(s, 12, 2)
    assert (got[28:43] == 1.0).all() and got[:28].max() == 0.0 and got[43:].max() == 0.0   # 30-2 .. 30+12
    np.testing.assert_array_equal(lookback_max(s, 0, 0), s)
    # a key at the end of chunk 0 carries the next chunk (its value) into the selection
    scores = np.full(128, 0.01)
    scores[29] = 1.0
    sel = select(scores, list(range(128)), (), SelectionConfig(chunk=32, keep_ratio=0.5, head_chunks=0,
                                                               tail_chunks=0, anchor_n=0))
    assert sel.chunks == (0, 1)
    mean = select(scores, list(range(128)), (), SelectionConfig(chunk=32, keep_ratio=0.25, head_chunks=0,
                                                                tail_chunks=0, anchor_n=0, pool="mean"))
    assert mean.chunks == (0,)
    assert pool_scores(scores, SelectionConfig(pool="mean")).max() < 1.0
    with pytest.raises(ValueError):
        SelectionConfig(pool="median")
