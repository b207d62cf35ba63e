"""luce_sessions: the SQLite session store (tree of messages, attachments, search, migrations,
corruption recovery, concurrent processes, export)."""

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

import luce_sessions
from luce_sessions import (ROOT, NotFoundError, SchemaTooNewError, SessionStore, provenance_runs,
                           schema as sessions_schema)


@pytest.fixture
def store(tmp_path):
    with SessionStore(tmp_path) as s:
        yield s


def _chain(store, sid, *turns):
    """Adds alternating user/assistant messages, each a child of the previous one."""
    out = []
    for i, text in enumerate(turns):
        out.append(store.add_message(sid, "user" if i % 2 == 0 else "assistant", text))
    return out


# --- sessions ----------------------------------------------------------------------------------

def test_create_list_rename_delete(store):
    a = store.create_session("first", settings={"model": "m.gguf", "temperature": 0.7})
    b = store.create_session()
    assert a.title == "first" and a.settings == {"model": "m.gguf", "temperature": 0.7}
    assert b.title is None and b.settings == {} and b.current_leaf is None and b.n_messages == 0
    _chain(store, a.id, "hello", "hi")
    # newest activity first, with message counts
    listed = store.list_sessions()
    assert [s.id for s in listed] == [a.id, b.id]
    assert [s.n_messages for s in listed] == [2, 0]
    assert listed[0].updated >= listed[0].created

    renamed = store.rename_session(b.id, "  Second\n one ")
    assert renamed.title == "Second one"
    assert [s.id for s in store.list_sessions()] == [b.id, a.id]
    assert [s.id for s in store.list_sessions(query="SECOND")] == [b.id]
    assert store.list_sessions(query="100%") == []  # LIKE wildcards are literal
    assert len(store.list_sessions(limit=1)) == 1
    assert store.update_settings(b.id, {"seed": 3}).settings == {"seed": 3}

    store.delete_session(a.id)
    assert [s.id for s in store.list_sessions()] == [b.id]
    with pytest.raises(NotFoundError):
        store.get_session(a.id)
    with pytest.raises(NotFoundError):
        store.delete_session(a.id)
    with sqlite3.connect(store.db_path) as c:  # cascade: no orphans left behind
        assert c.execute("SELECT count(*) FROM messages").fetchone()[0] == 0


def test_auto_title_from_first_user_message(store):
    s = store.create_session()
    store.add_message(s.id, "system", "You are terse.")
    store.add_message(s.id, "user", "Explain   how\nWAL mode works in SQLite, and why readers never block "
                                    "writers, in detail please")
    title = store.get_session(s.id).title
    assert "\n" not in title and len(title) <= 60 and title.startswith("Explain how WAL mode")
    assert title.endswith("…")
    store.add_message(s.id, "user", "a later message")
    assert store.get_session(s.id).title == title  # only the first one titles
    named = store.create_session("Mine")
    store.add_message(named.id, "user", "something else")
    assert store.get_session(named.id).title == "Mine"


def test_persisted_across_reopen_and_crash(tmp_path):
    # a process that dies without closing keeps every message it had added
    code = textwrap.dedent("""
        import os, sys
        from luce_sessions import SessionStore
        st = SessionStore(sys.argv[1])
        s = st.create_session("crash")
        st.add_message(s.id, "user", "question")
        st.add_message(s.id, "assistant", "answer", stats={"finish_reason": "eos"})
        os._exit(1)
    """)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    with SessionStore(tmp_path) as st:
        (s,) = st.list_sessions()
        assert [m.content for m in st.path(s.id)] == ["question", "answer"]
        assert st.path(s.id)[-1].finish_reason == "eos"


# --- the message tree --------------------------------------------------------------------------

def test_message_tree_edit_retry_and_path(store):
    s = store.create_session()
    sys_msg = store.add_message(s.id, "system", "sys")
    u1 = store.add_message(s.id, "user", "question one")
    a1 = store.add_message(s.id, "assistant", "answer one", stats={"n_tokens": 2})
    assert store.get_session(s.id).current_leaf == a1.id
    assert (u1.parent_id, a1.parent_id) == (sys_msg.id, u1.id)

    # retry: a second reply to the same prompt is a sibling, and becomes the current leaf
    a1b = store.add_message(s.id, "assistant", "answer one, again", parent_id=u1.id)
    assert [m.content for m in store.path(s.id)] == ["sys", "question one", "answer one, again"]
    assert [m.id for m in store.siblings(a1.id)] == [a1.id, a1b.id]
    assert [m.id for m in store.children(u1.id)] == [a1.id, a1b.id]

    # edit: a new sibling of the user message; the old branch is kept
    u1e = store.edit_message(u1.id, "question one, edited")
    assert u1e.parent_id == sys_msg.id and u1e.role == "user"
    a2 = store.add_message(s.id, "assistant", "edited answer")
    assert [m.id for m in store.path(s.id)] == [sys_msg.id, u1e.id, a2.id]
    assert [m.id for m in store.path(s.id, a1.id)] == [sys_msg.id, u1.id, a1.id]
    assert store.get_session(s.id).n_messages == 6

    # switching branches
    store.set_current_leaf(s.id, a1.id)
    assert store.path(s.id)[-1].id == a1.id
    assert store.latest_leaf(u1.id) == a1b.id
    assert [m.id for m in store.switch_branch(u1e.id)] == [sys_msg.id, u1e.id, a2.id]
    assert store.get_session(s.id).current_leaf == a2.id
    store.set_current_leaf(s.id, None)
    assert store.path(s.id) == []

    # editing a root message makes a second root
    root2 = store.edit_message(sys_msg.id, "another system prompt")
    assert root2.parent_id is None
    assert [m.id for m in store.roots(s.id)] == [sys_msg.id, root2.id]
    assert [m.id for m in store.siblings(root2.id)] == [sys_msg.id, root2.id]
    root3 = store.add_message(s.id, "user", "fresh start", parent_id=ROOT)
    assert store.path(s.id) == [store.get_message(root3.id)]


def test_add_message_validation(store):
    s, other = store.create_session(), store.create_session()
    m = store.add_message(other.id, "user", "elsewhere")
    with pytest.raises(ValueError, match="role"):
        store.add_message(s.id, "tool", "x")
    with pytest.raises(ValueError, match="another session"):
        store.add_message(s.id, "user", "x", parent_id=m.id)
    with pytest.raises(NotFoundError):
        store.add_message(s.id, "user", "x", parent_id=10_000)
    with pytest.raises(NotFoundError):
        store.add_message(10_000, "user", "x")
    with pytest.raises(NotFoundError, match="add_attachment"):
        store.add_message(s.id, "user", "x", attachments=["0" * 64])
    with pytest.raises(ValueError):
        store.set_current_leaf(s.id, m.id)
    # nothing of the failed adds was kept
    assert store.get_session(s.id).n_messages == 0


def test_partial_reply_stats_and_provenance(store):
    s = store.create_session()
    store.add_message(s.id, "user", "count")
    spans = [("one, ", False), ("two", True), (", th", True), ("ree", False)]
    part = store.add_partial_reply(s.id, "one, two, three", stats={"n_tokens": 7, "tok_per_s": 41.5},
                                   provenance=spans)
    got = store.path(s.id)[-1]
    assert got.id == part.id and got.role == "assistant" and got.cancelled
    assert got.stats == {"n_tokens": 7, "tok_per_s": 41.5, "finish_reason": "cancelled"}
    assert got.provenance == [(5, False), (7, True), (3, False)]
    assert got.spans() == [("one, ", False), ("two, th", True), ("ree", False)]
    assert provenance_runs([(3, 1), (0, 0), (2, True), ["ab", False]]) == [(5, True), (2, False)]
    with pytest.raises(ValueError):
        provenance_runs([(-1, True)])


def test_threads_share_one_store(store):
    s = store.create_session()
    errors = []

    def writer(tag):
        try:
            for i in range(50):
                store.add_message(s.id, "user", f"{tag} {i}")
                store.path(s.id)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(store.path(s.id)) == 100  # one unbroken chain: appends never raced


# --- attachments -------------------------------------------------------------------------------

def test_attachments_dedup_by_sha256(store):
    data = "def f():\n    return 1\n"
    a = store.add_attachment("f.py", data)
    b = store.add_attachment("copy.py", data.encode(), n_tokens=9)
    assert a.sha256 == b.sha256 == hashlib.sha256(data.encode()).hexdigest()
    assert (b.name, b.n_bytes, b.n_tokens) == ("copy.py", len(data), 9)  # count filled in
    assert store.get_attachment(a.sha256).name == "f.py"  # the blob keeps its first name
    assert store.get_attachment(a.sha256).data == data.encode()
    assert store.get_attachment(a.sha256).text == data
    assert store.get_attachment(a.sha256, with_data=False).data is None
    with sqlite3.connect(store.db_path) as c:
        assert c.execute("SELECT count(*) FROM attachments").fetchone()[0] == 1

    s1, s2 = store.create_session(), store.create_session()
    other = store.add_attachment("img.bin", bytes(range(256)))
    m1 = store.add_message(s1.id, "user", "", attachments=[b, other])
    m2 = store.add_message(s2.id, "user", "look", attachments=[a.sha256])
    assert [x.name for x in m1.attachments] == ["copy.py", "img.bin"]  # name as attached here
    assert [x.name for x in m2.attachments] == ["f.py"]
    assert store.get_session(s1.id).title == "copy.py"  # attachment-only first message
    assert store.path(s1.id)[0].attachments == m1.attachments
    retried = store.edit_message(m1.id, "now with text")  # keeps the attachments
    assert [x.sha256 for x in retried.attachments] == [a.sha256, other.sha256]

    pending = store.add_attachment("draft.txt", "not sent yet")
    again = store.add_attachment("again.bin", bytes(range(256)))  # being composed elsewhere
    store.delete_session(s1.id)
    assert store.get_attachment(a.sha256)  # still used by s2
    assert store.get_attachment(pending.sha256)  # not linked yet: kept
    with pytest.raises(NotFoundError):
        store.get_attachment(other.sha256)  # only s1 used it
    m3 = store.add_message(s2.id, "user", "late", attachments=[again])  # the record restores it
    assert store.get_attachment(m3.attachments[0].sha256).data == bytes(range(256))


# --- search ------------------------------------------------------------------------------------

def test_search_fts(store):
    assert store.fts_enabled
    s1 = store.create_session("cooking")
    s2 = store.create_session("physics")
    _chain(store, s1.id, "How long should I boil an egg?", "About nine minutes for a hard egg.")
    p = _chain(store, s2.id, "What is entropy?", "Entropy measures disorder; eggs cannot unboil.")
    hits = store.search("egg")
    assert {(h.session_id, h.role) for h in hits} == {(s1.id, "user"), (s1.id, "assistant"),
                                                     (s2.id, "assistant")}  # prefix: eggs
    hit = next(h for h in hits if h.message_id == p[1].id)
    assert "**eggs**" in hit.snippet and hit.session_title == "physics"
    assert [h.message_id for h in store.search("entropy disorder")] == [p[1].id]  # all words
    assert [h.message_id for h in store.search("egg", session_id=s2.id)] == [p[1].id]
    assert store.search('boil" (') and store.search("") == []  # query syntax is not exposed
    assert len(store.search("egg", limit=1)) == 1
    store.delete_session(s1.id)
    assert [h.session_id for h in store.search("egg")] == [s2.id]


def test_search_like_fallback_and_fts_rebuild(tmp_path, monkeypatch):
    with SessionStore(tmp_path) as st:
        s = st.create_session()
        st.add_message(s.id, "user", "the quick brown fox")
    # a SQLite build without FTS5 opens the same file: writes still work, search uses LIKE
    monkeypatch.setattr(sessions_schema, "fts5_available", lambda conn: False)
    with SessionStore(tmp_path) as st:
        assert not st.fts_enabled
        st.add_message(s.id, "user", "a lazy dog_100%")
        assert [h.snippet for h in st.search("LAZY")] == ["a **lazy** dog_100%"]
        assert len(st.search("quick")) == 1
        assert st.search("dog_1") and not st.search("dogx1")  # _ is literal
    monkeypatch.undo()
    with SessionStore(tmp_path) as st:  # FTS5 again: the index catches up with both messages
        assert st.fts_enabled
        assert len(st.search("lazy")) == 1 and len(st.search("fox")) == 1


# --- schema versions ---------------------------------------------------------------------------

def _user_version(path):
    with sqlite3.connect(path) as c:
        return c.execute("PRAGMA user_version").fetchone()[0]


def test_user_version_and_upgrade(tmp_path, monkeypatch):
    with SessionStore(tmp_path) as st:
        s = st.create_session("old")
        st.add_message(s.id, "user", "kept")
        db = st.db_path
    assert _user_version(db) == luce_sessions.schema_version() == len(sessions_schema.MIGRATIONS)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    def v_next(conn):
        conn.execute("ALTER TABLE sessions ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")

    monkeypatch.setattr(sessions_schema, "MIGRATIONS", [*sessions_schema.MIGRATIONS, v_next])
    with SessionStore(tmp_path) as st:
        assert [m.content for m in st.path(s.id)] == ["kept"]
    assert _user_version(db) == len(sessions_schema.MIGRATIONS)
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT pinned FROM sessions").fetchall() == [(0,)]


def test_failed_migration_leaves_old_version(tmp_path, monkeypatch):
    SessionStore(tmp_path).close()
    known = luce_sessions.schema_version()

    def broken(conn):
        conn.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("boom")

    monkeypatch.setattr(sessions_schema, "MIGRATIONS", [*sessions_schema.MIGRATIONS, broken])
    with pytest.raises(RuntimeError, match="boom"):
        SessionStore(tmp_path)
    db = tmp_path / "sessions.db"
    assert _user_version(db) == known
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT 1 FROM sqlite_master WHERE name = 'half_done'").fetchone() is None


def test_newer_schema_refused_without_modification(tmp_path):
    SessionStore(tmp_path).close()
    db = tmp_path / "sessions.db"
    with sqlite3.connect(db) as c:
        c.execute(f"PRAGMA user_version = {luce_sessions.schema_version() + 5}")
    before = db.read_bytes()
    files = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SchemaTooNewError, match="newer luce-chat") as exc:
        SessionStore(tmp_path)
    assert "not changed" in str(exc.value)
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == files


# --- corruption --------------------------------------------------------------------------------

def _truncated(path):
    with SessionStore(path.parent) as st:
        s = st.create_session()
        for i in range(40):
            st.add_message(s.id, "user", f"message {i} " + "x" * 3000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("kind", ["random", "text", "truncated", "tiny"])
def test_corrupt_database_is_kept_and_replaced(tmp_path, kind):
    db = tmp_path / "sessions.db"
    if kind == "random":
        db.write_bytes(os.urandom(64 * 1024))
    elif kind == "text":
        db.write_text("these are my notes, not a database\n" * 20)
    elif kind == "tiny":
        db.write_bytes(b"SQLite")
    else:
        _truncated(db)
    original = db.read_bytes()

    with SessionStore(tmp_path) as st:
        assert st.recovered_from is not None
        assert st.recovered_from.name.startswith("sessions.db.corrupt-")
        assert st.recovered_from.read_bytes() == original  # user data kept
        assert str(st.recovered_from) in st.recovery_message
        assert st.list_sessions() == []
        s = st.create_session()
        st.add_message(s.id, "user", "works again")
        assert [h.message_id for h in st.search("works")]
    with SessionStore(tmp_path) as st:  # the new file is healthy
        assert st.recovered_from is None and len(st.list_sessions()) == 1


def test_second_recovery_keeps_both_files(tmp_path):
    for _ in range(2):
        (tmp_path / "sessions.db").write_text("junk")
        SessionStore(tmp_path).close()
    assert len(list(tmp_path.glob("sessions.db.corrupt-*"))) == 2


# --- concurrent processes ----------------------------------------------------------------------

_WRITER = textwrap.dedent("""
    import sys, time
    from luce_sessions import SessionStore
    data_dir, shared, tag, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    st = SessionStore(data_dir, busy_timeout=60)  # generous: a slow disk must not fail the test
    own = st.create_session(tag)
    for i in range(n):
        st.add_message(shared, "user", f"{tag} {i}")    # appends to the shared session's leaf
        st.add_message(own.id, "assistant", f"{tag} own {i}")
        time.sleep(0.001)  # a writer that pauses, as a chat does, lets the other one in
    st.close()
""")


def test_two_processes_write_concurrently(tmp_path):
    n = 200
    with SessionStore(tmp_path) as st:
        shared = st.create_session("shared").id
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), str(shared), tag, str(n)],
                              stderr=subprocess.PIPE, text=True) for tag in ("a", "b")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with SessionStore(tmp_path) as st:
        chain = st.path(shared)
        # every append saw the leaf the other process had just written: one chain, nothing lost
        assert len(chain) == 2 * n == st.get_session(shared).n_messages
        assert sorted(m.content for m in chain) == sorted(f"{t} {i}" for t in "ab" for i in range(n))
        for tag in "ab":
            assert [m.content for m in st.path(next(s.id for s in st.list_sessions(query=tag)
                                                    if s.title == tag))] == \
                [f"{tag} own {i}" for i in range(n)]


def test_two_processes_open_a_new_store_at_once(tmp_path):
    """Processes that open one new history at the same instant all get it: the switch to WAL can meet
    SQLITE_BUSY without SQLite's busy handler, and the open retries (before, ~15% of such opens
    failed with "database is locked")."""
    code = textwrap.dedent("""
        import sys, time
        from luce_sessions import SessionStore
        start = float(sys.argv[2])
        while time.time() < start:   # all open at once
            pass
        st = SessionStore(sys.argv[1])
        s = st.create_session()
        for i in range(20):
            st.add_message(s.id, "user", str(i))
    """)
    import time

    for round_ in range(4):
        data = tmp_path / str(round_)
        start = time.time() + 1.5   # after every interpreter has started
        procs = [subprocess.Popen([sys.executable, "-c", code, str(data), str(start)], stderr=subprocess.PIPE,
                                  text=True) for _ in range(4)]
        for p in procs:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
        with SessionStore(data) as st:
            assert [s.n_messages for s in st.list_sessions()] == [20, 20, 20, 20]
            assert st.recovered_from is None


def test_a_history_created_while_another_store_opens_is_not_set_aside(tmp_path, monkeypatch):
    """Another process creating the history between this store's reading of the schema version
    and of the table list once made the new history look foreign: it was moved aside while the
    other process wrote to it (two windows started at once each got their own, half the history
    lost). The store under test is paused right after reading the version; the other one creates
    the history and writes a message meanwhile."""
    real = sessions_schema.user_version
    other_done, other_session = threading.Event(), []

    def create_other():
        with SessionStore(tmp_path) as other:
            s = other.create_session("other")
            other.add_message(s.id, "user", "written while the first store opened")
            other_session.append(s.id)
        other_done.set()

    def paused(conn):
        version = real(conn)
        if threading.current_thread() is threading.main_thread() and not other_session:
            threading.Thread(target=create_other, daemon=True).start()
            other_done.wait(2.0)   # a snapshot read keeps the other writer waiting until it ends
        return version

    monkeypatch.setattr(sessions_schema, "user_version", paused)
    with SessionStore(tmp_path) as st:
        assert st.recovered_from is None
        assert other_done.wait(20)
        assert [m.content for m in st.path(other_session[0])] == ["written while the first store opened"]
    assert not list(tmp_path.glob("*.corrupt-*"))


# --- export ------------------------------------------------------------------------------------

def test_export_markdown_and_json(store):
    s = store.create_session(settings={"model": "SmolLM2-135M", "temperature": 0.7})
    store.add_message(s.id, "system", "Be brief.")
    att = store.add_attachment("notes.txt", "some notes", n_tokens=3)
    u = store.add_message(s.id, "user", "Summarise my notes", attachments=[att])
    store.add_message(s.id, "assistant", "Old answer")
    store.add_message(s.id, "assistant", "They are notes.", parent_id=u.id,
                      stats={"n_tokens": 4, "tok_per_s": 123.456, "prefill_ms": 13650.4, "finish_reason": "eos"},
                      provenance=[(5, True), (10, False)])

    md = store.export_markdown(s.id)
    assert md.startswith("# Summarise my notes\n")
    assert md.index("## System") < md.index("## User") < md.index("## Assistant")
    assert "They are notes." in md and "Old answer" not in md
    assert "`notes.txt` (10 bytes, 3 tokens, sha256 " + att.sha256[:12] in md
    assert "tok_per_s=123.5" in md and "finish_reason=eos" in md and "drafted=33%" in md
    assert "prefill_ms=13,650.4" in md and "temperature=0.7" in md   # plain decimals, not 1.365e+04
    assert "model=SmolLM2-135M" in md
    assert "Old answer" in store.export_markdown(s.id, leaf=u.id + 1)

    doc = store.export_json(s.id)
    json.dumps(doc)  # JSON-ready
    assert doc["format"] == "luce-chat-session" and doc["session"]["settings"]["temperature"] == 0.7
    assert [m["role"] for m in doc["messages"]] == ["system", "user", "assistant"]
    assert doc["leaf"] == doc["messages"][-1]["id"]
    assert doc["messages"][1]["attachments"] == [
        {"sha256": att.sha256, "name": "notes.txt", "n_bytes": 10, "n_tokens": 3}]
    assert doc["messages"][2]["stats"]["finish_reason"] == "eos"
    assert doc["messages"][2]["provenance"] == [[5, True], [10, False]]
    assert "content" not in doc["messages"][1]["attachments"][0]


def test_markdown_export_summarises_compressed_attachments(store):
    # PFlash keeps each attachment's excerpt in the user message's stats: the Markdown export
    # names the compression and never prints the excerpt
    s = store.create_session()
    att = store.add_attachment("repo.txt", "x" * 1000, n_tokens=250)
    excerpt = "EXCERPT-" * 20
    store.add_message(s.id, "user", "Where is main?", attachments=[att],
                      stats={"pflash": [{"compressed": excerpt, "compression": {"n_original": 183412, "n_kept": 9170}}]})
    md = store.export_markdown(s.id)
    assert "`repo.txt` (1000 bytes, 250 tokens, sha256 " + att.sha256[:12] + "), compressed 183,412 → 9,170 tokens" in md
    assert "EXCERPT" not in md and "pflash" not in md


# --- where the file lives ----------------------------------------------------------------------

def test_data_dir_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LUCE_DATA_DIR", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert luce_sessions.default_data_dir() == tmp_path / "home" / ".local" / "share" / "luce"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert luce_sessions.default_data_dir() == tmp_path / "xdg" / "luce"
    monkeypatch.setenv("LUCE_DATA_DIR", str(tmp_path / "env"))
    with SessionStore() as st:
        assert st.db_path == tmp_path / "env" / "sessions.db" and st.db_path.exists()
    with SessionStore(tmp_path / "flag") as st:  # --data-dir wins over the environment
        assert st.db_path == tmp_path / "flag" / "sessions.db"
    assert luce_sessions.db_path() == tmp_path / "env" / "sessions.db"
