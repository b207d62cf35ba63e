"""Markdown and JSON renderings of one branch of a session (root to leaf)."""

from __future__ import annotations

import datetime
from typing import Any

from .records import Message, Session

EXPORT_FORMAT = "luce-chat-session"
EXPORT_VERSION = 1

_HEADINGS = {"system": "System", "user": "User", "assistant": "Assistant"}


def iso(ts: float) -> str:
    """Local time with its UTC offset, to the second."""
    return datetime.datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def drafted_fraction(m: Message) -> float | None:
    """Share of the reply's characters that came from accepted draft tokens."""
    total = sum(n for n, _ in m.provenance or ())
    return None if not total else sum(n for n, d in m.provenance if d) / total


def to_json(session: Session, messages: list[Message]) -> dict[str, Any]:
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "session": {"id": session.id, "title": session.title, "created": iso(session.created),
                    "updated": iso(session.updated), "settings": session.settings},
        "leaf": messages[-1].id if messages else None,
        "messages": [{
            "id": m.id, "parent_id": m.parent_id, "role": m.role, "content": m.content,
            "created": iso(m.created), "stats": m.stats,
            "provenance": None if m.provenance is None else [[n, d] for n, d in m.provenance],
            "attachments": [a.meta() for a in m.attachments],
        } for m in messages],
    }


def _fmt(v: Any) -> str:
    # plain decimals a reader can take in (13,650.4 ms, not 1.365e+04); small settings as written (0.7)
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.4g}"
    return str(v)


def _compressions(stats: dict, n: int) -> list[str]:
    """Per attachment, ", compressed N → M tokens" when PFlash compressed it (stats["pflash"])."""
    parts = stats.get("pflash")
    out = []
    for i in range(n):
        part = parts[i] if isinstance(parts, list) and i < len(parts) and isinstance(parts[i], dict) else {}
        c = part.get("compression")
        if isinstance(c, dict) and isinstance(c.get("n_original"), int) and isinstance(c.get("n_kept"), int):
            out.append(f", compressed {c['n_original']:,} → {c['n_kept']:,} tokens")
        else:
            out.append("")
    return out


def to_markdown(session: Session, messages: list[Message]) -> str:
    out = [f"# {session.title or 'Untitled session'}", ""]
    out.append(f"*Session {session.id} · created {iso(session.created)} · "
               f"updated {iso(session.updated)}*")
    if session.settings:
        out.append("")
        out.append("Settings: " + ", ".join(f"{k}={_fmt(v)}" for k, v in session.settings.items()))
    for m in messages:
        out += ["", f"## {_HEADINGS.get(m.role, m.role)}", ""]
        out.append(m.content if m.content else "*(empty)*")
        stats = m.stats if isinstance(m.stats, dict) else {}
        if m.attachments:
            out.append("")
            compressions = _compressions(stats, len(m.attachments))
            for a, c in zip(m.attachments, compressions):
                tokens = "" if a.n_tokens is None else f", {a.n_tokens} tokens"
                out.append(f"- Attachment `{a.name}` ({a.n_bytes} bytes{tokens}, sha256 {a.sha256[:12]}){c}")
        # scalar stats only: structured ones (the PFlash excerpts) would dump whole files here
        notes = [f"{k}={_fmt(v)}" for k, v in stats.items() if isinstance(v, (str, int, float, bool))]
        frac = drafted_fraction(m)
        if frac is not None:
            notes.append(f"drafted={frac:.0%}")
        if notes:
            out += ["", "*" + " · ".join(notes) + "*"]
    return "\n".join(out) + "\n"
