"""One reply's text as OpenAI message parts, as it streams: reasoning (`<think>` … `</think>`),
content, and tool calls (toolcalls.py), each step's content with its provenance spans."""

from __future__ import annotations

from luce_tui import events
from luce_tui.server.toolcalls import ToolCallParser
from luce_tui.thinking import OPEN as THINK_OPEN, ThinkSplitter


class ReplyAssembler:
    """feed(step) / finish() -> OpenAI deltas ({"content"}, {"reasoning_content"}, {"tool_calls"}); the
    whole message is in `content`, `reasoning`, `calls` at the end.

    thinking: the prompt itself opened a think block. Without it, a reply that does not begin
    with `<think>` is passed through exactly as the model wrote it (leading whitespace included),
    so greedy content through the server equals the in-process reply. prefix: text the prompt
    already wrote for the reply (a forced tool call's opening), parsed as if generated. max_calls:
    the reply ends after that many complete tool calls (parallel_tool_calls false: 1)."""

    def __init__(self, *, thinking: bool = False, tools: list[dict] | None = None, prefix: str = "",
                 max_calls: int | None = None):
        self.splitter = ThinkSplitter(thinking) if thinking else None
        self.undecided = "" if not thinking else None   # leading text until we know whether it thinks
        self.tools = ToolCallParser(tools, max_calls) if tools else None
        self.content, self.reasoning = [], []
        self.opening: list[dict] = []   # the prefix's deltas (a forced call's id and name), sent first
        if prefix:
            self._answer(prefix, False, self.opening)
            self.opening = merge(self.opening)

    @property
    def calls(self):
        return self.tools.calls if self.tools else []

    def feed(self, step: events.Step) -> list[dict]:
        out: list[dict] = []
        for text, drafted in step.spans:
            self._piece(text, drafted, out)
        return merge(out)

    def finish(self) -> list[dict]:
        out: list[dict] = []
        if self.undecided:
            rest, self.undecided = self.undecided, None
            self._answer(rest, False, out)
        if self.splitter is not None:
            for channel, text, drafted in self.splitter.flush():
                self._channel(channel, text, drafted, out)
        if self.tools is not None:
            self._tool_deltas(self.tools.finish(), out, False)
        return merge(out)

    # -- routing -------------------------------------------------------------------------------
    def _piece(self, text: str, drafted: bool, out: list[dict]) -> None:
        if self.undecided is not None:
            self.undecided += text
            s = self.undecided.lstrip()
            if not s or (len(s) < len(THINK_OPEN) and THINK_OPEN.startswith(s)):
                return
            buf, self.undecided = self.undecided, None
            if s.startswith(THINK_OPEN):
                self.splitter = ThinkSplitter(False)
            else:
                self._answer(buf, drafted, out)
                return
            text = buf
        if self.splitter is None:
            self._answer(text, drafted, out)
            return
        for channel, piece, d in self.splitter.feed(text, drafted):
            self._channel(channel, piece, d, out)

    def _channel(self, channel: str, text: str, drafted: bool, out: list[dict]) -> None:
        if channel == "think":
            self.reasoning.append(text)
            out.append({"reasoning_content": text})
        else:
            self._answer(text, drafted, out)

    def _answer(self, text: str, drafted: bool, out: list[dict]) -> None:
        if self.tools is None:
            self.content.append(text)
            out.append({"content": text, "_spans": [(text, drafted)]})
        else:
            self._tool_deltas(self.tools.feed(text), out, drafted)

    def _tool_deltas(self, deltas, out: list[dict], drafted: bool) -> None:
        for d in deltas:
            if d.content:
                self.content.append(d.content)
                out.append({"content": d.content, "_spans": [(d.content, drafted)]})
            elif d.name is not None:
                out.append({"tool_calls": [{"index": d.index, "id": d.id, "type": "function",
                                            "function": {"name": d.name, "arguments": ""}}]})
            elif d.arguments:
                out.append({"tool_calls": [{"index": d.index, "function": {"arguments": d.arguments}}]})


def merge(deltas: list[dict]) -> list[dict]:
    """Adjacent deltas of the same kind as one (a step's spans make one content delta)."""
    out: list[dict] = []
    for d in deltas:
        prev = out[-1] if out else None
        if prev and "content" in d and "content" in prev:
            prev["content"] += d["content"]
            prev["_spans"] = prev["_spans"] + d["_spans"]
        elif prev and "reasoning_content" in d and "reasoning_content" in prev:
            prev["reasoning_content"] += d["reasoning_content"]
        elif (prev and "tool_calls" in d and "tool_calls" in prev and "id" not in d["tool_calls"][0]
              and prev["tool_calls"][0]["index"] == d["tool_calls"][0]["index"]
              and "id" not in prev["tool_calls"][0]):
            prev["tool_calls"][0]["function"]["arguments"] += d["tool_calls"][0]["function"]["arguments"]
        else:
            out.append(d)
    return out
