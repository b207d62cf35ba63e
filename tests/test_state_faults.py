"""Sessions under faults (tests/fault_child.py is the process that gets killed): SIGKILL during a
streamed reply and during a state write, two processes on one data directory, a foreign SQLite
file, a read-only states directory, and 1,000 turns in one process with flat memory. Each fails
if data is lost, a process crashes, or a half-written state file is ever loaded."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import luce_engine as le
from luce_engine import StateFileError, state_files
from tools.tiny_gguf import TinyConfig, write_tiny_gguf
from unprivileged import ReadOnly

CHILD = str(Path(__file__).with_name("fault_child.py"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("faults") / "tiny.gguf",
                           TinyConfig(tokenizer_from=le.default_model_path()))


def start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, CHILD, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def read_until(proc, predicate, timeout=120.0) -> list[str]:
    lines, t0 = [], time.monotonic()
    while time.monotonic() - t0 < timeout:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the child ended early: {proc.stderr.read()[-2000:]}")
        lines.append(line.strip())
        if predicate(lines):
            return lines
    raise AssertionError("timed out")


def check_state_files(data: Path, model_path: str) -> int:
    """Every state file in data/states loads whole or is refused; returns how many loaded."""
    model = le.Model(model_path, device="cpu", n_threads=1)
    loaded = 0
    for p in sorted((data / "states").glob("*.state")):
        e = le.Engine(model, n_ctx=2048)
        try:
            io = e.load_state(p)
        except StateFileError:
            assert e.n_past == 0
            continue
        assert io["n_tokens"] == e.n_past == len(state_files.read_tokens(p))
        loaded += 1
    return loaded


@pytest.mark.parametrize("kill_after", [1, 5, 12])
def test_kill_during_a_streamed_reply(tiny, tmp_path, kill_after):
    data = tmp_path / "data"
    proc = start("chat", tiny, data, 1000)
    lines = read_until(proc, lambda ls: sum(x == "streaming" for x in ls) >= kill_after * 20 + 3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    done = [int(x.split()[1]) for x in lines if x.startswith("done ")]
    from luce_sessions import SessionStore

    with SessionStore(data) as st:   # the database opens, every completed message is there
        assert st.recovered_from is None
        saved = {m.id for s in st.list_sessions(limit=1000) for m in st.path(s.id)}
        assert set(done) <= saved
    check_state_files(data, tiny)


def test_kill_during_a_state_write(tiny, tmp_path):
    """A process that rewrites a state file over and over is killed at several moments: the file
    is always either the complete old state or the complete new one; no temporary is ever read."""
    path = tmp_path / "states" / "1.state"
    path.parent.mkdir()
    model = le.Model(tiny, device="cpu", n_threads=1)
    for delay in (0.0, 0.01, 0.03, 0.07, 0.15):
        proc = start("write", tiny, path, 900)
        read_until(proc, lambda ls: ls[-1] == "ready")
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        e = le.Engine(model, n_ctx=1024)
        assert e.load_state(path)["n_tokens"] == 900
        assert e.tokens == [1 + (i * 7) % 200 for i in range(900)]
    from luce_tui.session_state import SessionStates

    SessionStates(tmp_path, le.Engine(model, n_ctx=256))   # the killed writers' temporaries go
    assert sorted(os.listdir(path.parent)) in (["1.state"], ["1.state", "1.state.lock"])


def test_two_processes_on_one_data_directory(tiny, tmp_path):
    data = tmp_path / "data"
    procs = [start("chat", tiny, data, 12) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    from luce_sessions import SessionStore

    with SessionStore(data) as st:
        done = {int(x.split()[1]) for out, _ in outs for x in out.splitlines() if x.startswith("done ")}
        saved = {m.id for s in st.list_sessions(limit=1000) for m in st.path(s.id)}
        assert done <= saved and len(done) == 2 * 2 * 12
    assert check_state_files(data, tiny) >= 2


def test_a_foreign_sqlite_file_is_reported_and_kept(tmp_path):
    from luce_sessions import SessionStore, SessionStoreError

    db = tmp_path / "sessions.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE recipes (name TEXT, steps TEXT)")
    con.execute("INSERT INTO recipes VALUES ('bread', 'knead')")
    con.commit()
    con.close()
    before = db.read_bytes()
    try:
        with SessionStore(tmp_path) as st:
            kept = st.recovered_from
            assert kept is not None and kept.read_bytes() == before and st.recovery_message
    except SessionStoreError as e:   # refused: the file is left exactly as it was
        assert "sessions.db" in str(e)
        assert db.read_bytes() == before


def test_a_thousand_turns_keep_memory_flat(tiny, tmp_path):
    out = subprocess.run([sys.executable, CHILD, "soak", tiny, tmp_path / "data", "1000"], capture_output=True,
                         text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-2000:]
    rss = {int(x.split()[1]): int(x.split()[2]) for x in out.stdout.splitlines() if x.startswith("rss ")}
    print("RSS KiB by turn:", rss)
    assert max(rss) == 999
    warm = rss[200]
    assert max(v for t, v in rss.items() if t >= 200) - warm < 16 * 1024, rss   # < 16 MiB after warm-up


def test_a_read_only_data_directory(tmp_path):
    """The states directory read-only for the app (tests/unprivileged.py: a 0555 directory, with root's
    override taken away): each save fails with a clear warning, once; the chat goes on and every
    message is in the database."""
    ro_run = ReadOnly(tmp_path)
    if ro_run.reason:
        pytest.skip(ro_run.reason)
    base = ro_run.dir()
    model = write_tiny_gguf(base / "tiny.gguf", TinyConfig(tokenizer_from=le.default_model_path()))
    data = base / "data"
    (data / "states").mkdir(parents=True)
    ro_run.give(data)
    (data / "states").chmod(0o555)
    try:
        out = ro_run.run([sys.executable, CHILD, "chat", str(model), str(data), "3"], timeout=300)
    finally:
        (data / "states").chmod(0o755)
    assert out.returncode == 0, out.stderr[-2000:]
    warnings = [x for x in out.stdout.splitlines() if x.startswith("warning ")]
    assert len(warnings) == 1, out.stdout
    assert "engine state" in warnings[0] and "the chat itself is" in warnings[0]
    assert "Permission denied" in warnings[0] and "states" in warnings[0]
    done = [int(x.split()[1]) for x in out.stdout.splitlines() if x.startswith("done ")]
    assert len(done) == 2 * 3
    from luce_sessions import SessionStore

    with SessionStore(data) as st:
        saved = {m.id for s in st.list_sessions(limit=100) for m in st.path(s.id)}
    assert set(done) <= saved
    assert os.listdir(data / "states") == []
