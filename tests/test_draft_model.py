"""The native DFlash draft model (luce_engine.DraftModel) against the float64 numpy reference
tests/dflash_reference.py (itself checked against llama.cpp's dflash graph): both GGUF dialects,
llama and qwen35 targets, SWA, a draft context window smaller than the context, chunked injection,
position offsets, stale positions, and the specific errors of every bad-draft kind."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import pytest

import dflash_reference as R
import tools.tiny_dflash as TD
from luce_engine import (DraftMismatchError, DraftModel, EngineStateError, InvalidArgumentError, Model,
                         ModelValidationError)
from reference import DEVICE, DRAFT_REF_TOL, ON_GPU, THREADS
from tools.tiny_dflash import BAD_DRAFT_DETAILS, BAD_DRAFT_KINDS, TinyDraftConfig, write_bad_draft, write_tiny_dflash
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

TOL = DRAFT_REF_TOL   # max |ours - reference| relative to max |reference logit|

TARGETS = {
    "llama": TinyConfig(arch="llama", n_layer=4, seed=3),
    "qwen35": TinyConfig(arch="qwen35", n_layer=4, seed=4),
}
DIALECTS = {
    "llama": dict(convention="llama"),
    "lucebox": dict(convention="lucebox"),   # dflash-draft, dflash.fc, post_attention_norm
    "lucebox-alt": dict(convention="lucebox", arch_name="qwen35-dflash-draft", fc_spelling="underscore",
                        ffn_norm_name="ffn_norm"),
}


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    d = tmp_path_factory.mktemp("draft_targets")
    out = {}
    for name, cfg in TARGETS.items():
        path = write_tiny_gguf(d / f"{name}.gguf", cfg)
        out[name] = (path, Model(path, device=DEVICE, n_threads=THREADS), R.load_target_head(path))
    return out


def _make(tmp_path, target_path, **kw):
    path = write_tiny_dflash(tmp_path / "draft.gguf", target_path, TinyDraftConfig(seed=2, **kw))
    return path, R.load_draft(path)


def _feats(ref, c, seed=1):
    return np.random.default_rng(seed).standard_normal((c, ref.fc.shape[1])).astype(np.float32)


def _check(dm, ref, head, F, x0, *, pos_offset=0, ctx_window=None, causal=False, tokens=None):
    """Logits of the last draft vs the reference; draft tokens vs the reference argmax."""
    block = R.noise_block(x0, ref.mask_token_id, ref.block_size)
    want = R.draft_logits(ref, head, F.astype(np.float64), block, pos_offset=pos_offset, ctx_window=ctx_window,
                          causal=causal)
    got = dm.logits()
    assert got.shape == want.shape == (ref.block_size, head.output.shape[0])
    scale = np.abs(want).max()
    err = np.abs(got - want).max() / scale
    assert err < TOL, f"max relative error {err:.2e}"
    if tokens is not None:
        assert len(tokens) == ref.block_size - 1
        # the draft's own argmax (ties -> lowest id) ...
        assert tokens == [int(np.argmax(r)) for r in got[1:]]
        # ... is the reference's, up to a near-tie within the tolerance
        for i, t in enumerate(tokens, start=1):
            assert want[i, t] >= want[i].max() - TOL * scale
    return err


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_parity(tmp_path, targets, target, dialect):
    tpath, tm, head = targets[target]
    path, ref = _make(tmp_path, tpath, **DIALECTS[dialect])
    dm = DraftModel(path, tm)
    assert dm.block_size == ref.block_size == 8
    assert dm.mask_token_id == ref.mask_token_id
    assert dm.capture_layers == ref.capture == (0, 1, 2)
    assert dm.dialect == ("llama" if dialect == "llama" else "lucebox")
    assert dm.arch == ref.arch and dm.n_embd == tm.n_embd and dm.n_vocab == tm.n_vocab
    mem = dm.memory
    assert mem["weights"] > 0 and mem["kv_cache"] > 0 and mem["compute"] > 0
    c = 40
    F = _feats(ref, c)
    dm.inject(F, 0)
    toks = dm.draft(65, c)
    _check(dm, ref, head, F, 65, tokens=toks)
    # a second block on the same context, another anchor: the graph is reused
    builds = dm.stats()["n_graph_builds"]
    toks = dm.draft(7, c)
    _check(dm, ref, head, F, 7, tokens=toks)
    assert dm.stats()["n_graph_builds"] == builds


@pytest.mark.parametrize("dialect", ["llama", "lucebox"])
@pytest.mark.parametrize("pattern", [None, (True, True)])
def test_swa(tmp_path, targets, dialect, pattern):
    tpath, tm, head = targets["qwen35"]
    path, ref = _make(tmp_path, tpath, sliding_window=5, swa_pattern=pattern, **DIALECTS[dialect])
    assert [L.is_swa for L in ref.layers] == ([True, False] if pattern is None else [True, True])
    dm = DraftModel(path, tm)
    assert dm.sliding_window == 5
    F = _feats(ref, 40, seed=5)
    dm.inject(F, 0)
    _check(dm, ref, head, F, 11, tokens=dm.draft(11, 40))
    # the window matters: without SWA the logits differ
    plain = R.draft_logits(R.load_draft(_make(tmp_path, tpath, **DIALECTS[dialect])[0]), head, F.astype(np.float64),
                           R.noise_block(11, ref.mask_token_id, ref.block_size))
    assert not np.allclose(dm.logits(), plain, atol=1e-3)


def test_swa_window_smaller_than_block(tmp_path, targets):
    # block keys obey the window too (p_q - p_k < window), not only context keys
    tpath, tm, head = targets["llama"]
    path, ref = _make(tmp_path, tpath, sliding_window=3, swa_pattern=(True, True))
    dm = DraftModel(path, tm)
    F = _feats(ref, 12)
    dm.inject(F, 0)
    _check(dm, ref, head, F, 3, tokens=dm.draft(3, 12))


@pytest.mark.parametrize("dialect", ["llama", "lucebox"])
def test_context_window_smaller_than_context(tmp_path, targets, dialect):
    tpath, tm, head = targets["llama"]
    path, ref = _make(tmp_path, tpath, **DIALECTS[dialect])
    c = 40
    F = _feats(ref, c, seed=7)
    for W in (16, 30):   # the ring wraps (slot p mod W)
        dm = DraftModel(path, tm, n_ctx_draft=W)
        assert dm.n_ctx_draft == W
        dm.inject(F, 0)
        _check(dm, ref, head, F, 9, ctx_window=W, tokens=dm.draft(9, c))
        # chunked through the ring gives the same
        dm.reset()
        for a, b in ((0, 13), (13, 29), (29, 40)):
            dm.inject(F[a:b], a)
        _check(dm, ref, head, F, 9, ctx_window=W, tokens=dm.draft(9, c))
    # all rows in one call larger than the ring: only the last W count
    dm = DraftModel(path, tm, n_ctx_draft=16)
    dm.inject(F, 0)
    dm.draft(9, c)
    want = R.draft_logits(ref, head, F.astype(np.float64)[-16:], R.noise_block(9, ref.mask_token_id, 8), pos_offset=c - 16)
    assert np.abs(dm.logits() - want).max() < max(1e-3, TOL * np.abs(want).max())


def test_chunked_injection_equals_one_chunk(tmp_path, targets):
    tpath, tm, head = targets["qwen35"]
    path, ref = _make(tmp_path, tpath, convention="lucebox")
    F = _feats(ref, 150, seed=9)
    one = DraftModel(path, tm)
    one.inject(F, 0)
    one.draft(42, 150)
    many = DraftModel(path, tm)
    for a, b in ((0, 1), (1, 8), (8, 9), (9, 80), (80, 150)):   # block-sized, tiny and 64-bucket chunks
        many.inject(F[a:b], a)
    many.draft(42, 150)
    # other chunk shapes: same arithmetic on a CPU; on CUDA other TF32 tilings of the F32 weights
    assert np.abs(one.logits() - many.logits()).max() <= (TOL if ON_GPU else 1e-6) * np.abs(one.logits()).max()
    _check(many, ref, head, F, 42)
    # 3-D features [n, Nf, E] are accepted too
    third = DraftModel(path, tm)
    third.inject(F.reshape(150, 3, -1), 0)
    third.draft(42, 150)
    assert np.array_equal(third.logits(), one.logits())


def test_positions_offset_stale_and_reset(tmp_path, targets):
    tpath, tm, head = targets["llama"]
    path, ref = _make(tmp_path, tpath)
    dm = DraftModel(path, tm)
    F = _feats(ref, 30, seed=11)
    dm.inject(F, 100)                     # context positions 100..129
    _check(dm, ref, head, F, 5, pos_offset=100, tokens=dm.draft(5, 130))
    # a block at an earlier position sees only the injected positions before it (rejected rows
    # injected past it are ignored: no rollback needed)
    _check(dm, ref, head, F[:20], 5, pos_offset=100, tokens=dm.draft(5, 120))
    dm.reset()
    toks = dm.draft(5, 0)                 # no context at all: the block alone
    _check(dm, ref, head, np.zeros((0, F.shape[1]), np.float32), 5, tokens=toks)


def test_head_and_rope_variants(tmp_path, targets):
    tpath, tm, head = targets["qwen35"]
    for kw in (dict(own_token_embd=True), dict(rope_sections=(8, 0, 0, 0)), dict(rope_freq_base=1e6)):
        path, ref = _make(tmp_path, tpath, **kw)
        dm = DraftModel(path, tm)
        F = _feats(ref, 25)
        dm.inject(F, 0)
        _check(dm, ref, head, F, 30, tokens=dm.draft(30, 25))


def test_causal_key(tmp_path, targets):
    tpath, tm, head = targets["llama"]
    path, ref = _make(tmp_path, tpath, causal_key=True)
    dm = DraftModel(path, tm)
    F = _feats(ref, 20)
    dm.inject(F, 0)
    _check(dm, ref, head, F, 30, causal=True, tokens=dm.draft(30, 20))


@pytest.mark.parametrize("dialect", ["llama", "lucebox"])
@pytest.mark.parametrize("kind", BAD_DRAFT_KINDS)
def test_bad_drafts(tmp_path, targets, dialect, kind):
    tpath, tm, _ = targets["qwen35"]
    path = write_bad_draft(tmp_path / f"bad_{kind}.gguf", kind, tpath, TinyDraftConfig(**DIALECTS[dialect]))
    expected = ModelValidationError if kind == "missing_capture_key" else DraftMismatchError
    with pytest.raises(expected) as ei:
        DraftModel(path, tm)
    msg = str(ei.value)
    assert BAD_DRAFT_DETAILS[kind] in msg and f"bad_{kind}.gguf" in msg, msg
    if expected is ModelValidationError:
        assert not isinstance(ei.value, DraftMismatchError)


def test_sliding_window_without_pattern(tmp_path, targets, monkeypatch):
    tpath, tm, head = targets["llama"]
    orig = TD._kvs
    monkeypatch.setattr(TD, "_kvs", lambda *a, **k: [kv for kv in orig(*a, **k)
                                                     if not kv[0].endswith("sliding_window_pattern")])
    llama = write_tiny_dflash(tmp_path / "l.gguf", tpath, TinyDraftConfig(sliding_window=4))
    with pytest.raises(ModelValidationError, match="sliding_window_pattern"):   # as llama.cpp
        DraftModel(llama, tm)
    lucebox = write_tiny_dflash(tmp_path / "b.gguf", tpath, TinyDraftConfig(convention="lucebox", sliding_window=4))
    dm = DraftModel(lucebox, tm)          # lucebox: no pattern -> no SWA layer
    assert dm.sliding_window == 0
    ref = R.load_draft(lucebox)
    F = _feats(ref, 20)
    dm.inject(F, 0)
    _check(dm, ref, head, F, 1, tokens=dm.draft(1, 20))


def test_bad_calls(tmp_path, targets):
    tpath, tm, _ = targets["llama"]
    path, ref = _make(tmp_path, tpath)
    dm = DraftModel(path, tm)
    with pytest.raises(EngineStateError):
        dm.logits()
    with pytest.raises(ValueError, match="columns"):
        dm.inject(np.zeros((3, 10), np.float32), 0)
    with pytest.raises(InvalidArgumentError):
        dm.inject(np.zeros((3, ref.fc.shape[1]), np.float32), -1)
    with pytest.raises(InvalidArgumentError, match="vocabulary"):
        dm.draft(tm.n_vocab, 0)
    with pytest.raises(InvalidArgumentError):
        dm.draft(1, -5)
    with pytest.raises(Exception):
        DraftModel(tpath, tm)             # a target model is not a draft


@pytest.mark.parametrize("wt", ["f16", "q8_0"])
def test_quantized_weights(tmp_path, wt):
    # q8_0 target (embedding / LM head) and an f16 / q8_0 draft: the activations are quantized
    # for the matmuls, so only a loose tolerance holds
    tpath = write_tiny_gguf(tmp_path / "tq.gguf", TinyConfig(arch="qwen35", n_layer=4, weight_type="q8_0"))
    tm, head = Model(tpath, device=DEVICE, n_threads=THREADS), R.load_target_head(tpath)
    path, ref = _make(tmp_path, tpath, weight_type=wt)
    dm = DraftModel(path, tm)
    F = _feats(ref, 30)
    dm.inject(F, 0)
    dm.draft(3, 30)
    want = R.draft_logits(ref, head, F.astype(np.float64), R.noise_block(3, ref.mask_token_id, 8))
    assert np.abs(dm.logits() - want).max() < 2e-2 * np.abs(want).max()


def test_engine_as_target_and_protocol(tmp_path, targets):
    from luce_engine import Engine
    from luce_engine.speculative import Drafter

    tpath, tm, _ = targets["llama"]
    path, _ = _make(tmp_path, tpath)
    dm = DraftModel(path, Engine(tm, n_ctx=256))
    assert dm.target is tm
    for name in ("block_size", "capture_layers", "reset", "inject", "draft"):
        assert hasattr(dm, name), name
    assert Drafter is not None
    with pytest.raises(TypeError):
        DraftModel(path, "not a model")


@pytest.mark.parametrize("ring", [4096, 24])   # 24: positions wrap around the capture ring
def test_inject_captured_equals_host_features(tmp_path, targets, ring):
    from luce_engine import Engine

    tpath, tm, _ = targets["qwen35"]
    path, _ = _make(tmp_path, tpath)
    eng = Engine(tm, n_ctx=256)
    host, device = DraftModel(path, tm), DraftModel(path, tm)
    eng.set_capture(list(host.capture_layers), output=True, ring_size=ring)
    prompt = [int(t) for t in np.random.default_rng(3).integers(0, tm.n_vocab, 50)]
    eng.prefill(prompt)
    start = 50 - min(ring, 40)
    feats = np.stack([eng.captured(p).reshape(-1) for p in range(start, 50)])
    host.inject(feats[:-5], start)
    host.inject(feats[-5:], 45)
    device.inject_captured(eng, start, 45 - start)
    device.inject_captured(eng, 45, 5)
    host.draft(7, 50)
    device.draft(7, 50)
    assert np.array_equal(host.logits(), device.logits())


def test_a_new_capture_is_read_after_the_old_one_is_freed(tmp_path, targets):
    """set_capture frees the rings and allocates new ones, maybe at the same addresses with the data
    elsewhere: the draft's injection graphs kept from before must not read the old rings (on a GPU a
    replayed CUDA graph would: freed memory). Both are rebuilt, the long one (a prompt's) and the
    step-sized one, and read the new prompt's features."""
    from luce_engine import Engine

    tpath, tm, _ = targets["qwen35"]
    path, _ = _make(tmp_path, tpath)
    eng = Engine(tm, n_ctx=128)
    host, device = DraftModel(path, tm), DraftModel(path, tm)
    rng = np.random.default_rng(5)
    n_long, n = 3 * host.block_size, 3 * host.block_size + 6
    for turn in range(3):
        eng.truncate(0)
        eng.set_capture(list(host.capture_layers), output=True, ring_size=64)   # as each reply's attach()
        prompt = [int(t) for t in rng.integers(0, tm.n_vocab, n)]
        eng.prefill(prompt)
        builds = device.stats()["n_graph_builds"]
        host.reset()
        device.reset()
        feats = np.stack([eng.captured(p).reshape(-1) for p in range(n)])
        host.inject(feats[:n_long], 0)
        host.inject(feats[n_long:], n_long)
        device.inject_captured(eng, 0, n_long)      # past one block: the long graph
        device.inject_captured(eng, n_long, 6)      # within one block: the step-sized graph
        if turn:
            assert device.stats()["n_graph_builds"] == builds + 2, "a graph on the freed rings was kept"
        host.draft(7, n)
        device.draft(7, n)
        if ON_GPU:
            np.testing.assert_allclose(device.logits(), host.logits(), rtol=1e-4, atol=1e-4)
        else:
            assert np.array_equal(host.logits(), device.logits()), f"turn {turn}"


def test_injections_of_every_size_in_turn_keep_their_graphs_right(tmp_path, targets):
    """A step's injections (up to B rows) and longer ones (a prompt's, a catch-up after plain steps) keep a
    graph each; a GPU pads a shorter long one into the graph it has (30 positions into the 70's
    128 rows). Drafts after each equal those of host features injected in the same pieces."""
    from luce_engine import Engine

    tpath, tm, _ = targets["qwen35"]
    path, _ = _make(tmp_path, tpath)
    eng = Engine(tm, n_ctx=256)
    host, device = DraftModel(path, tm), DraftModel(path, tm)
    eng.set_capture(list(host.capture_layers), output=True)
    prompt = [int(t) for t in np.random.default_rng(5).integers(0, tm.n_vocab, 120)]
    eng.prefill(prompt)
    feats = np.stack([eng.captured(p).reshape(-1) for p in range(120)])
    builds = []
    for a, b in [(0, 70), (70, 75), (75, 105), (105, 110), (110, 113), (113, 120)]:
        host.inject(feats[a:b], a)
        device.inject_captured(eng, a, b - a)
        host.draft(7, b)
        device.draft(7, b)
        if ON_GPU:
            np.testing.assert_allclose(device.logits(), host.logits(), rtol=1e-4, atol=1e-4)
        else:
            assert np.array_equal(host.logits(), device.logits())
        builds.append(device.stats()["n_graph_builds"])
    # a step-sized injection after a long one reuses its graph (no rebuild either way), and on a
    # GPU the 30-position catch-up reuses the 70's graph (the draft block's attends 256 rows throughout)
    assert builds[3] == builds[2] and builds[4] == builds[3] and builds[5] == builds[4]
    assert builds[2] == builds[1] + (0 if ON_GPU else 1)


def test_a_coarser_kv_pad_rebuilds_the_block_less_and_drafts_the_same(tmp_path, targets):
    """kv_pad: the block attends its context in steps of that many positions, so its graph is
    rebuilt when the context crosses one (on a GPU also recaptured): 600 positions cross 256-slot
    steps twice, 1024-slot ones never. Masked slots change the rounding only: the same proposals."""
    tpath, tm, _ = targets["llama"]
    path, _ = _make(tmp_path, tpath)
    feats_rng = np.random.default_rng(11)
    runs = {}
    for pad in (256, 1024):
        dm = DraftModel(path, tm, kv_pad=pad)
        feats = np.random.default_rng(11).normal(size=(600, len(dm.capture_layers) * tm.n_embd)).astype(np.float32)
        proposals, logits = [], []
        for end in range(100, 601, 50):
            dm.inject(feats[end - 50:end] if end > 100 else feats[:end], end - 50 if end > 100 else 0)
            proposals.append(list(dm.draft(3, end)))
            logits.append(dm.logits())
        runs[pad] = (proposals, np.stack(logits), dm.stats()["n_graph_builds"])
    assert runs[1024][0] == runs[256][0]
    np.testing.assert_allclose(runs[1024][1], runs[256][1], rtol=0, atol=1e-3 * np.abs(runs[256][1]).max())
    assert runs[1024][2] < runs[256][2]
    with pytest.raises(InvalidArgumentError, match="kv_pad must be a multiple of 256, not 100"):
        DraftModel(path, tm, kv_pad=100)


def test_inject_captured_refuses_what_it_cannot_read(tmp_path, targets):
    from luce_engine import Engine

    tpath, tm, _ = targets["qwen35"]
    path, _ = _make(tmp_path, tpath)
    dm = DraftModel(path, tm)
    eng = Engine(tm, n_ctx=128)
    eng.prefill([1, 2, 3, 4])
    with pytest.raises(EngineStateError, match="capture"):
        dm.inject_captured(eng, 0, 4)                     # capture is off
    eng.set_capture(list(dm.capture_layers)[:1], output=True)
    eng.truncate(0)
    eng.prefill([1, 2, 3, 4])
    with pytest.raises(EngineStateError, match="does not capture"):
        dm.inject_captured(eng, 0, 4)                     # a layer the draft reads is missing
    eng.set_capture(list(dm.capture_layers), output=False)
    with pytest.raises(EngineStateError, match="inputs"):
        dm.inject_captured(eng, 0, 4)                     # the other convention
    eng.set_capture(list(dm.capture_layers), output=True)
    eng.truncate(0)
    eng.prefill([1, 2, 3, 4])
    with pytest.raises(InvalidArgumentError, match="not in the capture ring"):
        dm.inject_captured(eng, 2, 3)                     # position 4 is not evaluated yet
    other = Engine(targets["llama"][1], n_ctx=64)
    with pytest.raises(InvalidArgumentError, match="another model"):
        dm.inject_captured(other, 0, 1)


def test_lucebox_n_target_layers_derives_the_ids(tmp_path):
    """Lucebox's converter may write only dflash.n_target_layers = N: the ids are 1 + k * ((T - 2) //
    (N - 1)) for a T-layer target, rounded down (Lucebox's loader; 27B: T = 64, N = 5 gives 1, 16,
    31, 46, 61). Here T = 10, N = 4: step 8 // 3 = 2, ids 1, 3, 5, 7. The draft then runs exactly
    as one that lists those ids."""
    from tools.tiny_dflash import lucebox_capture

    assert lucebox_capture(64, 5) == (1, 16, 31, 46, 61) and lucebox_capture(32, 5) == (1, 8, 15, 22, 29)
    tpath = write_tiny_gguf(tmp_path / "t10.gguf", TinyConfig(arch="llama", n_layer=10, seed=6))
    tm = Model(tpath, device=DEVICE, n_threads=THREADS)
    derived = write_tiny_dflash(tmp_path / "n.gguf", tpath, TinyDraftConfig(
        convention="lucebox", capture=(0, 0, 0, 0), capture_key="n_target_layers", seed=2))
    listed = write_tiny_dflash(tmp_path / "ids.gguf", tpath, TinyDraftConfig(
        convention="lucebox", capture=(1, 3, 5, 7), seed=2))
    a, b = DraftModel(derived, tm), DraftModel(listed, tm)
    assert a.capture_layers == b.capture_layers == (1, 3, 5, 7) == lucebox_capture(10, 4)
    F = np.random.default_rng(3).standard_normal((12, 4 * tm.n_embd)).astype(np.float32)
    for d in (a, b):
        d.inject(F, 0)
    assert a.draft(5, 12) == b.draft(5, 12)
    np.testing.assert_array_equal(a.logits(), b.logits())
