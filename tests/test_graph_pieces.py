"""Computing a graph in pieces (engine/native/src/runtime/graph_views.h), as luce's CUDA small-batch runner
does, gives the whole graph's results bit for bit. On the CPU, Engine(debug_piecewise=True) makes an
engine compute every graph cut around each of its matmuls, each piece a view of the whole graph's
nodes that keeps its use counts; prefill, verify, rollback and decoding must all match an ordinary
engine exactly, on dense, hybrid and Q4_K_M models.
"""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import Engine, Model, Sampling
from tools.tiny_gguf import Q4KM_QWEN35, TinyConfig, write_tiny_gguf

CONFIGS = {
    "llama": TinyConfig(arch="llama", n_vocab=256, seed=31),
    "qwen35": TinyConfig(arch="qwen35", n_vocab=256, n_layer=4, head_dim=32, seed=32),
    "qwen35-q4km": TinyConfig(**Q4KM_QWEN35, n_vocab=256, seed=33),
}


def run(model: Model, piecewise: bool) -> tuple[np.ndarray, np.ndarray, list[int]]:
    eng = Engine(model, n_ctx=256, n_verify_max=8, debug_piecewise=piecewise)
    rng = np.random.default_rng(4)
    eng.prefill([int(t) for t in rng.integers(0, 256, 30)], logits_all=True)
    prompt_logits = eng.all_logits().copy()
    rows = np.array(eng.verify([int(t) for t in rng.integers(0, 256, 8)], logits=True))
    eng.commit(3)
    tokens = [eng.step(Sampling()).tokens[0] for _ in range(12)]
    return prompt_logits, rows, tokens


@pytest.mark.parametrize("name", CONFIGS)
def test_pieces_compute_what_the_whole_graph_computes(name, tmp_path):
    model = Model(write_tiny_gguf(tmp_path / f"{name}.gguf", CONFIGS[name]), device="cpu", n_threads=2)
    whole, pieces = run(model, False), run(model, True)
    np.testing.assert_array_equal(pieces[0], whole[0])
    np.testing.assert_array_equal(pieces[1], whole[1])
    assert pieces[2] == whole[2]
