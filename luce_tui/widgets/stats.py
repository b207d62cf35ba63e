"""The stats line: what the engine is doing now (prefill progress with ETA and reused prefix,
decode speed, draft acceptance) and how full the context is, as a gauge."""

from __future__ import annotations

import dataclasses

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static


@dataclasses.dataclass
class LiveStats:
    """Numbers behind the stats line, updated from the generation queue on the UI thread."""

    phase: str = "idle"          # idle | prefill | decode
    prompt_tokens: int = 0
    reused: int = 0
    prefill_done: int = 0
    prefill_total: int = 0
    prefill_t0: float = 0.0
    prefill_t: float = 0.0        # time of the last progress report
    decode_tokens: int = 0
    decode_t0: float | None = None   # time of the first step
    decode_t0_tokens: int = 0        # tokens committed by that first step
    decode_t: float = 0.0
    n_steps: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    ctx_used: int = 0
    ctx_max: int = 0
    last: str = ""                # summary of the last reply, shown when idle
    note: str = ""                # e.g. "prefilling the history" / "cancelling…"

    def start(self, t: float, reused: int, prompt_tokens: int) -> None:
        self.phase, self.reused, self.prompt_tokens = "prefill", reused, prompt_tokens
        self.prefill_done, self.prefill_total = 0, prompt_tokens - reused
        self.prefill_t0 = self.prefill_t = t
        self.decode_tokens, self.decode_t0, self.n_steps, self.n_drafted, self.n_accepted = 0, None, 0, 0, 0

    def progress(self, t: float, done: int, total: int) -> None:
        if self.phase != "prefill":   # a prefill without a start (a resumed chat)
            self.phase, self.prefill_t0, self.reused = "prefill", t, 0
        self.prefill_done, self.prefill_total, self.prefill_t = done, total, t

    def score(self, t: float, done: int, total: int) -> None:
        """PFlash scoring an attachment (scorer tokens; the context is not touched)."""
        if self.phase != "score":
            self.phase, self.prefill_t0, self.reused = "score", t, 0
        self.prefill_done, self.prefill_total, self.prefill_t = done, total, t

    def step(self, t: float, step) -> None:
        n = len(step.tokens)
        if self.decode_t0 is None:
            self.phase, self.decode_t0, self.decode_t0_tokens = "decode", t, n
        self.decode_tokens += n
        self.decode_t = t
        self.n_steps += 1 if n else 0
        self.n_drafted += step.n_drafted
        self.n_accepted += step.n_accepted

    @property
    def decode_tps(self) -> float | None:
        if self.decode_t0 is None or self.decode_t <= self.decode_t0:
            return None
        return (self.decode_tokens - self.decode_t0_tokens) / (self.decode_t - self.decode_t0)


def _eta(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def format_status(s: LiveStats, now: float) -> str:
    if s.phase in ("prefill", "score"):
        total = max(s.prefill_total, 1)
        pct = 100 * s.prefill_done / total
        what = "prefill" if s.phase == "prefill" else "scoring attachments (PFlash)"
        parts = [f"{what} {pct:.0f}%", f"{s.prefill_done:,}/{s.prefill_total:,} tok"]
        elapsed = now - s.prefill_t0
        if s.prefill_done and elapsed > 0 and s.prefill_done < s.prefill_total:
            parts.append(f"ETA {_eta(elapsed / s.prefill_done * (s.prefill_total - s.prefill_done))}")
        if s.reused:
            parts.append(f"{s.reused:,} cached")
    elif s.phase == "decode":
        tps = s.decode_tps
        parts = [f"decode {tps:.1f} tok/s" if tps is not None else "decode", f"{s.decode_tokens:,} tok"]
        if s.n_drafted:
            parts.append(f"accept {100 * s.n_accepted / s.n_drafted:.0f}%")
            parts.append(f"AL {s.decode_tokens / max(s.n_steps, 1):.2f}")
    else:
        parts = [s.last] if s.last else ["ready"]
    if s.note:
        parts.insert(0, s.note)
    return " · ".join(p for p in parts if p)


def format_gauge(used: int, total: int, width: int = 12) -> str:
    if total <= 0:
        return ""
    frac = min(max(used / total, 0.0), 1.0)
    filled = round(frac * width)
    return f"ctx {'█' * filled}{'░' * (width - filled)} {used:,}/{total:,}"


def reply_summary(result) -> str:
    """One line for a finished turn (a conversation.TurnResult)."""
    parts = [f"{result.generated_tokens:,} tok @ {result.decode_tps:.1f} tok/s"]
    if result.prefill_tokens:
        parts.append(f"prefill {result.prefill_tokens:,} tok @ {result.prefill_tps:,.0f} tok/s")
    if result.reused_tokens:
        parts.append(f"{result.reused_tokens:,} cached")
    if result.acceptance is not None:
        parts.append(f"accept {100 * result.acceptance:.0f}% · AL {result.accept_length:.2f}")
    return " · ".join(parts)


class StatsBar(Horizontal):
    DEFAULT_CSS = """
    StatsBar { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    StatsBar #status { width: 1fr; }
    StatsBar #gauge { width: auto; }
    StatsBar.busy #status { color: $text; }
    StatsBar #gauge.warn { color: $warning; }
    StatsBar #gauge.full { color: $error; }
    """

    def compose(self) -> ComposeResult:
        yield Static("ready", id="status")
        yield Static("", id="gauge")

    def show(self, stats: LiveStats, now: float) -> None:
        self.query_one("#status", Static).update(format_status(stats, now))
        gauge = self.query_one("#gauge", Static)
        gauge.update(format_gauge(stats.ctx_used, stats.ctx_max))
        frac = stats.ctx_used / stats.ctx_max if stats.ctx_max else 0
        gauge.set_class(0.8 <= frac < 0.95, "warn")
        gauge.set_class(frac >= 0.95, "full")
        self.set_class(stats.phase != "idle", "busy")
