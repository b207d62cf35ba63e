"""Colour themes: the shipped ones (`themes/*.toml`, package data) and the user's own
(`$XDG_CONFIG_HOME/luce/themes/*.toml`), turned into Textual Themes.

A theme file has Textual's Theme fields at the top level (name, dark, primary, secondary, accent,
foreground, background, surface, panel, success, warning, error, ...) and luce-chat's own colours
under [variables]: draft-highlight (text from accepted drafts), think-foreground (the model's
reasoning) and user-border (the bar beside your messages). Missing variables fall back to
VARIABLE_DEFAULTS, so any Textual theme (e.g. `/theme nord`) works as well.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from textual.theme import Theme

VARIABLE_DEFAULTS = {
    "draft-highlight": "#ffd173",
    "think-foreground": "#8a919c",
    "user-border": "#5fafff",
}
_FIELDS = {f.name for f in dataclasses.fields(Theme)} - {"variables"}


class ThemeError(ValueError):
    """A theme file that cannot be used (the message names the file)."""


def builtin_dir() -> Path:
    """The shipped themes: in the installed package (luce_tui/builtin_themes, mapped from the
    checkout's top-level themes/ by setup.py), else the source checkout's themes/."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "builtin_themes", here.parent / "themes"):
        if candidate.is_dir():
            return candidate
    return here.parent / "themes"


def load_theme(path: Path) -> Theme:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ThemeError(f"{path}: {e}") from None
    data.setdefault("name", path.stem)
    variables = data.pop("variables", {})
    unknown = set(data) - _FIELDS
    if unknown:
        raise ThemeError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    if "primary" not in data:
        raise ThemeError(f"{path}: a theme needs at least 'primary'")
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ThemeError(f"{path}: [variables] must map names to colour strings")
    theme = Theme(**data, variables={**VARIABLE_DEFAULTS, **variables})
    try:
        theme.to_color_system().generate()   # bad colours fail here, not when applied
    except Exception as e:
        raise ThemeError(f"{path}: {e}") from None
    return theme


def load_themes(user_dir: Path | None) -> tuple[list[Theme], list[str]]:
    """Shipped themes, then the user's (a user theme of the same name wins); plus one warning per
    file that could not be loaded."""
    themes: dict[str, Theme] = {}
    warnings: list[str] = []
    dirs = [builtin_dir()] + ([user_dir] if user_dir is not None and user_dir.is_dir() else [])
    for d in dirs:
        for path in sorted(d.glob("*.toml")):
            try:
                t = load_theme(path)
            except ThemeError as e:
                warnings.append(str(e))
                continue
            themes[t.name] = t
    return list(themes.values()), warnings
