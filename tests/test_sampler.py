"""Sampler properties on real logits: greedy, top-k/top-p/min-p support, penalties, seed
determinism, and that temperature sampling draws from the softmax distribution."""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import Engine, Model, Sampling
from reference import DEVICE
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("s") / "s.gguf", TinyConfig(n_vocab=256, seed=0))
    eng = Engine(Model(path, device=DEVICE), n_ctx=256)
    eng.prefill([10, 20, 30, 40, 50, 60])
    return eng


def draws(engine, sampling, n, seed=1):
    engine.set_seed(seed)
    return np.array([engine.sample(sampling) for _ in range(n)])


def softmax(x, t=1.0):
    z = np.exp((x - x.max()) / t)
    return z / z.sum()


def test_greedy_is_argmax(engine):
    assert engine.sample(Sampling()) == int(np.argmax(engine.logits()))


def test_top_k_support(engine):
    logits = engine.logits()
    allowed = set(np.argsort(-logits)[:5].tolist())
    got = draws(engine, Sampling(temperature=2.0, top_k=5), 400)
    assert set(got.tolist()) <= allowed
    assert len(set(got.tolist())) >= 3   # it is sampling, not collapsing to the argmax


def test_top_p_support(engine):
    p = softmax(engine.logits())
    order = np.argsort(-p)
    nucleus = set(order[: int(np.searchsorted(np.cumsum(p[order]), 0.5)) + 1].tolist())
    got = set(draws(engine, Sampling(temperature=1.0, top_p=0.5), 400).tolist())
    assert got <= nucleus and len(got) >= min(2, len(nucleus))


def test_min_p_support(engine):
    p = softmax(engine.logits())
    allowed = set(np.nonzero(p >= 0.2 * p.max())[0].tolist())
    got = set(draws(engine, Sampling(temperature=1.0, min_p=0.2), 400).tolist())
    assert got <= allowed


def test_temperature_draws_match_softmax(engine):
    """Chi-square goodness of fit of 4000 draws to softmax(logits / T) over the top tokens."""
    t = 1.3
    p = softmax(engine.logits().astype(np.float64), t)
    got = draws(engine, Sampling(temperature=t), 4000, seed=123)
    top = np.argsort(-p)[:8]
    observed = np.array([np.sum(got == k) for k in top] + [np.sum(~np.isin(got, top))])
    expected = np.append(p[top], 1 - p[top].sum()) * len(got)
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 26.12, chi2   # the chi-square critical value for 8 degrees of freedom at p = 0.001


def test_seed_determinism(engine):
    s = Sampling(temperature=1.5)
    a, b, c = draws(engine, s, 50, seed=7), draws(engine, s, 50, seed=7), draws(engine, s, 50, seed=8)
    assert (a == b).all()
    assert not (a == c).all()


def test_generation_is_reproducible_for_a_seed(engine):
    def run(seed):
        engine.truncate(6)
        return [t for r in engine.generate(sampling=Sampling(temperature=1.0, seed=seed), max_tokens=24,
                                           stop_token_ids=[]) for t in r.tokens]
    assert run(11) == run(11)
    assert run(11) != run(12)


def test_repeat_and_presence_penalties(engine):
    engine.truncate(6)
    engine.prefill([int(np.argmax(engine.logits()))])   # put the current argmax into the history
    logits = engine.logits()
    best = int(np.argmax(logits))
    history = set(engine.tokens)
    # a huge penalty pushes every recent token below everything else
    for s in (Sampling(repeat_penalty=1e6), Sampling(presence_penalty=1e6)):
        assert engine.sample(s) not in history
    if best in history:
        assert engine.sample(Sampling(repeat_penalty=1e6)) != best
    # penalty_last_n=0 switches them off
    assert engine.sample(Sampling(repeat_penalty=1e6, penalty_last_n=0)) == best


def test_invalid_parameters():
    with pytest.raises(ValueError):
        Sampling(temperature=-1)
    with pytest.raises(ValueError):
        Sampling(top_p=0)
    with pytest.raises(ValueError):
        Sampling(min_p=2)


@pytest.fixture(scope="module")
def smollm2_engine():
    """The default model's 49,152-token vocabulary: most of its probabilities lie below the top-p
    search's first floor (1e-4), so the nucleus there spans several floors."""
    from reference import smollm2_path
    eng = Engine(Model(smollm2_path(), device=DEVICE, n_threads=2), n_ctx=64)
    eng.prefill(eng.model.tokenizer.encode("My favourite"))   # a flat next-token distribution
    return eng


def chi_square_top(got, p, k=8):
    top = np.argsort(-p)[:k]
    observed = np.array([np.sum(got == t) for t in top] + [np.sum(~np.isin(got, top))])
    expected = np.append(p[top], max(1 - p[top].sum(), 1e-12)) * len(got)
    keep = expected > 5   # cells too small for the statistic are merged away
    return float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()), int(keep.sum()) - 1


@pytest.mark.parametrize("top_p", [1.0, 0.9999, 0.9])
def test_large_vocabulary_draws_match_the_float64_nucleus(smollm2_engine, top_p):
    """Draws at T = 1.4 follow the float64 reference of top-p over the full vocabulary (the sampler
    sorts only the candidates the nucleus needs, and none without a filter)."""
    logits = smollm2_engine.logits().astype(np.float64)
    p = softmax(logits)
    order = np.argsort(-p, kind="stable")
    n = int(np.searchsorted(np.cumsum(p[order]), top_p)) + 1 if top_p < 1 else len(p)
    nucleus = order[:n]
    q = np.zeros_like(p)
    q[nucleus] = softmax(logits[nucleus], 1.4)
    got = draws(smollm2_engine, Sampling(temperature=1.4, top_p=top_p), 3000, seed=5)
    assert set(got.tolist()) <= set(nucleus.tolist())
    chi2, dof = chi_square_top(got, q)
    critical = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32, 8: 26.12}   # p = 0.001
    assert chi2 < critical[dof], (chi2, dof)
