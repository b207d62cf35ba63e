"""Schema migrations (PRAGMA user_version) and the optional FTS5 index.

MIGRATIONS[i] takes a database from version i to i + 1. Each step runs in its own transaction
together with the user_version bump, so a failed step leaves the file at the previous version.
Never edit a released step: append a new one.
"""

from __future__ import annotations

import sqlite3
from typing import Callable

Migration = Callable[[sqlite3.Connection], None]


def _v1(conn: sqlite3.Connection) -> None:
    for sql in (
        # timestamps are Unix seconds (REAL); JSON columns hold dicts/lists as text
        """CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            title TEXT,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            settings TEXT NOT NULL DEFAULT '{}',
            current_leaf INTEGER REFERENCES messages(id) ON DELETE SET NULL
        )""",
        """CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            content TEXT NOT NULL,
            created REAL NOT NULL,
            stats TEXT,
            provenance TEXT
        )""",
        "CREATE INDEX messages_session ON messages(session_id, id)",
        "CREATE INDEX messages_parent ON messages(parent_id, id)",
        """CREATE TABLE attachments (
            sha256 TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            n_bytes INTEGER NOT NULL,
            n_tokens INTEGER,
            created REAL NOT NULL,
            content BLOB NOT NULL
        )""",
        # name: what the file was called when attached to this message (the blob is shared)
        """CREATE TABLE message_attachments (
            message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            sha256 TEXT NOT NULL REFERENCES attachments(sha256),
            name TEXT NOT NULL,
            PRIMARY KEY (message_id, position)
        )""",
        "CREATE INDEX message_attachments_sha ON message_attachments(sha256)",
        # key/value notes about the file itself (e.g. whether the FTS index is stale)
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",
    ):
        conn.execute(sql)


MIGRATIONS: list[Migration] = [_v1]


def known_version() -> int:
    return len(MIGRATIONS)


def user_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def migrate(conn: sqlite3.Connection) -> int:
    """Applies the missing steps; returns the version reached. The caller has already refused a
    newer file. Re-reads the version under the write lock: another process may have migrated."""
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = user_version(conn)
            if version >= len(MIGRATIONS):
                conn.execute("COMMIT")
                return version
            MIGRATIONS[version](conn)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


# --- full-text search ------------------------------------------------------------------------
# The FTS5 index depends on the SQLite build, not on the schema version, so it is reconciled on
# every open: created (and filled) where FTS5 exists; where it does not, its triggers are dropped
# (they would make every insert fail) and the index is marked stale, to be rebuilt when a build
# with FTS5 opens the file again. Search falls back to LIKE meanwhile.

_FTS_TRIGGERS = {
    "messages_fts_ai": """CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END""",
    "messages_fts_ad": """CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        END""",
    "messages_fts_au": """CREATE TRIGGER messages_fts_au AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END""",
}


def fts5_available(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.luce_fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.luce_fts5_probe")
        return True
    except sqlite3.OperationalError:
        return False


def _exists(conn: sqlite3.Connection, kind: str, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = ? AND name = ?",
                        (kind, name)).fetchone() is not None


def reconcile_fts(conn: sqlite3.Connection, available: bool) -> bool:
    """Brings the index in line with this build; returns whether FTS search can be used."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        have_table = _exists(conn, "table", "messages_fts")
        stale = conn.execute("SELECT value FROM meta WHERE key = 'fts_stale'").fetchone() is not None
        if available:
            if not have_table:
                conn.execute("""CREATE VIRTUAL TABLE messages_fts USING fts5(content,
                    content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2')""")
            for name, sql in _FTS_TRIGGERS.items():
                if not _exists(conn, "trigger", name):
                    conn.execute(sql)
            if stale or not have_table:
                conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
                conn.execute("DELETE FROM meta WHERE key = 'fts_stale'")
        else:
            for name in _FTS_TRIGGERS:
                if _exists(conn, "trigger", name):
                    conn.execute(f"DROP TRIGGER {name}")
            if have_table and not stale:
                conn.execute("INSERT INTO meta(key, value) VALUES ('fts_stale', '1')")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return available
