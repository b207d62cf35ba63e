"""Where the session store lives on disk (XDG data directory, overridable)."""

from __future__ import annotations

import os
from pathlib import Path

DB_FILENAME = "sessions.db"


def default_data_dir() -> Path:
    """$LUCE_DATA_DIR, else $XDG_DATA_HOME/luce, else ~/.local/share/luce."""
    env = os.environ.get("LUCE_DATA_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.path.expanduser(os.environ.get("XDG_DATA_HOME", ""))
    # the XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / "luce"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """An explicit directory (the CLI's --data-dir) wins over the environment."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    return default_data_dir()


def db_path(data_dir: str | os.PathLike | None = None) -> Path:
    return resolve_data_dir(data_dir) / DB_FILENAME
