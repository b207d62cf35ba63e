"""PFlash scorer pass: numerics against a float64 reference (llama and qwen3, pre- and post-RoPE,
dense and block-sparse), the sparse threshold, progress/cancel, errors, engine isolation, and
memory that stays linear in the input length (plan vs what the engine allocated)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import scorer_reference as ref
from luce_engine import (Engine, GenerationCancelled, InsufficientMemoryError, InvalidArgumentError, Model, Scorer,
                         UnsupportedModelError)
from reference import DEVICE, ON_GPU, THREADS
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

# Max |ours - float64| relative to the largest score: the scorer's cache is f16 (and Q meets K in
# f16 on the CPU); CUDA adds TF32 in the F32-weight projections.
TOL = 1e-2 if ON_GPU else 3e-3
SPARSE = dict(n_batch=64, sparse_threshold=100, sparse_sink=32, sparse_window=64)


def tiny_path(tmp_path_factory, arch):
    # qwen3 uses head_dim 32 != n_embd/n_head, as Qwen3-0.6B does (128 vs 64)
    cfg = TinyConfig(arch=arch, n_vocab=256, head_dim=32 if arch == "qwen3" else 16)
    return write_tiny_gguf(tmp_path_factory.mktemp(arch) / f"{arch}.gguf", cfg)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def tiny(request, tmp_path_factory):
    path = tiny_path(tmp_path_factory, request.param)
    return Model(path, device=DEVICE, n_threads=THREADS), ref.load(path)


def tokens(n, seed=0):
    return np.random.default_rng(seed).integers(0, 255, n).astype(np.int32)


def rel_err(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("pre_rope", [True, False])
def test_scores_match_float64_reference(tiny, pre_rope):
    model, reference = tiny
    toks = tokens(300)
    # 64-token micro-batches: several batches, a partial last one, the tail on its own
    got = Scorer(model, n_batch=64).score(toks, n_tail=8, pre_rope=pre_rope)
    want = ref.scores(reference, toks, n_tail=8, pre_rope=pre_rope)
    assert got.dtype == np.float32 and got.shape == (300,)
    assert rel_err(got, want) < TOL
    other = ref.scores(reference, toks, n_tail=8, pre_rope=not pre_rope)
    assert rel_err(got, other) > 10 * TOL   # the option changes the scores


@pytest.mark.parametrize("n_tail", [1, 5, 32])
def test_tail_length_and_batch_split(tiny, n_tail):
    model, reference = tiny
    toks = tokens(200, seed=n_tail)
    want = ref.scores(reference, toks, n_tail=n_tail)
    for n_batch in (32, 512):   # many batches, or the whole body in one
        assert rel_err(Scorer(model, n_batch=n_batch).score(toks, n_tail=n_tail), want) < TOL


def test_sparse_forward_matches_its_reference(tiny):
    model, reference = tiny
    toks = tokens(300, seed=3)
    scorer = Scorer(model, **SPARSE)
    got = scorer.score(toks, n_tail=8)
    st = scorer.stats()
    assert st["n_sparse_batches"] == 3 and st["n_dense_batches"] == 2
    assert st["attended_keys"] < 0.7 * st["dense_keys"]
    want = ref.scores(reference, toks, n_tail=8, n_batch=64, threshold=100, sink=32, window=64)
    err = rel_err(got, want)
    assert err < TOL
    # really sparse: without the long-range keys the scores move, by far more than our error
    # (GPU matmuls round at ~1e-3, so the margin is relative to the error measured, not to TOL)
    dense = ref.scores(reference, toks, n_tail=8)
    assert rel_err(want, dense) > 3 * max(err, 3e-3)


def test_below_threshold_equals_dense(tiny):
    model, _ = tiny
    toks = tokens(300, seed=4)
    dense = Scorer(model, n_batch=64, sparse_threshold=0).score(toks)
    at_threshold = Scorer(model, **{**SPARSE, "sparse_threshold": 300})
    np.testing.assert_array_equal(at_threshold.score(toks), dense)
    assert at_threshold.stats()["n_sparse_batches"] == 0


def test_sparse_cost_stays_far_below_dense(tmp_path_factory):
    model = Model(tiny_path(tmp_path_factory, "qwen3"), device=DEVICE, n_threads=THREADS)
    scorer = Scorer(model, n_batch=256, sparse_threshold=4096, sparse_sink=256, sparse_window=1024)
    scorer.score(tokens(16384))
    st = scorer.stats()
    # per query at most sink + window + batch keys: ~1.5K of the ~8K a dense query averages
    assert st["attended_keys"] < 0.2 * st["dense_keys"]
    assert st["n_sparse_batches"] >= 55


@pytest.mark.parametrize("pre_rope", [True, False])
def test_questions_share_one_body_pass(tiny, pre_rope):
    model, reference = tiny
    body = tokens(250, seed=9)
    questions = [tokens(8, seed=10), tokens(20, seed=11), tokens(64, seed=12)]
    scorer = Scorer(model, n_batch=64)
    seen = []
    got = scorer.score_questions(body, questions, n_tail=8, pre_rope=pre_rope,
                                 progress=lambda done, total: seen.append(done))
    assert got.shape == (3, 250) and seen[-1] == 250 + 8 + 20 + 64
    assert scorer.stats()["n_dense_batches"] == 4   # the body once, not once per question
    for row, q in zip(got, questions):
        whole = np.concatenate([body, q])
        assert rel_err(row, ref.scores(reference, whole, n_tail=8, pre_rope=pre_rope)[:250]) < TOL
        single = scorer.score(whole, n_tail=8, pre_rope=pre_rope)[:250]
        assert rel_err(row, single) < TOL
    with pytest.raises(InvalidArgumentError, match="question 1"):
        scorer.score_questions(body, [tokens(8), tokens(3)], n_tail=8)


def test_progress_cancel_and_reuse(tiny):
    model, _ = tiny
    toks = tokens(300, seed=5)
    scorer = Scorer(model, n_batch=64)
    seen = []
    first = scorer.score(toks, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(64, 300), (128, 300), (192, 300), (256, 300), (292, 300), (300, 300)]
    with pytest.raises(GenerationCancelled):
        scorer.score(toks, progress=lambda done, total: done < 128)
    np.testing.assert_array_equal(scorer.score(toks), first)   # usable after a cancel, same result


def test_cancel_from_another_thread(tmp_path_factory):
    model = Model(tiny_path(tmp_path_factory, "llama"), device=DEVICE, n_threads=THREADS)
    scorer = Scorer(model, n_batch=64, sparse_threshold=0)
    started = threading.Event()

    def progress(done, total):
        started.set()
        time.sleep(0.01)   # keep the call long enough to cancel it midway

    timer = threading.Thread(target=lambda: (started.wait(10), scorer.cancel()))
    timer.start()
    with pytest.raises(GenerationCancelled):
        scorer.score(tokens(4096), progress=progress)
    timer.join()
    assert scorer.score(tokens(100), n_tail=4).shape == (100,)


def test_bad_arguments(tiny, tmp_path):
    model, _ = tiny
    scorer = Scorer(model)
    for n_tail in (0, 11):
        with pytest.raises(InvalidArgumentError, match="n_tail"):
            scorer.score(tokens(10), n_tail=n_tail)
    with pytest.raises(InvalidArgumentError, match="vocabulary"):
        scorer.score([1, 2, 300, 4], n_tail=2)
    with pytest.raises(ValueError):
        scorer.score([])
    hybrid = write_tiny_gguf(tmp_path / "h.gguf", TinyConfig(arch="qwen35", n_layer=4, head_dim=32))
    with pytest.raises(UnsupportedModelError, match="llama or qwen3"):
        Scorer(Model(hybrid, device=DEVICE, n_threads=THREADS))


def test_engine_on_the_same_model_is_untouched(tiny):
    model, _ = tiny
    prompt = [int(t) for t in tokens(50, seed=7)]
    eng = Engine(model, n_ctx=512)
    eng.prefill(prompt)
    before = eng.logits().copy()
    Scorer(model, n_batch=64).score(tokens(400, seed=8))
    assert eng.n_past == 50 and eng.tokens == prompt
    np.testing.assert_array_equal(eng.logits(), before)
    step = eng.step().tokens
    fresh = Engine(model, n_ctx=512)
    fresh.prefill(prompt)
    assert fresh.step().tokens == step


def test_memory_is_planned_and_linear(tmp_path_factory):
    """Stated bound: a call on 2S tokens plans at most 2.1x the memory of S tokens (+ 1 MiB), the KV
    cache the engine allocates is exactly the planned one, and the compute buffers it measured stay
    within the plan — for dense and for sparse inputs."""
    model = Model(tiny_path(tmp_path_factory, "qwen3"), device=DEVICE, n_threads=THREADS)
    MiB = 1 << 20
    for threshold in (0, 2048):
        scorer = Scorer(model, sparse_threshold=threshold, sparse_window=512)
        measured = {}
        for S in (4096, 8192, 16384):
            plan = scorer.plan(S)
            scorer.score(tokens(S, seed=S))
            st = scorer.stats()
            assert st["kv_bytes"] == plan["kv_cache"] == st["planned_kv_bytes"]
            assert st["compute_bytes"] <= plan["compute"] == st["planned_compute_bytes"]
            assert plan["compute"] <= 2.5 * st["compute_bytes"] + MiB   # the estimate is not vacuous
            measured[S] = st["kv_bytes"] + st["compute_bytes"]
        for S in (4096, 8192):
            small, large = scorer.plan(S), scorer.plan(2 * S)
            used = lambda p: p["kv_cache"] + p["compute"] + p["outputs"]
            assert used(large) <= 2.1 * used(small) + MiB
            assert measured[2 * S] <= 2.1 * measured[S] + MiB
        print(f"threshold {threshold}: allocated bytes by length {measured}")


def test_plan_that_does_not_fit_says_what_to_do(tiny):
    model, _ = tiny
    scorer = Scorer(model)
    huge = 2_000_000_000
    with pytest.raises(InsufficientMemoryError, match="tokens fit"):
        scorer.plan(huge)
    plan = scorer.plan(huge, check=False)
    assert plan["kv_cache"] > plan["device_free"] > 0
