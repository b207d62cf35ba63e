"""Plain records returned by the store, and the token-provenance run helpers."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence

ROLES = ("system", "user", "assistant")

# A provenance run is (n_chars, drafted): the next n_chars characters of the message came from
# tokens that were (True) or were not (False) accepted from a speculative draft.
Run = tuple[int, bool]


@dataclasses.dataclass(frozen=True)
class Attachment:
    """A blob stored once by SHA-256. data is None when only the metadata was loaded."""

    sha256: str
    name: str
    n_bytes: int
    n_tokens: int | None = None
    created: float = 0.0
    data: bytes | None = dataclasses.field(default=None, repr=False)

    @property
    def text(self) -> str | None:
        """The content as text (UTF-8, undecodable bytes replaced), or None if not loaded."""
        return None if self.data is None else self.data.decode("utf-8", errors="replace")

    def meta(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "name": self.name, "n_bytes": self.n_bytes,
                "n_tokens": self.n_tokens}


@dataclasses.dataclass(frozen=True)
class Message:
    """One node of a session's message tree (parent_id None: a root)."""

    id: int
    session_id: int
    parent_id: int | None
    role: str
    content: str
    created: float
    stats: dict[str, Any] | None = None
    provenance: list[Run] | None = None
    attachments: tuple[Attachment, ...] = ()

    @property
    def finish_reason(self) -> str | None:
        return (self.stats or {}).get("finish_reason")

    @property
    def cancelled(self) -> bool:
        return self.finish_reason == "cancelled"

    def spans(self) -> list[tuple[str, bool]]:
        """The content cut into (text, drafted) runs, for highlighting a reloaded reply.

        Text not covered by the runs (none were stored, or they are shorter) is not drafted."""
        out: list[tuple[str, bool]] = []
        pos = 0
        for n, drafted in self.provenance or ():
            piece = self.content[pos:pos + n]
            pos += len(piece)
            _append_run(out, piece, drafted)
        _append_run(out, self.content[pos:], False)
        return out


@dataclasses.dataclass(frozen=True)
class Session:
    id: int
    title: str | None
    created: float
    updated: float
    settings: dict[str, Any]
    current_leaf: int | None
    n_messages: int = 0


@dataclasses.dataclass(frozen=True)
class SearchHit:
    session_id: int
    message_id: int
    snippet: str
    session_title: str | None
    role: str
    created: float


def _append_run(runs: list, piece, drafted: bool) -> None:
    if not piece:
        return
    if runs and runs[-1][1] == drafted:
        runs[-1] = (runs[-1][0] + piece, drafted)
    else:
        runs.append((piece, drafted))


def provenance_runs(runs: Iterable[Sequence]) -> list[Run]:
    """Normalises runs to [(n_chars, drafted), ...]: each item may be (n_chars, drafted) or
    (text, drafted) (as in the engine's StepResult.spans); adjacent runs of the same kind merge
    and empty ones drop out, so streaming many small pieces stores a short list."""
    out: list[list] = []
    for item in runs:
        try:
            size, drafted = item
        except (TypeError, ValueError):
            raise ValueError(f"a provenance run is (n_chars or text, drafted), not {item!r}") from None
        n = len(size) if isinstance(size, str) else size
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"a provenance run length must be an int >= 0, not {size!r}")
        if not isinstance(drafted, (bool, int)):
            raise ValueError(f"a provenance run flag must be a bool, not {drafted!r}")
        _append_run(out, n, bool(drafted))
    return [(n, d) for n, d in out]
