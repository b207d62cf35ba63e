"""The user's config file, `$XDG_CONFIG_HOME/luce/config.toml` (default `~/.config/luce/config.toml`).

It holds model paths and defaults; flags given on the command line override it. Example:

    target = "~/models/Qwen3-0.6B-Q8_0.gguf"
    device = "cuda:0"
    max_ctx = 32768
    cache_type_k = "q8_0"
    theme = "dark"
    pflash_scorer = "~/models/Qwen3-0.6B-BF16.gguf"     # PFlash scorer for long attachments
    pflash_mode = "auto"                                # off | auto | always
    pflash_threshold = 32000
    pflash_keep_ratio = 0.05

    [sampling]
    temperature = 0.6
    top_k = 20

Unknown keys and values of the wrong type are errors (a typo should not be ignored silently).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from luce_tui import config, locations

# key -> (type, built-in default used when neither the flag nor the file gives one)
KEYS: dict[str, tuple[type | tuple[type, ...], object]] = {
    "target": (str, None),
    "draft": (str, None),
    "pflash_scorer": (str, None),
    "pflash_mode": (str, "auto"),
    "pflash_threshold": (int, config.DEFAULT_PFLASH_THRESHOLD),
    "pflash_keep_ratio": ((int, float), config.DEFAULT_KEEP_RATIO),
    "device": (str, "auto"),
    "max_ctx": (int, None),            # None: the training context, as much as fits (and "not given" for the cap note)
    "cache_type_k": (str, "f16"),
    "cache_type_v": (str, "f16"),
    "threads": (int, 0),
    "max_tokens": (int, config.DEFAULT_MAX_TOKENS),
    "system": (str, None),
    "data_dir": (str, None),
    "theme": (str, "dark"),
    "highlight": (bool, False),
    "paste_threshold": (int, 2000),
    "state_budget_gib": ((int, float), 4),   # saved chats' engine state files (session_state.py); 0: none
}
# keys of earlier versions: a clear error instead of "unknown key"
RENAMED = {"prefill_drafter": "pflash_scorer", "prefill_compression": "pflash_mode",
           "prefill_threshold": "pflash_threshold", "prefill_keep_ratio": "pflash_keep_ratio"}


class ConfigError(ValueError):
    """The config file cannot be read or holds something we do not understand."""


def load(path: str | os.PathLike | None = None) -> dict:
    """The file's settings as a flat dict (sampling keys included); {} when the default file is absent."""
    explicit = path is not None
    p = Path(path).expanduser() if explicit else locations.config_path()
    if not p.is_file():
        if explicit:
            raise ConfigError(f"{p}: no such config file")
        return {}
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{p}: {e}") from None
    out: dict = {}
    sampling = data.pop("sampling", {})
    if not isinstance(sampling, dict):
        raise ConfigError(f"{p}: [sampling] must be a table")
    for key, value in data.items():
        key = key.replace("-", "_")
        if key in RENAMED:
            raise ConfigError(f"{p}: {key!r} is now called {RENAMED[key]!r}")
        if key not in KEYS:
            raise ConfigError(f"{p}: unknown key {key!r} (known: {', '.join(KEYS)}, [sampling])")
        out[key] = _typed(p, key, value, KEYS[key][0])
    for key, value in sampling.items():
        field = config._ALIASES.get(key.lower())
        if field is None:
            raise ConfigError(f"{p}: unknown sampling key {key!r} (known: {', '.join(config.SAMPLING_KEYS)})")
        kind = config.SAMPLING_KEYS[field][0]
        out[field] = _typed(p, f"sampling.{key}", value, (int, float) if kind is float else kind)
    for key in ("cache_type_k", "cache_type_v"):
        if key in out and out[key] not in config.CACHE_TYPES:
            raise ConfigError(f"{p}: {key} must be one of {', '.join(config.CACHE_TYPES)}")
    if out.get("pflash_mode", "auto") not in ("off", "auto", "always"):
        raise ConfigError(f"{p}: pflash_mode must be one of off, auto, always")
    if out.get("state_budget_gib", 0) < 0:
        raise ConfigError(f"{p}: state_budget_gib must be 0 or more")
    if not 0 < out.get("pflash_keep_ratio", config.DEFAULT_KEEP_RATIO) <= 1:
        raise ConfigError(f"{p}: pflash_keep_ratio must be in (0, 1]")
    if out.get("pflash_threshold", 0) < 0:
        raise ConfigError(f"{p}: pflash_threshold must be >= 0")
    return out


def _typed(path: Path, key: str, value, kind):
    # bool is an int in Python; do not let `max_ctx = true` through
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, (int, float)))
    if not ok:
        name = kind.__name__ if isinstance(kind, type) else "number"
        raise ConfigError(f"{path}: {key} must be a {name}, got {value!r}")
    return value


def merge(args, file_cfg: dict) -> None:
    """Fill every setting the command line left out (None) from the file, else the built-in default
    (for the theme: the one /theme chose last, then the default)."""
    for key, (_, default) in KEYS.items():
        if getattr(args, key, None) is None:
            if key == "theme" and "theme" not in file_cfg:
                default = remembered_theme() or default
            setattr(args, key, file_cfg.get(key, default))
    for field in config.SAMPLING_KEYS:
        if getattr(args, field, None) is None and field in file_cfg:
            setattr(args, field, file_cfg[field])


def _theme_file() -> Path:
    return locations.data_dir() / "theme"


def remembered_theme() -> str | None:
    """The theme /theme chose last (kept in the data directory, not in the user's config file)."""
    try:
        return _theme_file().read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def remember_theme(name: str) -> bool:
    try:
        _theme_file().parent.mkdir(parents=True, exist_ok=True)
        _theme_file().write_text(name + "\n", encoding="utf-8")
        return True
    except OSError:
        return False
