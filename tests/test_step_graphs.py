"""A decode or verify step on CUDA's small-batch path is captured once as one CUDA graph and replayed
(luce_engine_params.step_graphs, small_batch_runner.h). A replay must compute exactly what the
step computed in pieces: the same logits, bit for bit, at every step, across graph rebuilds (the
KV window grows every 256 tokens) and verify/commit cycles. On the CPU the parameter changes
nothing and no step is replayed."""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import Engine, Model, Sampling
from reference import DEVICE, THREADS
from tools.tiny_gguf import Q4KM_QWEN35, TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)
ON_CUDA = DEVICE.startswith("cuda")


@pytest.fixture(scope="module")
def q4k_hybrid(tmp_path_factory):
    # Q4_K / Q6_K weights with rows of 256: every matmul qualifies for the small-batch kernels
    path = write_tiny_gguf(tmp_path_factory.mktemp("sg") / "q4km.gguf", TinyConfig(**Q4KM_QWEN35, n_vocab=256, seed=41))
    return Model(path, device=DEVICE, n_threads=THREADS)


def decode_rows(model: Model, step_graphs: bool, n_steps: int) -> tuple[list[np.ndarray], list[int], dict]:
    eng = Engine(model, n_ctx=1024, step_graphs=step_graphs)
    eng.prefill([int(t) for t in np.random.default_rng(5).integers(0, 256, 200)])
    rows, tokens = [], []
    for _ in range(n_steps):   # 200 + 80 tokens: the KV window grows past 256 on the way (a rebuild)
        rows.append(eng.logits(-1).copy())
        tokens.append(eng.step(Sampling()).tokens[0])
    return rows, tokens, eng.stats()


def test_replayed_decode_steps_equal_the_pieces_bit_for_bit(q4k_hybrid):
    graphs, plain = decode_rows(q4k_hybrid, True, 80), decode_rows(q4k_hybrid, False, 80)
    for a, b in zip(graphs[0], plain[0]):
        np.testing.assert_array_equal(a, b)
    assert graphs[1] == plain[1]
    assert plain[2]["n_step_graph_replays"] == 0
    if ON_CUDA:
        assert graphs[2]["n_small_batch_evals"] == plain[2]["n_small_batch_evals"] == 80
        # two graphs (before and after the window grew), each: pieces, capture, then replays
        assert graphs[2]["n_step_graph_replays"] == 80 - 2 * 2
    else:
        assert graphs[2]["n_small_batch_evals"] == graphs[2]["n_step_graph_replays"] == 0


def verify_cycles(model: Model, step_graphs: bool) -> tuple[list[np.ndarray], dict]:
    eng = Engine(model, n_ctx=512, n_verify_max=8, step_graphs=step_graphs)
    rng = np.random.default_rng(6)
    eng.prefill([int(t) for t in rng.integers(0, 256, 40)])
    out = []
    for keep in (3, 0, 8, 5, 1, 2):   # commit changes the context between replays of one graph
        out.append(np.array(eng.verify([int(t) for t in rng.integers(0, 256, 8)], logits=True)))
        eng.commit(keep)
        out.append(eng.logits(-1).copy())
    return out, eng.stats()


def test_replayed_verifies_equal_the_pieces_bit_for_bit(q4k_hybrid):
    (graphs, g_stats), (plain, _) = verify_cycles(q4k_hybrid, True), verify_cycles(q4k_hybrid, False)
    for a, b in zip(graphs, plain):
        np.testing.assert_array_equal(a, b)
    if ON_CUDA:
        assert g_stats["n_step_graph_replays"] >= 4


@pytest.fixture(scope="module")
def q4_0_dense(tmp_path_factory):
    # Q4_0 (as SmolLM2's Q4_1 file): no matmul for luce's kernels, its verifies are captured all the same.
    # Heads of 64 as SmolLM2's: ggml's CUDA flash attention takes no head of 32, which would run on the
    # CPU in a split of its own, and a graph of several splits is never captured.
    path = write_tiny_gguf(tmp_path_factory.mktemp("sg") / "q4_0.gguf",
                           TinyConfig(arch="llama", n_vocab=256, head_dim=64, weight_type="q4_0", seed=42))
    return Model(path, device=DEVICE, n_threads=THREADS)


def test_a_dense_model_without_kernel_matmuls_replays_its_verifies_bit_for_bit(q4_0_dense):
    (graphs, g_stats), (plain, p_stats) = verify_cycles(q4_0_dense, True), verify_cycles(q4_0_dense, False)
    for a, b in zip(graphs, plain):
        np.testing.assert_array_equal(a, b)
    rows, tokens, d_stats = decode_rows(q4_0_dense, True, 40)
    plain_rows, plain_tokens, _ = decode_rows(q4_0_dense, False, 40)
    for a, b in zip(rows, plain_rows):
        np.testing.assert_array_equal(a, b)
    assert tokens == plain_tokens
    assert p_stats["n_step_graph_replays"] == 0
    if ON_CUDA:
        assert g_stats["n_step_graph_replays"] >= 4, g_stats   # verifies; a decode step keeps ggml's own graphs
        assert d_stats["n_small_batch_evals"] == d_stats["n_step_graph_replays"] == 0
    else:
        assert g_stats["n_step_graph_replays"] == d_stats["n_step_graph_replays"] == 0
