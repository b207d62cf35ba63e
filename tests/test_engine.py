"""Engine behaviour: chunked prefill with progress, graph reuse, truncate, cancel (mid-prefill and
mid-generation, from another thread), context limits, stop conditions, errors."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from luce_engine import (ContextFullError, Engine, EngineStateError, GenerationCancelled, InvalidArgumentError,
                         Model, Sampling)
from reference import DEVICE, KQUANT_GPU_BATCH_SHAPE_RTOL, THREADS, smollm2_path
from tools.tiny_gguf import Q4KM_QWEN35, TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("e") / "t.gguf", TinyConfig(arch="qwen3", n_vocab=256, head_dim=32))
    return Model(path, device=DEVICE, n_threads=THREADS)


@pytest.fixture(scope="module")
def smol():
    return Model(smollm2_path(), device=DEVICE, n_threads=THREADS)


def assert_logits_close(got, want):
    """Different batch splits change attention's rounding (ggml's CPU flash attention takes another
    path for multi-row batches), so compare with a tolerance, and demand the same argmax."""
    np.testing.assert_allclose(got, want, rtol=0, atol=5e-3 * np.abs(want).max())
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.98


def prompt(n, seed=0, vocab=256):
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, n)]


def test_chunked_prefill_equals_one_batch_and_reports_progress(tiny_model):
    toks = prompt(300)
    whole = Engine(tiny_model, n_ctx=512, n_batch=512)
    whole.prefill(toks, logits_all=True)
    seen = []
    chunked = Engine(tiny_model, n_ctx=512, n_batch=64)
    chunked.prefill(toks, logits_all=True, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(64, 300), (128, 300), (192, 300), (256, 300), (300, 300)]
    assert_logits_close(chunked.all_logits(), whole.all_logits())
    assert chunked.n_past == 300


def test_decode_reuses_graphs(tiny_model):
    eng = Engine(tiny_model, n_ctx=1024)
    eng.prefill(prompt(10))
    eng.reset_stats()
    for _ in range(100):
        eng.step()
    st = eng.stats()
    assert st["n_decode_tokens"] == 100
    # one rebuild when the attended length crosses 256 cells; every other step replays the graph
    assert st["n_graph_builds"] <= 2 and st["n_graph_reuses"] >= 98


def test_verifies_of_a_few_widths_keep_a_graph_each(tiny_model):
    """`--spec auto` alternates verifies of a few widths (chains of 3 and 7, trees) with one-token
    steps: each width keeps its graph (kVerifyGraphs slots), so a change of mode rebuilds nothing,
    and a new width takes over the slot used least recently. The tokens are plain decoding's."""
    eng = Engine(tiny_model, n_ctx=1024, n_verify_max=16)
    ref = Engine(tiny_model, n_ctx=1024)
    p = prompt(10)
    eng.prefill(p)

    def verify(width):   # a verify whose first row is the target's own choice: commit(1) keeps it
        eng.verify([eng.argmax()] + prompt(width - 1, width), logits=False)
        eng.commit(1)

    def one_round():
        for width in (8, 4, 9):
            verify(width)
            eng.step()

    one_round()
    eng.reset_stats()
    for _ in range(5):
        one_round()
    assert eng.stats()["n_graph_builds"] == 0
    verify(5)   # a fourth width: it takes the 8-row verify's slot (the least recently used)
    verify(4)
    verify(9)
    assert eng.stats()["n_graph_builds"] == 1
    verify(8)
    assert eng.stats()["n_graph_builds"] == 2
    ref.prefill(p)
    for _ in range(len(eng.tokens) - len(p)):
        ref.step()
    assert eng.tokens == ref.tokens


def test_a_coarser_step_kv_pad_rebuilds_step_graphs_less_and_decodes_the_same(tiny_model):
    """step_kv_pad: one-token steps and verifies attend the cache in steps of that many cells, so
    their graphs are rebuilt when the context crosses one (and on a GPU recaptured): 600 steps from
    a 10-token prompt cross 256-cell steps twice and 1024-cell ones never. The masked cells change
    the attention's rounding only (ggml's CPU flash attention splits the cells by their count): the
    same tokens, logits within a batch split's tolerance."""
    runs = {}
    for pad in (256, 1024):
        eng = Engine(tiny_model, n_ctx=1024, step_kv_pad=pad)
        eng.prefill(prompt(10))
        eng.reset_stats()
        toks = [eng.step().tokens[0] for _ in range(600)]
        ids = eng.verify(prompt(4, 9), logits=True)
        runs[pad] = (toks, ids, eng.stats()["n_graph_builds"])
    assert runs[1024][0] == runs[256][0]
    assert_logits_close(runs[1024][1], runs[256][1])
    assert (runs[256][2], runs[1024][2]) == (4, 2)   # one-token graphs at 256, 512 and 768 cells, or 1024; a verify


def test_truncate_then_continue_equals_fresh_engine(tiny_model):
    a, b, c = prompt(40, 1), prompt(25, 2), prompt(30, 3)
    eng = Engine(tiny_model, n_ctx=256)
    eng.prefill(a + b)
    eng.truncate(len(a))
    assert eng.n_past == len(a) and eng.tokens == a
    eng.prefill(c, logits_all=True)
    fresh = Engine(tiny_model, n_ctx=256)
    fresh.prefill(a + c, logits_all=True)
    assert_logits_close(eng.all_logits(), fresh.all_logits()[len(a):])
    # truncating to a length keeps stepping possible at once (logits recomputed)
    eng.truncate(10)
    fresh.truncate(10)
    assert eng.step().tokens == fresh.step().tokens


def test_truncate_bounds(tiny_model):
    eng = Engine(tiny_model, n_ctx=256)
    eng.prefill(prompt(5))
    with pytest.raises(InvalidArgumentError):
        eng.truncate(6)
    eng.truncate(0)
    assert eng.n_past == 0
    with pytest.raises(EngineStateError):
        eng.step()


def test_context_limits(tiny_model):
    eng = Engine(tiny_model, n_ctx=256)
    with pytest.raises(ContextFullError, match="does not fit"):
        eng.prefill(prompt(257))
    assert eng.n_past == 0
    eng.prefill(prompt(254))
    results = list(eng.generate(sampling=Sampling(), max_tokens=10, stop_token_ids=[]))
    assert results[-1].finish_reason == "context" and eng.n_past == 256


def test_bad_token_and_empty_prefill(tiny_model):
    eng = Engine(tiny_model, n_ctx=256)
    with pytest.raises(InvalidArgumentError, match="outside the vocabulary"):
        eng.prefill([1, 2, 9999])
    with pytest.raises(ValueError):
        eng.prefill([])
    assert eng.n_past == 0


def test_cancel_during_prefill_from_progress(tiny_model):
    eng = Engine(tiny_model, n_ctx=1024, n_batch=32)
    with pytest.raises(GenerationCancelled):
        eng.prefill(prompt(500), progress=lambda done, total: done < 96)
    assert eng.n_past == 96   # completed micro-batches stay; nothing half-written is visible
    with pytest.raises(EngineStateError):
        eng.step()            # no logits after an interrupted prefill
    eng.truncate(0)
    eng.prefill(prompt(8))
    eng.step()


def test_progress_exception_propagates(tiny_model):
    eng = Engine(tiny_model, n_ctx=512, n_batch=32)

    def boom(done, total):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        eng.prefill(prompt(100), progress=boom)
    assert eng.n_past == 32


def test_cancel_long_generation_from_another_thread(smol):
    """Esc in the UI: cancel() from another thread ends a long generation promptly and leaves the
    engine consistent: the next turn equals what a fresh engine computes from the same context."""
    tok = smol.tokenizer
    p = tok.encode("<|im_start|>user\nWrite a very long story about a dragon.<|im_end|>\n<|im_start|>assistant\n")
    eng = Engine(smol, n_ctx=4096)
    got, reasons = [], []

    def worker():
        for r in eng.generate(p, sampling=Sampling(), max_tokens=3000, stop_token_ids=[]):
            got.extend(r.tokens)
            reasons.append(r.finish_reason)

    th = threading.Thread(target=worker)
    th.start()
    while len(got) < 20:
        time.sleep(0.005)
    eng.cancel()
    t0 = time.monotonic()
    th.join(timeout=30)
    assert not th.is_alive() and time.monotonic() - t0 < 5
    assert reasons[-1] == "cancelled" and len(got) < 3000
    assert eng.n_past == len(p) + len(got)        # every committed token is in the context
    context = eng.tokens
    nxt = [eng.step().tokens[0] for _ in range(8)]
    fresh = Engine(smol, n_ctx=4096)
    fresh.prefill(context)
    assert nxt == [fresh.step().tokens[0] for _ in range(8)]


def test_stale_cancel_does_not_stop_next_generation(tiny_model):
    eng = Engine(tiny_model, n_ctx=256)
    eng.cancel()   # pressed after the previous reply had finished
    out = list(eng.generate(prompt(4), max_tokens=5, stop_token_ids=[]))
    assert out[-1].finish_reason == "length" and sum(len(r.tokens) for r in out) == 5


def test_generation_releases_the_gil(smol):
    """While the engine computes, another Python thread keeps running."""
    eng = Engine(smol, n_ctx=2048 if DEVICE == "cpu" else 2304)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    th = threading.Thread(target=ticker)
    th.start()
    t0 = time.monotonic()
    # one long native call: ~1000 tokens on a CPU; on a GPU, where that takes ~20 ms, the whole context
    eng.prefill(list(range(100, 1100) if DEVICE == "cpu" else range(100, 2148)))
    elapsed = time.monotonic() - t0
    stop.set()
    th.join()
    during = [t for t in ticks if t0 <= t <= t0 + elapsed]
    assert len(during) >= 0.3 * elapsed / 0.002 and len(during) >= 3, (elapsed, len(during))


def test_stop_strings_and_eos(smol):
    tok = smol.tokenizer
    p = tok.encode("<|im_start|>user\nCount from 1 to 10, separated by commas.<|im_end|>\n<|im_start|>assistant\n")
    eng = Engine(smol, n_ctx=1024)
    full = "".join(r.text for r in eng.generate(p, max_tokens=60))
    assert full
    stop = full[len(full) // 3: len(full) // 3 + 2]
    eng.truncate(0)
    results = list(eng.generate(p, max_tokens=60, stop=[stop]))
    text = "".join(r.text for r in results)
    assert results[-1].finish_reason == "stop"
    assert text == full[: full.index(stop)]
    # the end-of-turn token ends generation and never shows up as text
    eng.truncate(0)
    p = tok.encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    results = list(eng.generate(p, max_tokens=200))
    assert results[-1].finish_reason == "eos" and "<|im_end|>" not in "".join(r.text for r in results)


def test_cancel_inside_one_long_micro_batch(smol):
    """On the CPU a cancel also stops a running graph, not only between micro-batches."""
    if DEVICE != "cpu":
        pytest.skip("mid-graph abort is a CPU-backend feature")
    eng = Engine(smol, n_ctx=4096, n_batch=4096)
    errors = []

    def worker():
        try:
            eng.prefill(list(range(1000, 4000)))   # one graph of 3000 tokens: seconds on a CPU
        except GenerationCancelled as exc:
            errors.append(exc)

    th = threading.Thread(target=worker)
    th.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    eng.cancel()
    th.join(timeout=30)
    assert errors and time.monotonic() - t0 < 1.0
    assert eng.n_past == 0
    eng.prefill([1000, 1001, 1002])   # still usable
    eng.step()


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("h") / "q35.gguf",
                           TinyConfig(arch="qwen35", n_vocab=256, n_layer=4, head_dim=32, seed=3))
    return Model(path, device=DEVICE, n_threads=THREADS)


def test_hybrid_chunked_prefill_carries_recurrent_state(hybrid_model):
    """DeltaNet conv window and state carry across micro-batches exactly like one long batch."""
    toks = prompt(200, 4)
    whole = Engine(hybrid_model, n_ctx=512, n_batch=512)
    whole.prefill(toks, logits_all=True)
    chunked = Engine(hybrid_model, n_ctx=512, n_batch=48)
    chunked.prefill(toks, logits_all=True)
    assert_logits_close(chunked.all_logits(), whole.all_logits())


def test_hybrid_truncate_recomputes_state(hybrid_model):
    a, b, c = prompt(30, 5), prompt(20, 6), prompt(25, 7)
    eng = Engine(hybrid_model, n_ctx=256)
    eng.prefill(a + b)
    eng.truncate(len(a))
    eng.prefill(c, logits_all=True)
    fresh = Engine(hybrid_model, n_ctx=256)
    fresh.prefill(a + c, logits_all=True)
    assert_logits_close(eng.all_logits(), fresh.all_logits()[len(a):])
    assert [eng.step().tokens[0] for _ in range(8)] == [fresh.step().tokens[0] for _ in range(8)]


def test_hybrid_cancelled_generation_leaves_consistent_state(hybrid_model):
    eng = Engine(hybrid_model, n_ctx=512)
    got = []
    for r in eng.generate(prompt(10, 8), max_tokens=400, stop_token_ids=[]):
        got.extend(r.tokens)
        if len(got) == 30 and r.tokens:
            eng.cancel()
    assert r.finish_reason == "cancelled"
    assert len(got) == 30 and eng.n_past == 40
    context = eng.tokens
    fresh = Engine(hybrid_model, n_ctx=512)
    fresh.prefill(context)
    assert [eng.step().tokens[0] for _ in range(6)] == [fresh.step().tokens[0] for _ in range(6)]


# On a GPU a batch of a different size may run different kernels (cuBLAS with TF32, other MMQ
# tilings), so logits of the same tokens evaluated in differently shaped batches differ in the 4th
# digit there. Rollback is then checked exactly against a reference with the same batch shapes,
# and against the plain reference within this batch-shape tolerance.
BATCH_SHAPE_RTOL = 1e-5 if DEVICE == "cpu" else 3e-3
# K-quants on a GPU: reference.KQUANT_GPU_BATCH_SHAPE_RTOL. (On the CPU the rollback stays exact.)
KQUANT_BATCH_SHAPE_RTOL = 1e-5 if DEVICE == "cpu" else KQUANT_GPU_BATCH_SHAPE_RTOL


def _rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("arch,rollback", [("qwen35", "snapshot"), ("qwen35", "replay"), ("llama", "snapshot"),
                                           ("qwen35-q4km", "snapshot"), ("qwen35-q4km", "replay")])
def test_verify_commit_rolls_back_exactly(arch, rollback, tmp_path):
    """prefill P, verify t1..t8, commit k (every k in 0..8), continue with u1..u4. The logits equal
    (1e-5 relative) those of an engine that verified t1..tk followed by other tokens and committed
    k (same batch shapes: the rejected tokens leave no trace), and those of a fresh engine fed
    P + t1..tk (exact on the CPU; within BATCH_SHAPE_RTOL on a GPU): the rollback restores KV
    length and recurrent/conv state: from per-token snapshots (rollback="snapshot"), or (the
    default, "replay") by replaying only the DeltaNet recurrence of the k kept tokens."""
    if arch == "qwen35-q4km":   # the user's format; on CUDA its verify blocks run on luce's own kernels
        cfg = TinyConfig(**Q4KM_QWEN35, n_vocab=256, seed=5)
    else:
        cfg = (TinyConfig(arch="qwen35", n_vocab=256, n_layer=4, head_dim=32, seed=5) if arch == "qwen35"
               else TinyConfig(arch="llama", n_vocab=256, seed=5))
    fresh_rtol = KQUANT_BATCH_SHAPE_RTOL if arch.endswith("q4km") else BATCH_SHAPE_RTOL
    model = Model(write_tiny_gguf(tmp_path / f"{arch}.gguf", cfg), device=DEVICE, n_threads=THREADS)
    p, t, u = prompt(20, 1), prompt(8, 2), prompt(4, 3)
    other = [(x + 17) % 256 for x in t]   # differs from t at every position
    eng = Engine(model, n_ctx=256, rollback=rollback)
    twin = Engine(model, n_ctx=256, rollback=rollback)
    for k in range(0, 9):
        eng.truncate(0)
        eng.prefill(p)
        before = eng.logits()
        verified = eng.verify(t)
        assert verified.shape == (8, model.n_vocab)
        eng.commit(k)
        assert eng.n_past == len(p) + k and eng.tokens == p + t[:k]
        np.testing.assert_array_equal(eng.logits(), verified[k - 1] if k else before)
        eng.prefill(u, logits_all=True)
        got = eng.all_logits()

        twin.truncate(0)
        twin.prefill(p)
        twin.verify(t[:k] + other[k:])
        twin.commit(k)
        twin.prefill(u, logits_all=True)
        assert _rel_diff(got, twin.all_logits()) <= 1e-5, f"k={k}: rejected tokens changed the state"

        fresh = Engine(model, n_ctx=256)
        fresh.prefill(p + t[:k])
        fresh.prefill(u, logits_all=True)
        assert _rel_diff(got, fresh.all_logits()) <= fresh_rtol, f"k={k}"


def test_replay_rollback_plans_and_holds_less_memory(hybrid_model):
    """Rolling back by replay keeps each verify token's decay and beta instead of a state snapshot
    (S·S·Hv floats a DeltaNet layer): the plan's recurrent state shrinks by that, its scratch moves
    by less (a replay scratch; the verify slots' graphs keep less per token), and an engine without
    verification holds neither."""
    hp_plan = {}
    for mode in ("snapshot", "replay"):
        hp_plan[mode] = Engine(hybrid_model, n_ctx=256, n_verify_max=8, rollback=mode).memory_plan()
    snap, rep = hp_plan["snapshot"], hp_plan["replay"]
    assert rep["recurrent"] < snap["recurrent"] / 3
    assert abs(rep["compute"] - snap["compute"]) < snap["recurrent"] - rep["recurrent"]
    default = Engine(hybrid_model, n_ctx=256, n_verify_max=8).memory_plan()   # replay is the default
    assert (default["recurrent"], default["compute"]) == (rep["recurrent"], rep["compute"])
    without = Engine(hybrid_model, n_ctx=256, n_verify_max=0).memory_plan()
    assert without["recurrent"] < rep["recurrent"] and without["compute"] <= min(snap["compute"], rep["compute"])


def test_verify_greedy_tokens_match_logits(hybrid_model):
    """verify(logits=False) returns each row's argmax (computed on the device) without the rows."""
    eng = Engine(hybrid_model, n_ctx=256)
    eng.prefill(prompt(9, 4))
    rows = eng.verify(prompt(6, 5))
    eng.commit(0)
    ids = eng.verify(prompt(6, 5), logits=False)
    assert ids.dtype == np.int32 and list(ids) == list(rows.argmax(1))
    eng.commit(2)
    assert eng.argmax() == int(rows[1].argmax()) and eng.sample() == eng.argmax()
    np.testing.assert_array_equal(eng.logits(), rows[1])   # still downloadable after the commit


def test_verify_rules(hybrid_model):
    eng = Engine(hybrid_model, n_ctx=256)
    eng.prefill(prompt(5))
    with pytest.raises(InvalidArgumentError):
        eng.verify(prompt(17))           # more than n_verify_max (16)
    eng.verify(prompt(3))
    with pytest.raises(EngineStateError, match="commit"):
        eng.step()
    with pytest.raises(InvalidArgumentError):
        eng.commit(4)
    eng.commit(3)
    with pytest.raises(EngineStateError):
        eng.commit(1)
    assert eng.n_past == 8


def test_hybrid_checkpoint_makes_truncate_cheap(hybrid_model):
    a, b, c = prompt(40, 11), prompt(30, 12), prompt(10, 13)
    eng = Engine(hybrid_model, n_ctx=256)
    eng.prefill(a)
    eng.checkpoint()                      # e.g. the end of a turn
    eng.prefill(b)
    eng.reset_stats()
    eng.truncate(len(a))                  # back to the checkpoint: nothing recomputed
    assert eng.stats()["n_replayed_tokens"] == 0 and eng.tokens == a
    eng.prefill(c, logits_all=True)
    fresh = Engine(hybrid_model, n_ctx=256)
    fresh.prefill(a)
    fresh.prefill(c, logits_all=True)
    np.testing.assert_allclose(eng.all_logits(), fresh.all_logits(), rtol=0, atol=1e-5 * np.abs(fresh.all_logits()).max())
    eng.reset_stats()
    eng.truncate(len(a) + 4)              # past the checkpoint: only the 4 tokens after it
    assert eng.stats()["n_replayed_tokens"] == 4 and eng.tokens == a + c[:4]
    eng.truncate(10)                      # before every checkpoint: from the start
    assert eng.tokens == a[:10]
    eng.prefill(b[:5])
    fresh.truncate(0)
    fresh.prefill(a[:10] + b[:5])
    assert eng.step().tokens == fresh.step().tokens


def test_hidden_state_capture_conventions_and_rollback(tmp_path):
    """Captured features: layer 0's input is the token embedding, layer L's output equals layer
    L+1's input, and after verify/commit(k) every position equals a fresh engine's capture."""
    import gguf

    path = write_tiny_gguf(tmp_path / "cap.gguf", TinyConfig(arch="qwen35", n_vocab=256, n_layer=4, head_dim=32, seed=9))
    model = Model(path, device=DEVICE, n_threads=THREADS)
    embd = next(t for t in gguf.GGUFReader(path).tensors if t.name == "token_embd.weight").data
    p, t = prompt(12, 1), prompt(6, 2)

    inputs = Engine(model, n_ctx=256)
    inputs.set_capture([0, 2, 3], ring_size=64)
    inputs.prefill(p)
    outputs = Engine(model, n_ctx=256)
    outputs.set_capture([1, 2], output=True, ring_size=64)
    outputs.prefill(p)
    for pos in range(len(p)):
        a, b = inputs.captured(pos), outputs.captured(pos)
        np.testing.assert_array_equal(a[0], embd[p[pos]])
        np.testing.assert_allclose(b, a[1:], rtol=0, atol=1e-5)   # out(1) = in(2), out(2) = in(3)

    twin = Engine(model, n_ctx=256)   # same batch shapes, other rejected tokens (see BATCH_SHAPE_RTOL)
    twin.set_capture([0, 2, 3], ring_size=64)
    twin.prefill(p)
    for k in (0, 3, 6):
        inputs.truncate(len(p))
        inputs.verify(t)
        inputs.commit(k)
        inputs.prefill([7, 8])
        twin.truncate(len(p))
        twin.verify(t[:k] + [(x + 17) % 256 for x in t[k:]])
        twin.commit(k)
        twin.prefill([7, 8])
        fresh = Engine(model, n_ctx=256)
        fresh.set_capture([0, 2, 3], ring_size=64)
        fresh.prefill(p + t[:k])
        fresh.prefill([7, 8])
        for pos in range(len(p) + k + 2):
            np.testing.assert_allclose(inputs.captured(pos), twin.captured(pos), rtol=0, atol=1e-5)
            np.testing.assert_allclose(inputs.captured(pos), fresh.captured(pos), rtol=0,
                                       atol=1e-5 if DEVICE == "cpu" else 1e-2)
    with pytest.raises(InvalidArgumentError, match="capture ring"):
        inputs.captured(inputs.n_past)


def test_greedy_ties_go_to_the_lowest_id(tmp_path):
    """Exact ties of the best logit (here: every output row duplicated) resolve to the lowest id in
    steps and verifications, as plain argmax over the downloaded row and llama.cpp's greedy do."""
    import gguf

    path = write_tiny_gguf(tmp_path / "ties.gguf", TinyConfig(arch="llama", n_vocab=256, seed=11))
    out = next(t for t in gguf.GGUFReader(path, "r+").tensors if t.name == "output.weight")
    rows = out.data.reshape(256, -1)
    rows[128:] = rows[:128]      # token i + 128 always scores exactly like token i
    rows.flush() if hasattr(rows, "flush") else None
    del out, rows
    eng = Engine(Model(path, device=DEVICE, n_threads=THREADS), n_ctx=256)
    eng.prefill(prompt(10, 6))
    for _ in range(12):
        logits = eng.logits()
        want = int(np.argmax(logits))
        assert logits[want] == logits[(want + 128) % 256]   # a real tie
        assert want < 128 and eng.argmax() == want
        eng.step()
    ids = eng.verify(prompt(5, 7), logits=False)
    eng.commit(0)
    rows = eng.verify(prompt(5, 7))
    assert list(ids) == list(rows.argmax(1)) and all(i < 128 for i in ids)


def test_parameters_default_to_the_native_defaults(hybrid_model):
    """Model and Engine take their defaults from luce_model_default_params() / luce_engine_default_params()
    (replay rollback, small-batch kernels and weight fusion on, no piecewise debugging); bad values
    are refused before anything is made."""
    from luce_engine import _core
    from luce_engine.model import ENGINE_DEFAULTS, MODEL_DEFAULTS

    native = _core.model_defaults()
    assert native["repack_weights"] is True   # conftest.py may turn it off for the tests (AMX CPUs)
    assert ENGINE_DEFAULTS == _core.engine_defaults()
    assert {k: v for k, v in MODEL_DEFAULTS.items() if k != "repack_weights"} == \
        {k: v for k, v in native.items() if k != "repack_weights"}
    assert (ENGINE_DEFAULTS["rollback"], ENGINE_DEFAULTS["small_batch_kernels"], ENGINE_DEFAULTS["step_graphs"],
            ENGINE_DEFAULTS["debug_piecewise"]) == ("replay", True, True, False)
    assert MODEL_DEFAULTS["fuse_weights"] is True
    assert Engine(hybrid_model, n_ctx=256).rollback == "replay"
    with pytest.raises(ValueError, match="rollback must be one of snapshot, replay"):
        Engine(hybrid_model, n_ctx=256, rollback="copy")
    with pytest.raises(TypeError, match="unknown engine parameter"):
        hybrid_model.plan(n_ctx=256, rolback="replay")
    assert (ENGINE_DEFAULTS["small_batch_max_tokens"], ENGINE_DEFAULTS["tree_recurrence"]) == (16, "auto")
    for bad in (0, 33):
        with pytest.raises(InvalidArgumentError, match="small_batch_max_tokens must be 1..32, not " + str(bad)):
            Engine(hybrid_model, n_ctx=256, small_batch_max_tokens=bad)
    assert ENGINE_DEFAULTS["step_kv_pad"] == 256
    with pytest.raises(InvalidArgumentError, match="step_kv_pad must be a multiple of 256, not 300"):
        Engine(hybrid_model, n_ctx=256, step_kv_pad=300)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_logits_are_an_error_not_a_token(tmp_path, bad):
    """A row of logits with a NaN or an infinity (here: one output row of the file poisoned) stops
    the step with a ComputeError naming the position, in prefill, decode and verify alike."""
    import gguf

    from luce_engine.errors import ComputeError

    path = write_tiny_gguf(tmp_path / "bad.gguf", TinyConfig(arch="llama", n_vocab=256, seed=12, weight_type="f32"))
    out = next(t for t in gguf.GGUFReader(path, "r+").tensors if t.name == "output.weight")
    out.data.reshape(256, -1)[200, :] = bad   # token 200's logit is not finite for every input
    del out
    eng = Engine(Model(path, device=DEVICE, n_threads=THREADS), n_ctx=128)
    with pytest.raises(ComputeError, match="non-finite logits"):
        eng.prefill(prompt(8, 3))
    with pytest.raises(ComputeError, match="non-finite logits"):
        eng.verify(prompt(4, 4), logits=False)
