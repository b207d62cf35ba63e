"""SessionStore: chat history in one SQLite file (WAL), messages kept as a tree.

Threads: one connection shared by all threads, every public method holding one re-entrant lock
for its whole duration (calls are short: a few rows each). Processes: WAL lets readers run beside a
writer, writers take the database lock at the start of their transaction (BEGIN IMMEDIATE) and
wait up to busy_timeout for each other, so two luce-chat windows can write to one file.
Durability: each add is its own transaction, committed with synchronous=FULL before the call
returns; a crash loses at most the reply still being generated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from . import export, schema
from .errors import NotFoundError, SchemaTooNewError, SessionStoreError
from .paths import DB_FILENAME, resolve_data_dir
from .records import ROLES, Attachment, Message, SearchHit, Session, provenance_runs

log = logging.getLogger("luce_sessions")

TITLE_CHARS = 60
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


class _Root:
    """Sentinel for add_message(parent_id=ROOT): a new root message (None means the current leaf)."""

    def __repr__(self) -> str:
        return "ROOT"


ROOT: Any = _Root()


class _Corrupt(Exception):
    """Internal: the file is not a readable SQLite database."""


class SessionStore:
    """Opens (creating, migrating or recovering as needed) <data_dir>/sessions.db.

    data_dir: explicit directory (the CLI's --data-dir); None uses $LUCE_DATA_DIR, else
    $XDG_DATA_HOME/luce, else ~/.local/share/luce.
    After opening, recovered_from is the path a corrupt file was moved to (None if there was
    none) and recovery_message says so in words for the UI.
    """

    def __init__(self, data_dir: str | os.PathLike | None = None, *, busy_timeout: float = 10.0):
        self.data_dir = resolve_data_dir(data_dir)
        self.db_path = self.data_dir / DB_FILENAME
        self.busy_timeout = busy_timeout
        self.recovered_from: Path | None = None
        self.recovery_message: str | None = None
        self.fts_enabled = False
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # history is private
        except OSError as e:
            raise SessionStoreError(f"cannot create the data directory {self.data_dir}: {e}") from e
        try:
            self._conn = self._open()
        except _Corrupt as e:
            self.recovered_from = _set_aside(self.db_path)
            self.recovery_message = (
                f"The session history {self.db_path} could not be read ({e}). It was kept as "
                f"{self.recovered_from} and a new, empty history was started.")
            log.warning("%s", self.recovery_message)
            self._conn = self._open()

    # --- opening ---------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        # Two processes opening one new file at once: the switch to WAL (and the schema's first
        # writes) can get SQLITE_BUSY at once, without SQLite's busy handler (lock escalation that
        # would deadlock), so the whole open is retried until busy_timeout.
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return self._open_once()
            except SessionStoreError as e:
                if not isinstance(e.__cause__, sqlite3.OperationalError) or not _is_busy(e.__cause__) \
                        or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _open_once(self) -> sqlite3.Connection:
        _check_header(self.db_path)  # refuses before SQLite touches the file
        try:
            conn = sqlite3.connect(self.db_path, timeout=self.busy_timeout, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as e:
            raise SessionStoreError(f"cannot open the session history {self.db_path}: {e}") from e
        try:
            found, other = _version_and_tables(conn)
            if found > schema.known_version():
                raise SchemaTooNewError(self.db_path, found, schema.known_version())
            if found == 0 and other:   # before any write: another program's database stays as it is
                raise _Corrupt(f"not a luce session history: it holds other tables ({', '.join(other)})")
            problems = [r[0] for r in conn.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise _Corrupt("integrity check: " + "; ".join(problems))
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":  # e.g. some network file systems
                log.warning("%s: WAL mode unavailable (journal_mode=%s)", self.db_path, mode)
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            schema.migrate(conn)
            self.fts_enabled = schema.reconcile_fts(conn, schema.fts5_available(conn))
        except sqlite3.DatabaseError as e:
            conn.close()
            if _is_corruption(e):
                raise _Corrupt(str(e)) from e
            raise SessionStoreError(f"cannot open the session history {self.db_path}: {e}") from e
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "SessionStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock; writers take the database lock up front so that a
        read-then-write (e.g. 'append to the current leaf') cannot interleave with another."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise SessionStoreError("the session store is closed")
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    # --- sessions --------------------------------------------------------------------------

    def create_session(self, title: str | None = None,
                       settings: dict[str, Any] | None = None) -> Session:
        now = time.time()
        with self._tx(write=True) as c:
            cur = c.execute("INSERT INTO sessions(title, created, updated, settings) VALUES (?,?,?,?)",
                            (_clean_title(title), now, now, _dump_obj(settings or {}, "settings")))
            return self._session(c, cur.lastrowid)

    def get_session(self, session_id: int) -> Session:
        with self._tx(write=False) as c:
            return self._session(c, session_id)

    def list_sessions(self, query: str | None = None, limit: int = 100) -> list[Session]:
        """Newest activity first; query filters by title (case-insensitive substring)."""
        sql = _SESSION_SELECT
        args: list[Any] = []
        if query:
            sql += " WHERE s.title LIKE ? ESCAPE '\\'"
            args.append(f"%{_like_escape(query)}%")
        sql += " ORDER BY s.updated DESC, s.id DESC LIMIT ?"
        args.append(int(limit))
        with self._tx(write=False) as c:
            return [_session_row(r) for r in c.execute(sql, args)]

    def rename_session(self, session_id: int, title: str | None) -> Session:
        """An empty title leaves the session untitled."""
        with self._tx(write=True) as c:
            self._session(c, session_id)
            c.execute("UPDATE sessions SET title = ?, updated = ? WHERE id = ?",
                      (_clean_title(title), time.time(), session_id))
            return self._session(c, session_id)

    def update_settings(self, session_id: int, settings: dict[str, Any]) -> Session:
        """Replaces the session's model/settings JSON."""
        with self._tx(write=True) as c:
            self._session(c, session_id)
            c.execute("UPDATE sessions SET settings = ?, updated = ? WHERE id = ?",
                      (_dump_obj(settings, "settings"), time.time(), session_id))
            return self._session(c, session_id)

    def delete_session(self, session_id: int) -> None:
        """Deletes the session, its messages and the attachment blobs nothing else uses."""
        with self._tx(write=True) as c:
            self._session(c, session_id)
            shas = [r[0] for r in c.execute(
                "SELECT DISTINCT ma.sha256 FROM message_attachments ma JOIN messages m "
                "ON m.id = ma.message_id WHERE m.session_id = ?", (session_id,))]
            c.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            # only blobs this session used: a blob just added for a message being composed
            # elsewhere has no link yet and must survive
            for sha in shas:
                c.execute("DELETE FROM attachments WHERE sha256 = ? AND NOT EXISTS "
                          "(SELECT 1 FROM message_attachments WHERE sha256 = ?)", (sha, sha))

    # --- messages --------------------------------------------------------------------------

    def add_message(self, session_id: int, role: str, content: str, parent_id: Any = None, *,
                    stats: dict[str, Any] | None = None,
                    provenance: Iterable[Sequence] | None = None,
                    attachments: Iterable[Attachment | str] = ()) -> Message:
        """Saves one complete message (its own transaction) and makes it the current leaf.

        parent_id: None = child of the session's current leaf; ROOT = a new root; an id = child
        of that message (a sibling of its other children: edits and retries are branches).
        provenance: (n_chars, drafted) or (text, drafted) runs, see provenance_runs().
        attachments: Attachment records or sha256 strings of blobs added with add_attachment().
        The first user message titles an untitled session."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        if not isinstance(content, str):
            raise TypeError(f"content must be str, not {type(content).__name__}")
        stats_json = None if stats is None else _dump_obj(stats, "stats")
        runs = None if provenance is None else provenance_runs(provenance)
        links = [a if isinstance(a, Attachment) else Attachment(a, "", 0) for a in attachments]
        now = time.time()
        with self._tx(write=True) as c:
            session = self._session(c, session_id)
            if parent_id is None:
                parent = session.current_leaf
            elif parent_id is ROOT:
                parent = None
            else:
                parent = parent_id
                if self._message(c, parent).session_id != session_id:
                    raise ValueError(f"message {parent_id} belongs to another session")
            cur = c.execute(
                "INSERT INTO messages(session_id, parent_id, role, content, created, stats, provenance)"
                " VALUES (?,?,?,?,?,?,?)",
                (session_id, parent, role, content, now, stats_json,
                 None if runs is None else json.dumps(runs)))
            mid = cur.lastrowid
            for pos, a in enumerate(links):
                row = c.execute("SELECT name FROM attachments WHERE sha256 = ?", (a.sha256,)).fetchone()
                if row is None and a.data is not None:
                    # a delete_session since add_attachment collected the blob: store it again
                    self._insert_blob(c, a.name, a.data, a.n_tokens)
                    row = (a.name,)
                if row is None:
                    raise NotFoundError(f"no attachment with sha256 {a.sha256} (add_attachment first)")
                c.execute("INSERT INTO message_attachments(message_id, position, sha256, name) "
                          "VALUES (?,?,?,?)", (mid, pos, a.sha256, a.name or row[0]))
            title = session.title
            if title is None and role == "user":
                # an attachment-only first message is titled by its first file name
                title = _clean_title(content) or _clean_title(
                    c.execute("SELECT name FROM message_attachments WHERE message_id = ? "
                              "ORDER BY position LIMIT 1", (mid,)).fetchone()[0] if links else None)
            c.execute("UPDATE sessions SET current_leaf = ?, updated = ?, title = ? WHERE id = ?",
                      (mid, now, title, session_id))
            return self._message(c, mid)

    def add_partial_reply(self, session_id: int, content: str, parent_id: Any = None, *,
                          stats: dict[str, Any] | None = None,
                          provenance: Iterable[Sequence] | None = None) -> Message:
        """Saves what a cancelled reply produced so far (an assistant message whose stats say
        finish_reason "cancelled")."""
        return self.add_message(session_id, "assistant", content, parent_id,
                                stats={**(stats or {}), "finish_reason": "cancelled"},
                                provenance=provenance)

    def edit_message(self, message_id: int, content: str, *,
                     stats: dict[str, Any] | None = None,
                     provenance: Iterable[Sequence] | None = None,
                     attachments: Iterable[Attachment | str] | None = None) -> Message:
        """A new sibling of message_id (same parent and role) with new content: an edited
        prompt, or a retried reply. Attachments default to the original's. The original stays."""
        old = self.get_message(message_id)
        return self.add_message(
            old.session_id, old.role, content, ROOT if old.parent_id is None else old.parent_id,
            stats=stats, provenance=provenance,
            attachments=old.attachments if attachments is None else attachments)

    def get_message(self, message_id: int) -> Message:
        with self._tx(write=False) as c:
            return self._message(c, message_id)

    def set_current_leaf(self, session_id: int, message_id: int | None) -> None:
        """Selects the branch that ends at message_id (None: nothing selected, empty path)."""
        with self._tx(write=True) as c:
            self._session(c, session_id)
            if message_id is not None and self._message(c, message_id).session_id != session_id:
                raise ValueError(f"message {message_id} belongs to another session")
            c.execute("UPDATE sessions SET current_leaf = ? WHERE id = ?", (message_id, session_id))

    def path(self, session_id: int, leaf_id: int | None = None) -> list[Message]:
        """Messages from the root down to leaf_id (default: the current leaf)."""
        with self._tx(write=False) as c:
            return self._path(c, session_id, leaf_id)

    def children(self, message_id: int) -> list[Message]:
        """Direct replies/continuations of message_id, oldest first."""
        with self._tx(write=False) as c:
            self._message(c, message_id)
            return self._messages(c, "parent_id = ? ORDER BY id", (message_id,))

    def roots(self, session_id: int) -> list[Message]:
        with self._tx(write=False) as c:
            self._session(c, session_id)
            return self._messages(c, "session_id = ? AND parent_id IS NULL ORDER BY id", (session_id,))

    def siblings(self, message_id: int) -> list[Message]:
        """All alternatives at message_id's place in the tree, itself included, oldest first
        (for showing 'branch 2/3')."""
        with self._tx(write=False) as c:
            m = self._message(c, message_id)
            if m.parent_id is None:
                return self._messages(c, "session_id = ? AND parent_id IS NULL ORDER BY id",
                                      (m.session_id,))
            return self._messages(c, "parent_id = ? ORDER BY id", (m.parent_id,))

    def latest_leaf(self, message_id: int) -> int:
        """The leaf reached from message_id by always following the newest child."""
        with self._tx(write=False) as c:
            self._message(c, message_id)
            leaf = message_id
            while (row := c.execute("SELECT max(id) FROM messages WHERE parent_id = ?",
                                    (leaf,)).fetchone())[0] is not None:
                leaf = row[0]
            return leaf

    def switch_branch(self, message_id: int) -> list[Message]:
        """Makes the newest leaf under message_id current and returns the new path."""
        with self._lock:
            leaf = self.latest_leaf(message_id)
            session_id = self.get_message(leaf).session_id
            self.set_current_leaf(session_id, leaf)
            return self.path(session_id, leaf)

    # --- attachments -----------------------------------------------------------------------

    def add_attachment(self, name: str, data: bytes | str, n_tokens: int | None = None) -> Attachment:
        """Stores a blob once per SHA-256 of its bytes (str is stored as UTF-8); adding the same
        bytes again stores nothing new (n_tokens fills a missing count). The record returned
        carries this call's name, which is what a message it is attached to will show, and the
        data, so that add_message can store the blob again should a delete_session meanwhile
        have removed it."""
        blob = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        with self._tx(write=True) as c:
            sha = self._insert_blob(c, name, blob, n_tokens)
            stored = self._attachment(c, sha, with_data=False)
            return dataclasses.replace(stored, name=name, data=blob)

    def get_attachment(self, sha256: str, *, with_data: bool = True) -> Attachment:
        with self._tx(write=False) as c:
            return self._attachment(c, sha256, with_data=with_data)

    # --- search and export -----------------------------------------------------------------

    def search(self, text: str, limit: int = 50, *, session_id: int | None = None,
               mark: tuple[str, str] = ("**", "**")) -> list[SearchHit]:
        """Messages containing every word of text (prefix match with FTS5; substring match
        without it), best first. snippet shows the match between the two mark strings."""
        terms = re.findall(r"\w+", text)
        if not terms:
            return []
        where, args = "", []
        if session_id is not None:
            where, args = " AND m.session_id = ?", [session_id]
        with self._tx(write=False) as c:
            if self.fts_enabled:
                query = " ".join('"%s"*' % t.replace('"', '""') for t in terms)
                rows = c.execute(
                    "SELECT m.session_id, m.id, snippet(messages_fts, 0, ?, ?, '…', 12), s.title, "
                    "m.role, m.created FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
                    "JOIN sessions s ON s.id = m.session_id WHERE messages_fts MATCH ?" + where +
                    " ORDER BY rank LIMIT ?", [mark[0], mark[1], query, *args, int(limit)]).fetchall()
                return [SearchHit(*r) for r in rows]
            cond = " AND ".join("m.content LIKE ? ESCAPE '\\'" for _ in terms)
            rows = c.execute(
                "SELECT m.session_id, m.id, m.content, s.title, m.role, m.created FROM messages m "
                "JOIN sessions s ON s.id = m.session_id WHERE " + cond + where +
                " ORDER BY m.id DESC LIMIT ?",
                [*(f"%{_like_escape(t)}%" for t in terms), *args, int(limit)]).fetchall()
            return [SearchHit(r[0], r[1], _snippet(r[2], terms, mark), *r[3:]) for r in rows]

    def export_markdown(self, session_id: int, leaf: int | None = None) -> str:
        """The branch ending at leaf (default: the current one) as a Markdown document."""
        with self._tx(write=False) as c:
            return export.to_markdown(self._session(c, session_id), self._path(c, session_id, leaf))

    def export_json(self, session_id: int, leaf: int | None = None) -> dict[str, Any]:
        """The branch ending at leaf (default: the current one) as a JSON-ready dict."""
        with self._tx(write=False) as c:
            return export.to_json(self._session(c, session_id), self._path(c, session_id, leaf))

    # --- row helpers (inside a transaction) ------------------------------------------------

    def _session(self, c: sqlite3.Connection, session_id: int) -> Session:
        row = c.execute(_SESSION_SELECT + " WHERE s.id = ?", (session_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no session with id {session_id}")
        return _session_row(row)

    def _message(self, c: sqlite3.Connection, message_id: int) -> Message:
        found = self._messages(c, "id = ?", (message_id,))
        if not found:
            raise NotFoundError(f"no message with id {message_id}")
        return found[0]

    def _messages(self, c: sqlite3.Connection, where: str, args: Sequence) -> list[Message]:
        rows = c.execute(_MESSAGE_SELECT + " WHERE " + where, args).fetchall()
        return self._with_attachments(c, rows)

    def _path(self, c: sqlite3.Connection, session_id: int, leaf_id: int | None) -> list[Message]:
        session = self._session(c, session_id)
        leaf = session.current_leaf if leaf_id is None else leaf_id
        if leaf is None:
            return []
        if self._message(c, leaf).session_id != session_id:
            raise ValueError(f"message {leaf} belongs to another session")
        rows = c.execute(
            "WITH RECURSIVE up(id, depth) AS (SELECT ?, 0 UNION ALL "
            "SELECT m.parent_id, up.depth + 1 FROM messages m JOIN up ON m.id = up.id "
            "WHERE m.parent_id IS NOT NULL) " + _MESSAGE_SELECT.replace("FROM messages", "FROM up "
            "JOIN messages ON messages.id = up.id") + " ORDER BY up.depth DESC", (leaf,)).fetchall()
        return self._with_attachments(c, rows)

    def _with_attachments(self, c: sqlite3.Connection, rows: list) -> list[Message]:
        by_msg: dict[int, list[Attachment]] = {}
        ids = [r[0] for r in rows]
        for i in range(0, len(ids), 500):  # stay under SQLite's bound-variable limit
            chunk = ids[i:i + 500]
            for mid, name, sha, n_bytes, n_tokens, created in c.execute(
                    "SELECT ma.message_id, ma.name, a.sha256, a.n_bytes, a.n_tokens, a.created "
                    "FROM message_attachments ma JOIN attachments a ON a.sha256 = ma.sha256 "
                    f"WHERE ma.message_id IN ({','.join('?' * len(chunk))}) "
                    "ORDER BY ma.message_id, ma.position", chunk):
                by_msg.setdefault(mid, []).append(Attachment(sha, name, n_bytes, n_tokens, created))
        return [Message(mid, sid, parent, role, content, created,
                        None if stats is None else json.loads(stats),
                        None if prov is None else [(n, bool(d)) for n, d in json.loads(prov)],
                        tuple(by_msg.get(mid, ())))
                for mid, sid, parent, role, content, created, stats, prov in rows]

    def _insert_blob(self, c: sqlite3.Connection, name: str, blob: bytes, n_tokens: int | None) -> str:
        sha = hashlib.sha256(blob).hexdigest()
        c.execute("INSERT OR IGNORE INTO attachments(sha256, name, n_bytes, n_tokens, created, "
                  "content) VALUES (?,?,?,?,?,?)", (sha, name, len(blob), n_tokens, time.time(), blob))
        if n_tokens is not None:
            c.execute("UPDATE attachments SET n_tokens = ? WHERE sha256 = ? AND n_tokens IS NULL",
                      (n_tokens, sha))
        return sha

    def _attachment(self, c: sqlite3.Connection, sha: str, *, with_data: bool) -> Attachment:
        row = c.execute("SELECT sha256, name, n_bytes, n_tokens, created" +
                        (", content" if with_data else "") + " FROM attachments WHERE sha256 = ?",
                        (sha,)).fetchone()
        if row is None:
            raise NotFoundError(f"no attachment with sha256 {sha}")
        return Attachment(*row[:5], data=bytes(row[5]) if with_data else None)


_SESSION_SELECT = ("SELECT s.id, s.title, s.created, s.updated, s.settings, s.current_leaf, "
                   "(SELECT count(*) FROM messages m WHERE m.session_id = s.id) FROM sessions s")
_MESSAGE_SELECT = ("SELECT messages.id, messages.session_id, messages.parent_id, messages.role, "
                   "messages.content, messages.created, messages.stats, messages.provenance "
                   "FROM messages")


def _session_row(r) -> Session:
    return Session(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6])


def _dump_obj(value: Any, what: str) -> str:
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be a dict, not {type(value).__name__}")
    return json.dumps(value, ensure_ascii=False)


def _clean_title(text: str | None) -> str | None:
    """One line of at most TITLE_CHARS characters, cut at a word where possible."""
    if text is None:
        return None
    line = " ".join(text.split())
    if len(line) > TITLE_CHARS:
        cut = line[:TITLE_CHARS - 1]
        if " " in cut[TITLE_CHARS // 2:]:
            cut = cut[:cut.rindex(" ")]
        line = cut.rstrip() + "…"
    return line or None


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _snippet(content: str, terms: list[str], mark: tuple[str, str], width: int = 40) -> str:
    """LIKE fallback's snippet: text around the first term, every term occurrence marked."""
    low = content.lower()
    hits = [i for i in (low.find(t.lower()) for t in terms) if i >= 0]
    start = max(0, min(hits, default=0) - width)
    end = min(len(content), min(hits, default=0) + width * 2)
    piece = content[start:end]
    piece = re.sub("|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True)),
                   lambda m: mark[0] + m.group(0) + mark[1], piece, flags=re.IGNORECASE)
    return ("…" if start > 0 else "") + " ".join(piece.split()) + ("…" if end < len(content) else "")


def _check_header(path: Path) -> None:
    """Reads the 100-byte SQLite header directly, so that a file that is not a database, or one
    from a newer schema, is recognised without SQLite writing anything."""
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except FileNotFoundError:
        return
    except OSError as e:
        raise SessionStoreError(f"cannot read the session history {path}: {e}") from e
    if not head:
        return  # an empty file is a new database to SQLite too
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        raise _Corrupt("not an SQLite database")
    found = int.from_bytes(head[60:64], "big", signed=True)
    if found > schema.known_version():
        raise SchemaTooNewError(path, found, schema.known_version())


def _version_and_tables(conn: sqlite3.Connection) -> tuple[int, list[str]]:
    """The schema version and up to three table names, read from one snapshot: read apart,
    another process creating the history in between looked like a foreign database at version 0
    with tables, and the new history was moved aside while that process wrote to it."""
    conn.execute("BEGIN")
    try:
        found = schema.user_version(conn)
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' LIMIT 3")]
    finally:
        conn.execute("COMMIT")
    return found, tables


def _is_busy(e: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED: another connection holds a lock (worth a retry)."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)   # SQLITE_BUSY, SQLITE_LOCKED
    return "locked" in str(e) or "busy" in str(e)


def _is_corruption(e: sqlite3.DatabaseError) -> bool:
    code = getattr(e, "sqlite_errorcode", None)  # Python >= 3.11
    if code is not None:
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    msg = str(e).lower()
    return "not a database" in msg or "malformed" in msg or "corrupt" in msg


def _set_aside(path: Path) -> Path:
    """Renames a corrupt file (with its -wal/-shm) to <name>.corrupt-<timestamp>; never deletes."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    try:
        os.replace(path, dest)
        for suffix in ("-wal", "-shm", "-journal"):
            side = Path(str(path) + suffix)
            if side.exists():
                os.replace(side, Path(str(dest) + suffix))
    except OSError as e:
        raise SessionStoreError(
            f"the session history {path} is corrupt and could not be moved aside ({e}); "
            f"move it yourself or use --data-dir") from e
    return dest
