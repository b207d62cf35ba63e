"""Exceptions raised by the session store."""

from __future__ import annotations


class SessionStoreError(Exception):
    """Base class: anything the store refuses or cannot do, with a message fit for the user."""


class SchemaTooNewError(SessionStoreError):
    """The database was written by a newer luce-chat; it is left untouched."""

    def __init__(self, path, found: int, known: int):
        self.path, self.found, self.known = path, found, known
        super().__init__(
            f"{path} was written by a newer luce-chat (schema version {found}; this version knows "
            f"up to {known}). The file was not changed. Upgrade luce-chat, or use --data-dir "
            f"(or LUCE_DATA_DIR) to keep this version's history elsewhere.")


class NotFoundError(SessionStoreError, LookupError):
    """No session, message or attachment with that id."""
