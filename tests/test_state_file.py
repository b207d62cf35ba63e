"""Engine state files (luce_engine.state_files): a context saved and loaded again continues exactly
as the never-closed one (the next greedy reply token for token), on tiny random GGUFs written here
(dense and qwen35 hybrid, every KV cache type) and on the real SmolLM2; appends are crash-safe;
every kind of mismatch is refused with its error before the engine changes; truncation and
corruption anywhere in a file are caught; write failures leave the old file and the engine intact."""
from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from luce_engine import (Engine, Model, StateDamagedError, StateIOError, StateMismatchError,
                         StateNewerFormatError)
from luce_engine import state_files
from reference import DEVICE, THREADS, smollm2_path
from tools.tiny_gguf import TinyConfig, write_tiny_gguf
from unprivileged import ReadOnly

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

KV_TYPES = ["f16", "q8_0", "q4_0"]
ARCHS = {
    "qwen3": dict(arch="qwen3", n_vocab=256, head_dim=32, seed=3),
    "qwen35": dict(arch="qwen35", n_vocab=256, n_layer=4, head_dim=32, seed=5),
}
HEADER = 4096          # state_file.h: the identity block at 0, commit records at 1024 and 2048
IDENTITY_BYTES = 136   # the identity block with its checksum
RECORD_BYTES = 88


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("state")
    return {name: Model(write_tiny_gguf(d / f"{name}.gguf", TinyConfig(**cfg)), device=DEVICE, n_threads=THREADS)
            for name, cfg in ARCHS.items()}


def prompt(n, seed=0, vocab=256):
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, n)]


def greedy(engine, tokens=None, n=24):
    return [t for r in engine.generate(tokens, max_tokens=n, stop_token_ids=()) for t in r.tokens]


def engine(model, kv="f16", n_ctx=512, **kw):
    return Engine(model, n_ctx=n_ctx, cache_type_k=kv, cache_type_v=kv, **kw)


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("kv", KV_TYPES)
@pytest.mark.parametrize("staged", [False, True], ids=["in-place", "staged"])
def test_round_trip_continues_exactly(models, arch, kv, staged, tmp_path):
    m = models[arch]
    a = engine(m, kv)
    a.prefill(prompt(300, seed=1))
    greedy(a, n=7)                              # a context that ends after a step, not a prefill
    path = tmp_path / "s.state"
    io = a.save_state(path)
    assert io["n_tokens"] == a.n_past and not io["appended"]
    assert os.path.getsize(path) == io["bytes"] == a.state_bytes()
    before = a.tokens
    follow = prompt(20, seed=2)
    want = greedy(a, None, 10) + greedy(a, follow, 24)   # the never-closed session

    b = engine(m, kv, debug_staged_state_io=staged)   # on a CPU: also through the GPU's staging ring
    got_io = b.load_state(path)
    assert got_io["n_tokens"] == len(before) and b.tokens == before
    assert greedy(b, None, 10) + greedy(b, follow, 24) == want


@pytest.mark.parametrize("arch", list(ARCHS))
def test_appends_only_the_new_rows_and_loads_the_same(models, arch, tmp_path):
    m = models[arch]
    a = engine(m)
    path = tmp_path / "s.state"
    a.prefill(prompt(200, seed=3))
    full = a.save_state(path)["bytes"]
    for turn in range(4):
        greedy(a, prompt(12, seed=10 + turn), 8)
        io = a.save_state(path)
        info = state_files.read_info(path)
        assert info.n_tokens == a.n_past and info.live_bytes <= info.file_bytes
        # an append adds little; once the replaced blobs outweigh half the state, the file is rewritten
        assert (io["appended"] and io["bytes"] < full / 2) or (turn > 0 and info.file_bytes == info.live_bytes), io
    assert state_files.read_tokens(path) == a.tokens
    want = greedy(a, prompt(9, seed=99), 16)
    b = engine(m)
    b.load_state(path)
    assert greedy(b, prompt(9, seed=99), 16) == want


def test_dead_bytes_are_compacted(models, tmp_path):
    a = engine(models["qwen35"])
    path = tmp_path / "s.state"
    a.prefill(prompt(8, seed=4))
    a.save_state(path)
    for turn in range(30):   # each append supersedes a blob: the file is rewritten before it doubles
        a.prefill(prompt(2, seed=turn))
        a.save_state(path)
        info = state_files.read_info(path)
        assert info.file_bytes <= 2 * info.live_bytes + 4096


def test_a_save_that_is_not_a_prefix_rewrites_the_file(models, tmp_path):
    a = engine(models["qwen3"])
    path = tmp_path / "s.state"
    a.prefill(prompt(100, seed=5))
    a.save_state(path)
    a.truncate(50)
    a.prefill(prompt(30, seed=6))
    io = a.save_state(path)
    assert not io["appended"]
    assert state_files.read_tokens(path) == a.tokens
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]   # the temporary file was renamed


def _record_slots(data: bytes) -> list[int]:
    """The sequence numbers of both commit records."""
    return [struct.unpack_from("<Q", data, at)[0] for at in (1024, 2048)]


@pytest.mark.parametrize("arch", list(ARCHS))
def test_an_append_cut_short_leaves_the_previous_state(models, arch, tmp_path):
    """A crash during an append: its data may be partly on disk, its record not written (or torn).
    Every such file must load as the state before the append."""
    m = models[arch]
    a = engine(m)
    path = tmp_path / "s.state"
    a.prefill(prompt(120, seed=7))
    a.save_state(path)
    old = path.read_bytes()
    old_tokens = a.tokens
    want = greedy(engine_loaded(m, path), prompt(6, seed=8), 12)
    greedy(a, prompt(10, seed=9), 6)
    assert a.save_state(path)["appended"]
    new = path.read_bytes()
    seqs = _record_slots(new)
    slot = 1024 if seqs[0] > seqs[1] else 2048   # the record the append wrote
    crashed = []
    for cut in (len(old), len(old) + 100, (len(old) + len(new)) // 2, len(new) - 1, len(new)):
        f = bytearray(new[:cut])
        f[slot:slot + RECORD_BYTES] = old[slot:slot + RECORD_BYTES]   # the record not yet written
        crashed.append(f)
    torn = bytearray(new)
    torn[slot + 40:slot + RECORD_BYTES] = old[slot + 40:slot + RECORD_BYTES]   # half of it written
    crashed.append(torn)
    for i, f in enumerate(crashed):
        p = tmp_path / f"crash{i}.state"
        p.write_bytes(bytes(f))
        b = engine_loaded(m, p)
        assert b.tokens == old_tokens, i
        assert greedy(b, prompt(6, seed=8), 12) == want, i


def engine_loaded(model, path, kv="f16"):
    e = engine(model, kv)
    e.load_state(path)
    return e


def _continues_unchanged(e, tokens, want_next):
    assert e.tokens == tokens
    assert greedy(e, prompt(5, seed=77), 8) == want_next


def _unchanged_reference(model, tokens):
    r = engine(model)
    r.prefill(tokens)
    return greedy(r, prompt(5, seed=77), 8)


def test_mismatches_are_refused_and_leave_the_engine_as_it_was(models, tmp_path):
    q3, q35 = models["qwen3"], models["qwen35"]
    a = engine(q3)
    a.prefill(prompt(300, seed=11))
    path = tmp_path / "s.state"
    a.save_state(path)
    other_seed = Model(write_tiny_gguf(tmp_path / "o.gguf", TinyConfig(**dict(ARCHS["qwen3"], seed=4))),
                       device=DEVICE, n_threads=THREADS)
    mine = prompt(40, seed=12)
    cases = [
        (engine(q35), "another model"),
        (engine(other_seed), "another model"),             # same shapes, other weights: the hash differs
        (engine(q3, "q8_0"), "KV cache of type f16/f16"),
        (Engine(q3, n_ctx=256), "more than this engine's context"),
        (Engine(q3, n_ctx=512, kv_rotation=False, cache_type_k="f16", cache_type_v="f16"), None),
    ]
    for e, words in cases:
        e.prefill(mine)
        want = _unchanged_reference(e.model, mine) if e.model is not q35 else None
        if words is None:   # rotation only matters for quantized caches, but it is part of the identity
            e2 = Engine(q3, n_ctx=512, kv_rotation=False, cache_type_k="q8_0", cache_type_v="q8_0")
            qa = Engine(q3, n_ctx=512, cache_type_k="q8_0", cache_type_v="q8_0")
            qa.prefill(prompt(10, seed=13))
            qa.save_state(tmp_path / "q.state")
            with pytest.raises(StateMismatchError, match="rotation"):
                e2.load_state(tmp_path / "q.state")
            continue
        with pytest.raises(StateMismatchError, match=words):
            e.load_state(path)
        if want is not None:
            _continues_unchanged(e, mine, want)
        else:
            assert e.tokens == mine


def test_a_newer_format_is_refused(models, tmp_path):
    a = engine(models["qwen3"])
    a.prefill(prompt(20, seed=14))
    path = tmp_path / "s.state"
    a.save_state(path)
    data = bytearray(path.read_bytes())
    struct.pack_into("<II", data, 8, 2, 0xFFFFFFFF ^ 2)   # the format version after the magic, and its complement
    path.write_bytes(bytes(data))
    with pytest.raises(StateNewerFormatError, match="format version 2"):
        engine(models["qwen3"]).load_state(path)
    with pytest.raises(StateNewerFormatError):
        state_files.read_info(path)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_truncation_anywhere_is_caught_before_the_engine_changes(models, arch, tmp_path):
    m = models[arch]
    a = engine(m)
    a.prefill(prompt(150, seed=15))
    path = tmp_path / "s.state"
    a.save_state(path)
    data = path.read_bytes()
    mine = prompt(30, seed=16)
    e = engine(m)
    e.prefill(mine)
    want = _unchanged_reference(m, mine)
    cuts = sorted({0, 7, 100, 1100, 2100, HEADER - 1, HEADER, HEADER + 1} |
                  {int(x) for x in np.linspace(HEADER, len(data) - 1, 23)})
    for cut in cuts:
        p = tmp_path / "cut.state"
        p.write_bytes(data[:cut])
        with pytest.raises(StateDamagedError):
            e.load_state(p)
    _continues_unchanged(e, mine, want)


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("staged", [False, True], ids=["in-place", "staged"])
def test_corruption_anywhere_is_caught(models, arch, staged, tmp_path):
    m = models[arch]
    a = engine(m)
    a.prefill(prompt(150, seed=17))
    path = tmp_path / "s.state"
    a.save_state(path)
    data = path.read_bytes()
    live = [3, 8, 20, 60, IDENTITY_BYTES - 1, 2048 + 3, 2048 + RECORD_BYTES - 1] + \
        [int(x) for x in np.linspace(HEADER, len(data) - 1, 41)]
    for at in live:
        f = bytearray(data)
        f[at] ^= 0x10
        p = tmp_path / "bad.state"
        p.write_bytes(bytes(f))
        e = engine(m, debug_staged_state_io=staged)
        e.prefill(prompt(5, seed=18))
        with pytest.raises(StateDamagedError):
            e.load_state(p)
        # either untouched (caught from the header or index) or emptied (caught in the payload)
        assert e.n_past in (0, 5), at
    # the unused slot and padding of the header carry nothing: damage there does not matter
    f = bytearray(data)
    for at in (IDENTITY_BYTES + 10, 1024 + 5, 3000):
        f[at] ^= 0xFF
    p = tmp_path / "pad.state"
    p.write_bytes(bytes(f))
    assert engine_loaded(m, p).tokens == a.tokens


def test_not_a_state_file(models, tmp_path):
    e = engine(models["qwen3"])
    with pytest.raises(StateIOError, match="cannot open"):
        e.load_state(tmp_path / "missing.state")
    with pytest.raises(StateDamagedError, match="not a luce state file"):
        e.load_state(models["qwen3"].path)       # a GGUF
    (tmp_path / "empty.state").write_bytes(b"")
    with pytest.raises(StateDamagedError, match="shorter"):
        state_files.read_info(tmp_path / "empty.state")
    with pytest.raises(StateDamagedError, match="not a regular file"):
        e.load_state(tmp_path)


def test_a_second_writer_is_refused(models, tmp_path):
    a = engine(models["qwen3"])
    a.prefill(prompt(40, seed=19))
    path = tmp_path / "s.state"
    a.save_state(path)
    before = path.read_bytes()
    with open(str(path) + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # what another process writing this file holds
        a.prefill(prompt(4, seed=20))
        with pytest.raises(StateIOError, match="another process"):
            a.save_state(path)
    assert path.read_bytes() == before
    assert a.save_state(path)["appended"]   # once the other writer is done


WRITE_FAILS = textwrap.dedent("""
    import os, resource, signal, sys
    from luce_engine import Engine, Model, StateIOError
    model_path, path, n_old = sys.argv[1], sys.argv[2], int(sys.argv[3])
    m = Model(model_path, device="cpu", n_threads=1)
    e = Engine(m, n_ctx=512)
    info = e.load_state(path)
    e.prefill(list(range(1, 200)))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)          # a write past the limit fails with EFBIG
    limit = os.path.getsize(path) + 4096
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    for append in (True, False):
        try:
            e.save_state(path, append=append)
            print("saved?!")
        except StateIOError as err:
            print("refused:", err)
    toks = [r.tokens for r in e.generate(None, max_tokens=4, stop_token_ids=())]   # still works
    print("continued", len(toks))
""")


def test_a_failed_write_keeps_the_old_file_and_the_engine(models, tmp_path):
    """The disk running full during a save, simulated by a file-size limit (RLIMIT_FSIZE) in a
    child process: the write fails in the kernel exactly where a full disk would fail it."""
    m = models["qwen3"]
    a = engine(m)
    a.prefill(prompt(64, seed=21))
    path = tmp_path / "s.state"
    a.save_state(path)
    before = path.read_bytes()
    out = subprocess.run([sys.executable, "-c", WRITE_FAILS, m.path, str(path), "64"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("refused:") == 2 and "File too large" in out.stdout, out.stdout
    assert "continued 4" in out.stdout
    assert path.read_bytes() == before
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]
    assert engine_loaded(m, path).tokens == a.tokens


SAVE_INTO = textwrap.dedent("""
    import sys
    from luce_engine import Engine, Model, StateIOError
    m = Model(sys.argv[1], device="cpu", n_threads=1)
    e = Engine(m, n_ctx=256)
    e.prefill(list(range(1, 17)))
    for append in (True, False):
        try:
            e.save_state(sys.argv[2], append=append)
            print("saved?!")
        except StateIOError as err:
            print("refused:", err)
    toks = [t for r in e.generate(None, max_tokens=4, stop_token_ids=()) for t in r.tokens]   # still works
    print("continued", len(toks), e.n_past)
""")


def test_a_read_only_directory(tmp_path):
    """The child saving into a 0555 directory is one the mode binds (tests/unprivileged.py: as root,
    without CAP_DAC_OVERRIDE, or as nobody)."""
    ro_run = ReadOnly(tmp_path)
    if ro_run.reason:
        pytest.skip(ro_run.reason)
    base = ro_run.dir()
    model = write_tiny_gguf(base / "t.gguf", TinyConfig(**ARCHS["qwen3"]))
    ro = base / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        out = ro_run.run([sys.executable, "-c", SAVE_INTO, str(model), str(ro / "s.state")], timeout=120)
    finally:
        ro.chmod(0o755)
    assert out.returncode == 0, out.stderr[-2000:]
    refused = [x for x in out.stdout.splitlines() if x.startswith("refused:")]
    assert len(refused) == 2 and all("s.state" in x and "Permission denied" in x for x in refused), out.stdout
    assert "continued 4 " in out.stdout
    assert os.listdir(ro) == []


def test_smollm2_next_turn_equals_the_never_closed_session(tmp_path):
    m = Model(smollm2_path(), device=DEVICE, n_threads=THREADS)
    tok, tpl = m.tokenizer, m.chat_template
    chat = [{"role": "user", "content": "Name three colours of the rainbow."}]
    a = Engine(m, n_ctx=1024)
    reply = "".join(r.text for r in a.generate(tok.encode(tpl.render(chat)), max_tokens=24))
    chat.append({"role": "assistant", "content": reply})
    path = tmp_path / "s.state"
    a.save_state(path)
    nxt = tok.encode("<|im_end|>\n<|im_start|>user\nAnd two more?<|im_end|>\n<|im_start|>assistant\n")
    want = greedy(a, nxt, 24)
    b = Engine(m, n_ctx=1024)
    b.load_state(path)
    assert b.tokens == a.tokens[:len(b.tokens)]
    assert b.stats()["n_prefill_tokens"] == 0
    assert greedy(b, nxt, 24) == want
    assert b.stats()["n_prefill_tokens"] == len(nxt)   # the history was not prefilled again


def test_speculation_continues_after_a_load(tmp_path):
    draft_mod = pytest.importorskip("luce_engine.draft")
    from luce_engine.speculative import ChainSpeculator
    from tools.tiny_dflash import TinyDraftConfig, write_tiny_dflash

    cfg = TinyConfig(arch="llama", n_vocab=256, head_dim=32, seed=31)
    m = Model(write_tiny_gguf(tmp_path / "t.gguf", cfg), device=DEVICE, n_threads=THREADS)
    draft = draft_mod.DraftModel(write_tiny_dflash(tmp_path / "d.gguf", cfg, TinyDraftConfig(block_size=8, seed=4)), m)
    a = Engine(m, n_ctx=512, n_verify_max=8)
    spec_a = ChainSpeculator(a, draft, capture_ring=256)
    p = prompt(40, seed=23)
    first = [t for r in a.generate(p, max_tokens=32, stop_token_ids=(), speculator=spec_a) for t in r.tokens]
    path = tmp_path / "s.state"
    a.save_state(path)
    assert state_files.read_info(path).n_capture_rows == min(a.n_past, 256)
    follow = prompt(6, seed=24)
    plain = Engine(m, n_ctx=512)
    plain.prefill(p + first)
    want = greedy(plain, follow, 40)

    b = Engine(m, n_ctx=512, n_verify_max=8)
    spec_b = ChainSpeculator(b, draft, capture_ring=256)
    spec_b.prepare()                      # the capture on, so the rows go back into the ring
    io = b.load_state(path)
    assert io["n_captured"] == min(a.n_past, 256)
    spec_b.resumed(io["n_captured"])
    got = [t for r in b.generate(follow, max_tokens=40, stop_token_ids=(), speculator=spec_b) for t in r.tokens]
    assert got == want
    assert spec_b.stats.n_steps > 0
