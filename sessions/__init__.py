"""luce_sessions — luce-chat's session store: SQLite (WAL) under the XDG data directory.

    from luce_sessions import SessionStore
    store = SessionStore()                      # or SessionStore(args.data_dir)
    s = store.create_session(settings={"model": "..."})
    store.add_message(s.id, "user", "Hello")    # child of the current leaf, saved at once
    store.path(s.id)                            # root -> current leaf

See sessions/README.md for the file layout and the decisions behind it.
"""

import logging

from .errors import NotFoundError, SchemaTooNewError, SessionStoreError
from .export import to_json, to_markdown
from .paths import DB_FILENAME, db_path, default_data_dir, resolve_data_dir
from .records import ROLES, Attachment, Message, SearchHit, Session, provenance_runs
from .schema import known_version as schema_version
from .store import ROOT, SessionStore

# the UI shows store.recovery_message itself; without a handler, Python would print the log
# record to stderr as well
logging.getLogger("luce_sessions").addHandler(logging.NullHandler())

__all__ = [
    "SessionStore", "ROOT", "Session", "Message", "Attachment", "SearchHit", "ROLES",
    "provenance_runs", "to_json", "to_markdown",
    "SessionStoreError", "SchemaTooNewError", "NotFoundError",
    "DB_FILENAME", "db_path", "default_data_dir", "resolve_data_dir", "schema_version",
]
