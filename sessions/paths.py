"""Where the session store lives on disk (XDG data directory, overridable)."""

from __future__ import annotations

import os
from pathlib import Path

DB_FILENAME = "sessions.db"


def xdg_home(variable: str, fallback: str) -> Path:
    """$variable (XDG_DATA_HOME, XDG_CONFIG_HOME), else ~/fallback. The XDG spec says a relative
    path in these variables is invalid and must be ignored."""
    xdg = os.path.expanduser(os.environ.get(variable, ""))
    return Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / fallback


def default_data_dir() -> Path:
    """$LUCE_DATA_DIR, else $XDG_DATA_HOME/luce, else ~/.local/share/luce."""
    env = os.environ.get("LUCE_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return xdg_home("XDG_DATA_HOME", ".local/share") / "luce"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """An explicit directory (the CLI's --data-dir) wins over the environment."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    return default_data_dir()


def db_path(data_dir: str | os.PathLike | None = None) -> Path:
    return resolve_data_dir(data_dir) / DB_FILENAME
