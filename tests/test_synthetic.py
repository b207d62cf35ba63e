"""Synthetic acceptance (benchmark only) follows llama.cpp's `--spec-synth-len` definition, and the
speculative loop under it emits L tokens per step on average while running the full draft/verify."""
from __future__ import annotations

import pytest

from luce_engine import Engine, Model
from bench.synthetic import SyntheticAcceptance, SyntheticSpeculator, conditional_acceptance
from reference import DEVICE, THREADS, TINY_WEIGHTS
from test_speculative import RandomDrafter
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)


@pytest.mark.parametrize("length", [1.5, 3, 4, 6, 8, 12])
def test_rate_gives_the_mean_length(length):
    p = conditional_acceptance(length, 15)
    assert 0 < p < 1
    assert 1 + sum(p ** i for i in range(1, 16)) == pytest.approx(length, abs=1e-8)


def test_edges_and_bad_lengths():
    assert conditional_acceptance(16, 15) == 1.0
    assert conditional_acceptance(1, 15) == 0.0
    for bad in (0.5, 17, float("nan")):
        with pytest.raises(ValueError, match="within"):
            conditional_acceptance(bad, 15)
    with pytest.raises(ValueError, match="at least one"):
        conditional_acceptance(2, 0)


def test_loop_emits_length_tokens_per_step(tmp_path):
    cfg = TinyConfig(arch="qwen35", n_vocab=256, n_layer=4, head_dim=32, seed=5, weight_type=TINY_WEIGHTS)
    model = Model(write_tiny_gguf(tmp_path / "t.gguf", cfg), device=DEVICE, n_threads=THREADS)
    eng = Engine(model, n_ctx=4096, n_verify_max=8)
    spec = SyntheticSpeculator(eng, RandomDrafter(256, seed=1), SyntheticAcceptance(4.0, 7, seed=3))
    n = 0
    for r in eng.generate([1, 2, 3], max_tokens=2400, stop_token_ids=(), speculator=spec):
        n += len(r.tokens)
    s = spec.stats
    assert n == 2400 and s.n_steps > 500 and s.n_drafted >= 7 * (s.n_steps - 1)   # every step drafted in full
    # ~600 steps: the mean of a geometric-like count with sd ~2 is within ±0.35 at > 99.9%
    assert s.acceptance_length == pytest.approx(4.0, abs=0.35)
