"""Needle in a haystack with a real scorer: SmolLM2-135M-Instruct ranks 4K–8K-token haystacks of
mixed prose and code (tests/haystack.py), and PFlash selection at keep 0.1 must keep the chunk that
holds the asked needle's number in at least 19 of 20 cases.

20 cases = 3 haystacks (4K, 6K, 8K tokens; different prose/code mixes) × 6–7 needles with distinct
words at 25–75% depth; each question asks for one needle, so the others are distractors (multi-key
NIAH, docs/algorithms.md §4.9). Each haystack's forward runs once (Scorer.score_questions), which keeps
the suite to a couple of minutes on 2 CPU cores. The scorer's forward runs block-sparse (the
haystacks are longer than its threshold), the configuration whose quality needs the evidence; the
dense path equals it below the threshold (test_pflash_scorer.py). Selection measures the scorer
alone: anchors off (no question 4-gram occurs in a needle anyway), one forced chunk at each end.
LUCE_TEST_DEVICE=cuda:0 runs it on a GPU, where the dense forward is checked as well.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from haystack import make_haystack
from luce_engine import Model, Scorer
from luce_engine.pflash_selection import SelectionConfig, chunk_scores, pool_scores, select, token_byte_offsets
from reference import DEVICE, ON_GPU, THREADS, smollm2_path

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

HAYSTACKS = [(101, 4096, 7), (202, 6144, 7), (303, 8000, 6)]   # (seed, tokens, needles); SmolLM2 trains at 8K
KEEP = 0.1
REQUIRED = 19
SELECTION = SelectionConfig(keep_ratio=KEEP, head_chunks=1, tail_chunks=1, anchor_n=0)
SPARSE = dict(sparse_threshold=2048, sparse_sink=256, sparse_window=1024)


@pytest.fixture(scope="module")
def smol():
    return Model(smollm2_path(), device=DEVICE, n_threads=THREADS)


def needle_tokens(offsets: np.ndarray, span: tuple[int, int]) -> range:
    """Tokens whose bytes overlap the byte range."""
    first = int(np.searchsorted(offsets[1:], span[0], side="right"))
    last = int(np.searchsorted(offsets[:-1], span[1], side="left"))
    return range(first, last)


def run_suite(model: Model, scorer: Scorer) -> list[dict]:
    tok = model.tokenizer
    count = lambda text: len(tok.encode(text, parse_special=False))
    results = []
    for seed, n_tokens, n_needles in HAYSTACKS:
        hay = make_haystack(seed, n_tokens, count, n_needles)
        body = tok.encode(hay.attachment, parse_special=False)
        questions = [tok.encode(n.question, parse_special=False) for n in hay.needles]
        t0 = time.perf_counter()
        scores = scorer.score_questions(body, questions, n_tail=8)
        secs = time.perf_counter() - t0
        offsets = token_byte_offsets(body, tok.token_to_piece)
        for needle, q, s in zip(hay.needles, questions, scores):
            sel = select(s, body, q, SELECTION)
            kept = np.zeros(len(body), dtype=bool)
            for a, b in sel.spans:
                kept[a:b] = True
            answer = needle_tokens(offsets, hay.span(needle, needle.number))
            ranks = np.argsort(np.argsort(-chunk_scores(pool_scores(s, SELECTION), SELECTION.chunk)))
            results.append({
                "tokens": len(body), "depth": needle.depth, "code": hay.code_share, "word": needle.word,
                "kept": bool(kept[answer.start:answer.stop].all()),
                "sentence_kept": bool(kept[_slice(needle_tokens(offsets, hay.span(needle)))].all()),
                "chunk_rank": int(min(ranks[t // SELECTION.chunk] for t in answer)),
                "n_chunks": sel.n_chunks, "n_keep": sel.n_keep, "seconds": secs / len(questions),
            })
    return results


def _slice(r: range) -> slice:
    return slice(r.start, r.stop)


def report(label: str, results: list[dict], scorer: Scorer) -> int:
    n_kept = sum(r["kept"] for r in results)
    print(f"\n{label}: needle kept in {n_kept}/{len(results)} cases at keep {KEEP} "
          f"(whole sentence in {sum(r['sentence_kept'] for r in results)}); sparse batches of the last "
          f"haystack: {scorer.stats()['n_sparse_batches']}")
    for r in results:
        print(f"  {r['tokens']:5d} tok  depth {r['depth']:.2f}  code {r['code']:.0%}  {r['word']:<11} "
              f"rank {r['chunk_rank']:3d} of {r['n_chunks']} (keep {r['n_keep']})  {'kept' if r['kept'] else 'MISSED'}")
    return n_kept


@pytest.mark.slow
def test_needles_kept_by_sparse_scorer(smol):
    scorer = Scorer(smol, **SPARSE)
    results = run_suite(smol, scorer)
    assert len(results) == 20
    assert scorer.stats()["n_sparse_batches"] > 0   # the forward really ran block-sparse
    assert report("SmolLM2 scorer, block-sparse forward", results, scorer) >= REQUIRED


@pytest.mark.slow
@pytest.mark.skipif(not ON_GPU, reason="the dense variant runs on GPUs only (CPU time)")
def test_needles_kept_by_dense_scorer(smol):
    scorer = Scorer(smol, sparse_threshold=0)
    results = run_suite(smol, scorer)
    assert report("SmolLM2 scorer, dense forward", results, scorer) >= REQUIRED
