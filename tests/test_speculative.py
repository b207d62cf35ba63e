"""Chain speculative decoding (luce_engine.speculative) is exact: with oracle drafters that
propose the known continuation corrupted at a chosen offset (so every acceptance length 0..B-1
and every rollback offset happens), with random drafters, greedy and sampled, on a hybrid (qwen35)
and a dense (llama) target, with f16 and q8_0 KV caches."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from luce_engine import Engine, Model, Sampling
from luce_engine.speculative import ChainSpeculator
from reference import (DEVICE, KQUANT_GPU_BATCH_SHAPE_RTOL, QUANT_KV_GPU_BATCH_SHAPE_RTOL, THREADS, TINY_HEAD_DIM,
                       TINY_WEIGHTS, first_divergence, plain_margin)
from tools.tiny_gguf import Q4KM_QWEN35, TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

B = 8   # block: x0 + 7 proposals


class OracleDrafter:
    """Proposes `truth[pos]` for the block's positions, except at block offset `wrong_at` (a token
    the target does not choose there): acceptance stops exactly there."""

    capture_layers = ()
    block_size = B

    def __init__(self, truth: dict[int, int], n_vocab: int, wrong_at: int | None = None):
        self.truth, self.n_vocab, self.wrong_at = truth, n_vocab, wrong_at
        self.calls = 0

    def reset(self):
        pass

    def inject(self, features, start):
        raise AssertionError("an oracle reads no features")

    def draft(self, x0, pos0):
        self.calls += 1
        out = []
        for i in range(1, B):
            t = self.truth.get(pos0 + i, 0)
            out.append((t + 1) % self.n_vocab if i - 1 == self.wrong_at else t)
        return out


class RandomDrafter(OracleDrafter):
    def __init__(self, n_vocab, seed):
        super().__init__({}, n_vocab)
        self.rng = np.random.default_rng(seed)

    def draft(self, x0, pos0):
        return [int(t) for t in self.rng.integers(0, self.n_vocab, B - 1)]


def model_for(arch: str, tmp_path) -> Model:
    if arch == "qwen35-q4km":   # on CUDA its verify blocks run on luce's small-batch kernels
        cfg = TinyConfig(**Q4KM_QWEN35, n_vocab=256, seed=21)
    else:
        shape = dict(n_vocab=256, n_layer=4, head_dim=TINY_HEAD_DIM) if arch == "qwen35" else dict(n_vocab=256, head_dim=TINY_HEAD_DIM)
        cfg = TinyConfig(arch=arch, seed=21, weight_type=TINY_WEIGHTS, **shape)
    return Model(write_tiny_gguf(tmp_path / f"{arch}.gguf", cfg), device=DEVICE, n_threads=THREADS)


NEAR_TIE = 1e-2   # relative top-2 gap below which a batch shape's rounding may flip a greedy token


def has_kquants(model: Model) -> bool:
    return "q4_K" in model.weight_types or "q6_K" in model.weight_types


def near_tie_bound(model: Model, cache: str = "f16") -> float:
    """K-quants on a GPU: batch shapes may move logits by KQUANT_GPU_BATCH_SHAPE_RTOL of the largest
    (what test_engine allows them too), enough to close a top-2 gap of that size. Measured on the
    H200: ggml's own kernels alone (small_batch_kernels=False) flip a token at a gap of 1.72e-2.
    A quantized KV cache on a GPU: QUANT_KV_GPU_BATCH_SHAPE_RTOL of its type."""
    if DEVICE == "cpu":
        return NEAR_TIE
    bound = KQUANT_GPU_BATCH_SHAPE_RTOL if has_kquants(model) else NEAR_TIE
    return max(bound, QUANT_KV_GPU_BATCH_SHAPE_RTOL[cache])


def rounds_apart_by_batch_shape(model: Model, cache: str = "f16") -> bool:
    """Whether a verify batch and a one-token step may round a near-tie apart: quantized weights
    meeting int8 activations (K-quants), or any model on a GPU, where a batch's attention and
    matmuls run other kernels than a one-token step's (an f16 cache's too: the H200, 2026-12-06)."""
    return has_kquants(model) or DEVICE != "cpu"


def assert_greedy_matches(model, p, got, plain, cache="f16"):
    """Exact, except where a verify batch and a single-token step can round a near-tie apart
    (rounds_apart_by_batch_shape, docs/architecture.md §5): then the first divergence must be a
    near-tie of plain decoding, and is reported."""
    k = first_divergence(got, plain)
    if k is None:
        return
    assert rounds_apart_by_batch_shape(model, cache), f"diverged at {k} on a model without K-quants ({cache} cache)"
    margin = plain_margin(model, p, plain, k, cache=cache)
    assert margin < near_tie_bound(model, cache), f"diverged at {k}, where plain decoding's top-2 margin is {margin:.2e}: not a near-tie"
    print(f"near-tie at {k} (margin {margin:.2e}): {got[k]} vs {plain[k]}")


def prompt(n, seed):
    return [int(t) for t in np.random.default_rng(seed).integers(0, 256, n)]


def run(model, p, n, *, sampling=Sampling(), drafter=None, cache="f16", stop_ids=(), **engine_params):
    eng = Engine(model, n_ctx=512, cache_type_k=cache, cache_type_v=cache, n_verify_max=B, **engine_params)
    spec = ChainSpeculator(eng, drafter) if drafter else None
    toks, drafted = [], []
    for r in eng.generate(p, sampling=sampling, max_tokens=n, stop_token_ids=stop_ids, speculator=spec):
        toks += r.tokens
        drafted += r.drafted
    return toks, drafted, spec, eng


@pytest.mark.parametrize("arch", ["qwen35", "llama", "qwen35-q4km"])
@pytest.mark.parametrize("cache", ["f16", "q8_0"])
def test_greedy_oracle_exact_at_every_acceptance_length(arch, cache, tmp_path):
    check_oracle_acceptance(model_for(arch, tmp_path), cache)


@pytest.mark.parametrize("arch", ["qwen35", "qwen35-q4km"])
def test_greedy_oracle_exact_with_snapshot_rollback(arch, tmp_path):
    """The same with every rollback copying back a per-token state snapshot (rollback="snapshot";
    the default replays the kept tokens' recurrence)."""
    check_oracle_acceptance(model_for(arch, tmp_path), "f16", rollback="snapshot")


def check_oracle_acceptance(model, cache, **engine_params):
    p = prompt(24, 1)
    plain, _, _, _ = run(model, p, 48, cache=cache)
    truth = {len(p) + i: t for i, t in enumerate(plain)}
    for wrong_at in [None] + list(range(B - 1)):
        got, drafted, spec, eng = run(model, p, 48, drafter=OracleDrafter(truth, 256, wrong_at), cache=cache,
                                      **engine_params)
        assert_greedy_matches(model, p, got, plain, cache)
        if got != plain:
            continue   # a reported near-tie: what follows is another continuation
        assert eng.tokens == p + plain   # the context holds exactly the emitted tokens
        want_accept = B - 1 if wrong_at is None else wrong_at
        # every full step accepted exactly up to the corrupted offset
        assert spec.stats.n_accepted >= want_accept * (spec.stats.n_steps - 2)
        assert sum(drafted) == spec.stats.n_accepted


@pytest.mark.parametrize("arch", ["qwen35", "llama", "qwen35-q4km"])
def test_greedy_random_drafts_exact(arch, tmp_path):
    model = model_for(arch, tmp_path)
    for seed in range(4):
        p = prompt(16 + seed, 10 + seed)
        plain, _, _, _ = run(model, p, 40)
        got, _, _, _ = run(model, p, 40, drafter=RandomDrafter(256, seed))
        assert_greedy_matches(model, p, got, plain)


@pytest.mark.parametrize("arch", ["qwen35", "llama"])
def test_sampling_same_seed_same_tokens(arch, tmp_path):
    """Each emitted token is one draw of the engine's generator from the target's processed
    distribution, in plain decoding's order: for a seed, the same tokens as plain sampling."""
    model = model_for(arch, tmp_path)
    p = prompt(20, 3)
    truth_s = Sampling(temperature=0.9, top_k=40, top_p=0.95, repeat_penalty=1.1, seed=7)
    plain, _, _, _ = run(model, p, 40, sampling=truth_s)
    truth = {len(p) + i: t for i, t in enumerate(plain)}
    for wrong_at in (None, 0, 3):
        got, _, spec, _ = run(model, p, 40, sampling=truth_s, drafter=OracleDrafter(truth, 256, wrong_at))
        assert got == plain
    assert spec.stats.n_accepted > 0


def first_two(model, p, seeds, drafter_factory=None, accept_rule=None):
    counts = collections.Counter()
    for seed in seeds:
        s = Sampling(temperature=0.3, seed=seed)
        toks, _, _, _ = run(model, p, 2, sampling=s, drafter=drafter_factory() if drafter_factory else None)
        counts[tuple(toks[:2])] += 1
    return counts


def chi_square(a: collections.Counter, b: collections.Counter) -> tuple[float, int]:
    """Two-sample chi-square statistic over the pooled categories (rare ones merged)."""
    keys = sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))
    big = [k for k in keys if a[k] + b[k] >= 10]
    rest = [k for k in keys if a[k] + b[k] < 10]
    rows = [(a[k], b[k]) for k in big] + [(sum(a[k] for k in rest), sum(b[k] for k in rest))]
    rows = [r for r in rows if sum(r) > 0]
    na, nb = sum(r[0] for r in rows), sum(r[1] for r in rows)
    stat = 0.0
    for x, y in rows:
        ex, ey = (x + y) * na / (na + nb), (x + y) * nb / (na + nb)
        stat += (x - ex) ** 2 / ex + (y - ey) ** 2 / ey
    return stat, len(rows) - 1


def test_sampled_distribution_matches_plain_and_a_wrong_rule_fails(tmp_path):
    """First two tokens over 600 seeds at temperature 0.3: speculative (drafts often right) vs plain, with
    different seeds for the two runs, must pass a chi-square test at p > 0.001; the same test
    fails for a deliberately wrong rule (always accepting the first proposal)."""
    model = model_for("llama", tmp_path)
    p = prompt(12, 5)
    # proposals: the most likely second token (often right, often wrong at temperature 1.5)
    eng = Engine(model, n_ctx=64)
    eng.prefill(p)
    top1 = int(np.argmax(eng.logits()))
    eng.prefill([top1])
    likely_second = int(np.argmax(eng.logits()))
    truth = {len(p) + 1: likely_second}
    plain = first_two(model, p, range(600))
    spec = first_two(model, p, range(10_000, 10_600), lambda: OracleDrafter(truth, 256))
    stat, dof = chi_square(plain, spec)
    assert dof >= 3, "the test needs several well-populated categories"
    # chi-square critical value at p = 0.001 for dof degrees of freedom (Wilson–Hilferty)
    crit = dof * (1 - 2 / (9 * dof) + 3.09 * (2 / (9 * dof)) ** 0.5) ** 3
    assert stat < crit, (stat, dof, crit)

    wrong = collections.Counter()   # a broken rule: keep the proposal whatever the target samples
    for k, v in spec.items():
        wrong[(k[0], likely_second)] += v
    stat_w, dof_w = chi_square(plain, wrong)
    crit_w = dof_w * (1 - 2 / (9 * dof_w) + 3.09 * (2 / (9 * dof_w)) ** 0.5) ** 3
    assert stat_w > crit_w, (stat_w, dof_w, crit_w)


def test_eos_and_max_tokens_inside_a_block(tmp_path):
    model = model_for("llama", tmp_path)
    p = prompt(24, 1)
    plain, _, _, _ = run(model, p, 40)
    truth = {len(p) + i: t for i, t in enumerate(plain)}
    # max_tokens in the middle of a block: exactly n tokens, context holds exactly those
    for n in (1, 5, 11):
        got, _, _, eng = run(model, p, n, drafter=OracleDrafter(truth, 256))
        assert got == plain[:n] and eng.n_past == len(p) + n
    # an end-of-generation id in the middle of an accepted block stops right there
    stop_at = 9
    got, _, _, _ = run(model, p, 40, drafter=OracleDrafter(truth, 256), stop_ids=[plain[stop_at]])
    first = plain.index(plain[stop_at])
    assert got[:first] == plain[:first] and len(got) == first + 1


def test_cancel_mid_generation_leaves_a_consistent_engine(tmp_path):
    model = model_for("qwen35", tmp_path)
    p = prompt(20, 4)
    plain, _, _, _ = run(model, p, 30)
    truth = {len(p) + i: t for i, t in enumerate(plain)}
    eng = Engine(model, n_ctx=512, n_verify_max=B)
    spec = ChainSpeculator(eng, OracleDrafter(truth, 256, wrong_at=2))
    got = []
    for r in eng.generate(p, max_tokens=30, speculator=spec):
        got += r.tokens
        if len(got) >= 7 and r.finish_reason is None:
            eng.cancel()
    assert got == plain[:len(got)] and eng.tokens == p + got
    # the next turn on this engine equals a fresh run
    more = prompt(6, 9)
    a = [t for r in eng.generate(more, max_tokens=12, speculator=spec) for t in r.tokens]
    fresh = Engine(model, n_ctx=512)
    b = [t for r in fresh.generate(p + got + more, max_tokens=12) for t in r.tokens]
    assert a == b
