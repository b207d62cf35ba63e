"""The typed events of one reply, the one stream every front end consumes (app, plain REPL, -p, server).

Conversation.run_turn() hands them to its `emit` in this order: Started is preceded by any number of
ScoringProgress (PFlash), then PrefillProgress and Step events, then exactly one Finished or Error.
Error means the turn did not happen (the conversation is unchanged); a turn that is cancelled after
Started finishes normally with finish_reason "cancelled" and keeps its partial reply.
Front ends `match` on the classes. Every event carries `t`, the clock of the thread that ran the turn.
"""

from __future__ import annotations

import dataclasses

from luce_engine import StepResult


@dataclasses.dataclass(frozen=True, slots=True)
class Started:
    """The prompt is built and accepted: `reused` of its `prompt_tokens` are already in the context."""

    reused: int
    prompt_tokens: int
    t: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class ScoringProgress:
    """The PFlash scorer has ranked `done` of `total` tokens of the attachments being compressed."""

    done: int
    total: int
    t: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class PrefillProgress:
    """`done` of the `total` new prompt tokens are evaluated."""

    done: int
    total: int
    t: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One engine step: the tokens it committed, each with its provenance (drafted: came from an
    accepted draft), and the text they completed, cut into (text, drafted) spans."""

    tokens: list[int]
    drafted: list[bool]
    text: str
    spans: list[tuple[str, bool]]
    n_drafted: int = 0
    n_accepted: int = 0
    finish_reason: str | None = None
    t: float = 0.0

    @classmethod
    def of(cls, r: StepResult, t: float) -> "Step":
        return cls(list(r.tokens), list(r.drafted), r.text, list(r.spans), r.n_drafted, r.n_accepted,
                   r.finish_reason, t)


@dataclasses.dataclass(frozen=True, slots=True)
class Finished:
    """The reply is complete (result: a conversation.TurnResult); the conversation now holds it."""

    result: object
    t: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class Error:
    """The turn failed before it produced a reply (bad input, a full context, an engine error, a
    cancel before it started); nothing changed."""

    error: BaseException
    t: float = 0.0


Event = Started | ScoringProgress | PrefillProgress | Step | Finished | Error
