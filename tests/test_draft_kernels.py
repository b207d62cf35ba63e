"""The DFlash draft on CUDA's small-batch kernels (DraftModel(small_batch_kernels=True), the default):
its block and a speculative step's injection run with their Q8_0 / Q4_K / Q6_K matmuls on luce's
kernels, each captured once as one CUDA graph. The block's logits must stay those of ggml's kernels
(the same q8_1 activations, other summation order), replays must equal the pieces bit for bit, and
speculation with such a draft must still give the plain greedy output (up to a reported near-tie). On the CPU the flags
change nothing."""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import DraftModel, Engine, Model
from luce_engine.speculative import ChainSpeculator
from reference import DEVICE, THREADS
from test_speculative import assert_greedy_matches
from tools.tiny_dflash import TinyDraftConfig, write_tiny_dflash
from tools.tiny_gguf import Q4KM_QWEN35, TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)
ON_CUDA = DEVICE.startswith("cuda")
BLOCK = 16


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    # every matmul of target and draft has rows of a multiple of 256 values: all qualify
    d = tmp_path_factory.mktemp("dk")
    cfg = TinyConfig(**Q4KM_QWEN35, n_vocab=256, seed=43)
    target = write_tiny_gguf(d / "target.gguf", cfg)
    draft = write_tiny_dflash(d / "draft.gguf", cfg, TinyDraftConfig(n_layer=2, n_head=4, n_head_kv=2, head_dim=64,
                                                                     n_ff=512, block_size=BLOCK, weight_type="q8_0",
                                                                     seed=8))
    return target, draft


@pytest.fixture(scope="module")
def model(files):
    return Model(files[0], device=DEVICE, n_threads=THREADS)


def block_logits(model: Model, draft_path: str, **flags) -> tuple[list[np.ndarray], list[list[int]], dict]:
    draft = DraftModel(draft_path, model, n_ctx_draft=512, **flags)
    rng = np.random.default_rng(9)
    width = len(draft.capture_layers) * model.n_embd
    draft.inject(rng.standard_normal((100, width)).astype(np.float32), 0)
    logits, tokens = [], []
    for pos in (100, 100, 100, 100, 101, 300):   # one graph replayed, then a longer context (a rebuild)
        if pos == 300:
            draft.inject(rng.standard_normal((200, width)).astype(np.float32), 100)
        tokens.append(draft.draft(int(rng.integers(0, 256)), pos))
        logits.append(draft.logits().copy())
    return logits, tokens, draft.stats()


def test_draft_block_on_the_kernels_matches_ggml(model, files):
    (ours, our_tokens, stats), (ggml, _, ggml_stats) = (block_logits(model, files[1]),
                                                        block_logits(model, files[1], small_batch_kernels=False))
    for a, b in zip(ours, ggml):
        assert np.abs(a - b).max() <= 1e-2 * np.abs(b).max()
    assert ggml_stats["n_small_batch_evals"] == 0
    if ON_CUDA:
        assert stats["n_small_batch_evals"] == 6
        assert stats["n_step_graph_replays"] >= 3   # pieces, capture, replays of the first graph
    else:
        np.testing.assert_array_equal(np.array(ours), np.array(ggml))
        assert stats["n_small_batch_evals"] == 0


def test_replayed_draft_blocks_equal_the_pieces_bit_for_bit(model, files):
    graphs, pieces = block_logits(model, files[1]), block_logits(model, files[1], step_graphs=False)
    for a, b in zip(graphs[0], pieces[0]):
        np.testing.assert_array_equal(a, b)
    assert graphs[1] == pieces[1]
    assert pieces[2]["n_step_graph_replays"] == 0


def test_speculation_with_the_draft_on_the_kernels_equals_plain_greedy(model, files):
    draft = DraftModel(files[1], model)
    rng = np.random.default_rng(2)
    for k in range(4):
        p = [int(t) for t in rng.integers(0, 256, 10 + 7 * k)]
        plain = [t for r in Engine(model, n_ctx=512).generate(p, max_tokens=64, stop_token_ids=()) for t in r.tokens]
        eng = Engine(model, n_ctx=512, n_verify_max=BLOCK)
        got = [t for r in eng.generate(p, max_tokens=64, stop_token_ids=(), speculator=ChainSpeculator(eng, draft))
               for t in r.tokens]
        assert_greedy_matches(model, p, got, plain)   # exact up to a reported near-tie
    if ON_CUDA:   # blocks and the steps' injections of 16 rows
        assert draft.stats()["n_step_graph_replays"] > 0
