"""Where luce-chat keeps things on disk: the one place the app asks.

    data_dir()      saved chats and prompt history: --data-dir, else $LUCE_DATA_DIR, else
                    $XDG_DATA_HOME/luce, else ~/.local/share/luce (computed by luce_sessions,
                    which opens the store there by default)
    config_dir()    $XDG_CONFIG_HOME/luce, else ~/.config/luce: config.toml and themes/

A relative XDG_* value is ignored, as the XDG spec says.
"""
from __future__ import annotations

import os
from pathlib import Path

from luce_sessions import resolve_data_dir
from luce_sessions.paths import xdg_home


def data_dir(flag: str | os.PathLike | None = None) -> Path:
    return resolve_data_dir(flag)


def config_dir() -> Path:
    return xdg_home("XDG_CONFIG_HOME", ".config") / "luce"


def config_path() -> Path:
    return config_dir() / "config.toml"


def themes_dir() -> Path:
    return config_dir() / "themes"
