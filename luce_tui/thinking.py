"""Splits a streamed reply into its reasoning (`<think>…</think>` at the start) and its answer.

Text arrives in arbitrary pieces, so a tag may be cut in two: the tail that could begin a tag is
held back until the next piece decides. A reply that does not open with `<think>` (after
whitespace) is all answer. Some templates open the think block in the prompt itself; then the
splitter starts inside it (`thinking=True`).
"""

from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"

Piece = tuple[str, str, bool]   # (channel "think" | "answer", text, drafted)


def _held_tail(text: str, tag: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of tag."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


class ThinkSplitter:
    def __init__(self, thinking: bool = False):
        self.state = "think" if thinking else "start"   # start -> think -> answer_start -> answer
        self.pending = ""
        self.saw_think = thinking

    def feed(self, text: str, drafted: bool = False) -> list[Piece]:
        out: list[Piece] = []
        buf = self.pending + text
        self.pending = ""
        while buf:
            if self.state == "start":
                s = buf.lstrip()
                if not s or (len(s) < len(OPEN) and OPEN.startswith(s)):
                    self.pending = buf
                    return out
                if s.startswith(OPEN):
                    self.state, self.saw_think, buf = "think", True, s[len(OPEN):]
                    continue
                self.state = "answer_start"
                buf = s
            elif self.state == "think":
                i = buf.find(CLOSE)
                if i >= 0:
                    _add(out, "think", buf[:i], drafted)
                    self.state, buf = "answer_start", buf[i + len(CLOSE):]
                    continue
                hold = _held_tail(buf, CLOSE)
                _add(out, "think", buf[: len(buf) - hold], drafted)
                self.pending = buf[len(buf) - hold:] if hold else ""
                return out
            elif self.state == "answer_start":
                buf = buf.lstrip()
                if buf:
                    self.state = "answer"
            else:
                _add(out, "answer", buf, drafted)
                buf = ""
        return out

    def flush(self) -> list[Piece]:
        """The held-back tail, at the end of the reply."""
        out: list[Piece] = []
        rest, self.pending = self.pending, ""
        if rest.strip():
            _add(out, "think" if self.state == "think" else "answer", rest if self.state != "start" else rest.lstrip(),
                 False)
        return out

    @property
    def answering(self) -> bool:
        return self.state in ("answer", "answer_start") and self.saw_think


def _add(out: list[Piece], channel: str, text: str, drafted: bool) -> None:
    if text:
        out.append((channel, text, drafted))


def split_text(text: str, thinking: bool = False) -> tuple[str, str]:
    """(reasoning, answer) of a whole reply."""
    sp = ThinkSplitter(thinking)
    pieces = sp.feed(text) + sp.flush()
    return ("".join(t for c, t, _ in pieces if c == "think"), "".join(t for c, t, _ in pieces if c == "answer"))
