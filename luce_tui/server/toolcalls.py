"""Tool calls out of streamed model text, as they arrive: OpenAI `tool_calls` deltas (name, then
argument fragments) and the plain content around them.

Formats (the models we run write them inside `<tool_call>` … `</tool_call>`):
  * JSON (Qwen3, Hermes): `{"name": "f", "arguments": {...}}`. The arguments stream as the model
    writes them, character for character, once "name" has been seen before "arguments".
  * XML (Qwen3.5/3.6, Qwen3-Coder): `<function=f>` then `<parameter=p>\nvalue\n</parameter>` …
    `</function>`. Arguments stream as a JSON object: a parameter whose schema type is string (or
    that the schema does not name) as a JSON string, fragment by fragment; another type as its
    JSON value when the parameter closes (a value that is not valid JSON stays a string).
Fallback: a JSON body in another key order is parsed when `</tool_call>` arrives; a body that is
neither format, or a call the reply leaves unfinished, goes out as content, so no text is lost.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_JSON_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
_FUNC = re.compile(r"\s*<function=([^>\n]+)>")
_PARAM = re.compile(r"\s*<parameter=([^>\n]+)>\n?")
_FUNC_END = re.compile(r"\s*</function>")


@dataclasses.dataclass
class ToolCall:
    index: int
    id: str
    name: str
    arguments: str = ""


@dataclasses.dataclass
class Delta:
    """content text, or a tool call's start (name set) or argument fragment."""

    content: str = ""
    index: int | None = None
    id: str | None = None
    name: str | None = None
    arguments: str | None = None


def _held_tail(text: str, tag: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of tag."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


class ToolCallParser:
    """feed(text) -> deltas, finish() -> the rest; `calls` holds every parsed call."""

    def __init__(self, tools: list[dict] | None = None, max_calls: int | None = None):
        self.types = {}   # function name -> {parameter: JSON schema type}
        for t in tools or ():
            fn = t.get("function") or {}
            props = (fn.get("parameters") or {}).get("properties") or {}
            self.types[fn.get("name")] = {k: (v or {}).get("type") for k, v in props.items() if isinstance(v, dict)}
        self.calls: list[ToolCall] = []
        self.max_calls = max_calls   # after this many complete calls the rest of the reply is dropped
        self.buf = ""           # text not yet decided
        self.state = "text"     # text | sniff | json_args | json_tail | json_whole | xml | closed
        self.body = ""          # the raw call so far (for the fallback)
        self.call: ToolCall | None = None
        self._json = _JsonScan()
        self._param: tuple[str, bool] | None = None   # (name, streamed as a string) of the open parameter
        self._first_param = True

    # -- public --------------------------------------------------------------------------------
    def feed(self, text: str) -> list[Delta]:
        if self.state == "closed":
            return []
        self.buf += text
        out: list[Delta] = []
        while self._advance(out):
            pass
        return out

    def finish(self) -> list[Delta]:
        """End of the reply: a call still open goes out as content (unless its arguments finished)."""
        out: list[Delta] = []
        if self.state == "closed":
            return out
        if self.state == "text":
            if self.buf:
                out.append(Delta(content=self.buf))
        elif self.call is not None and self.state == "json_tail":
            pass   # a complete call that only lacks its closing tag
        elif self.call is None:
            out.append(Delta(content=OPEN + self.body + self.buf))
        self.buf, self.state = "", "text"
        return out

    @property
    def complete_calls(self) -> int:
        return len(self.calls) - (1 if self.state != "text" and self.call is not None else 0)

    # -- states --------------------------------------------------------------------------------
    def _advance(self, out: list[Delta]) -> bool:
        """One step of the state machine; False when it needs more text."""
        if self.state == "closed":
            return False
        if self.state == "text":
            i = self.buf.find(OPEN)
            if i >= 0:
                if i:
                    out.append(Delta(content=self.buf[:i]))
                self.buf, self.state, self.body, self.call = self.buf[i + len(OPEN):], "sniff", "", None
                return True
            hold = _held_tail(self.buf, OPEN)
            if len(self.buf) > hold:
                out.append(Delta(content=self.buf[:len(self.buf) - hold]))
                self.buf = self.buf[len(self.buf) - hold:]
            return False
        if self.state == "sniff":
            s = self.buf.lstrip()
            if not s:
                return False
            if s.startswith("{"):
                m = _JSON_HEAD.match(self.buf)
                if m:
                    self._start(out, json.loads(f'"{m.group(1)}"'))
                    self._take(m.end())
                    self.state, self._json = "json_args", _JsonScan()
                    return True
                if CLOSE in self.buf or not _could_be_json_head(self.buf):
                    self.state = "json_whole"
                    return True
                return False
            if "<function=".startswith(s[:10]) and len(s) < 10:
                return False
            m = _FUNC.match(self.buf)
            if m:
                self._start(out, m.group(1).strip())
                self._take(m.end())
                self.state, self._first_param = "xml", True
                out.append(Delta(index=self.call.index, arguments="{"))
                self.call.arguments += "{"
                return True
            if s.startswith("<function=") and "\n" not in s:
                return False
            self.state = "json_whole"   # neither format: kept whole, decided at </tool_call>
            return True
        if self.state == "json_args":
            if not self._json.started:   # whitespace before the value is not part of it
                self.buf = self.buf.lstrip()
            n = self._json.feed(self.buf)
            piece = self.buf[:n]
            if piece:
                self.call.arguments += piece
                out.append(Delta(index=self.call.index, arguments=piece))
            self._take(n)
            if self._json.done:
                self.state = "json_tail"
                return True
            return False
        if self.state == "json_tail":
            i = self.buf.find(CLOSE)
            if i < 0:
                return False
            self._take(i + len(CLOSE))
            self._end()
            return True
        if self.state == "json_whole":
            i = self.buf.find(CLOSE)
            if i < 0:
                return False
            raw = self.buf[:i]
            self.buf = self.buf[i + len(CLOSE):]
            self._whole(out, raw)
            return True
        return self._xml(out)

    def _xml(self, out: list[Delta]) -> bool:
        call = self.call
        if self._param is None:
            m = _PARAM.match(self.buf)
            if m and m.end() == len(self.buf) and not m.group(0).endswith("\n"):
                return False   # the newline that follows the tag may be next
            if m:
                name = m.group(1).strip()
                kind = self.types.get(call.name, {}).get(name)
                as_string = kind in (None, "string")
                head = ("" if self._first_param else ", ") + json.dumps(name, ensure_ascii=False) + ": "
                head += '"' if as_string else ""
                self._first_param, self._param = False, (name, as_string)
                self._emit_args(out, head)
                self._take(m.end())
                return True
            m = _FUNC_END.match(self.buf)
            if m:
                self._emit_args(out, "}")
                self._take(m.end())
                self.state = "json_tail"   # what is left is </tool_call>
                return True
            i = self.buf.find(CLOSE)
            if i >= 0 and not self.buf[:i].strip():   # </tool_call> without </function>
                self._emit_args(out, "}")
                self.state = "json_tail"
                return True
            return False
        name, as_string = self._param
        end = self.buf.find("</parameter>")
        if end < 0:
            if as_string:   # stream all but what may be the closing tag or the newline before it
                hold = max(_held_tail(self.buf, "\n</parameter>"), _held_tail(self.buf, "</parameter>"))
                if self.buf.endswith("\n"):
                    hold = max(hold, 1)
                piece = self.buf[:len(self.buf) - hold]
                if piece:
                    self._emit_args(out, json.dumps(piece, ensure_ascii=False)[1:-1])
                    self._take(len(piece))
            return False
        value = self.buf[:end]
        value = value[:-1] if value.endswith("\n") else value
        if as_string:
            self._emit_args(out, json.dumps(value, ensure_ascii=False)[1:-1] + '"')
        else:
            try:
                self._emit_args(out, json.dumps(json.loads(value), ensure_ascii=False))
            except ValueError:
                self._emit_args(out, json.dumps(value, ensure_ascii=False))
        self._take(end + len("</parameter>"))
        self._param = None
        return True

    # -- helpers -------------------------------------------------------------------------------
    def _start(self, out: list[Delta], name: str) -> None:
        self.call = ToolCall(len(self.calls), "call_" + secrets.token_hex(12), name)
        self.calls.append(self.call)
        out.append(Delta(index=self.call.index, id=self.call.id, name=name, arguments=""))

    def _emit_args(self, out: list[Delta], piece: str) -> None:
        self.call.arguments += piece
        out.append(Delta(index=self.call.index, arguments=piece))

    def _take(self, n: int) -> None:
        self.body += self.buf[:n]
        self.buf = self.buf[n:]

    def _end(self) -> None:
        self.state, self.call, self.body = "text", None, ""
        if self.max_calls is not None and len(self.calls) >= self.max_calls:
            self.state, self.buf = "closed", ""

    def _whole(self, out: list[Delta], raw: str) -> None:
        """The fallback: a JSON body in any key order, else the text as content."""
        try:
            obj = json.loads(raw)
            name, args = obj["name"], obj.get("arguments", obj.get("parameters", {}))
            if not isinstance(name, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            out.append(Delta(content=OPEN + raw + CLOSE))
            self._end()
            return
        self._start(out, name)
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        self._emit_args(out, text)
        self._end()


def _could_be_json_head(text: str) -> bool:
    """Could more text still make `text` match the JSON head (name first, then arguments)?"""
    compact, head = re.sub(r"\s+", "", text), '{"name":"'
    return head.startswith(compact) or compact.startswith(head)


class _JsonScan:
    """Finds where one JSON value ends in streamed text (depth over objects/arrays, strings skipped)."""

    def __init__(self):
        self.depth, self.in_string, self.escape, self.started, self.done = 0, False, False, False, False

    def feed(self, text: str) -> int:
        """How many characters of text belong to the value (all of them while it is open)."""
        for i, ch in enumerate(text):
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif ch == "\\":
                    self.escape = True
                elif ch == '"':
                    self.in_string = False
                    if self.depth == 0:
                        self.done = True
                        return i + 1
                continue
            if ch.isspace() and not self.started:
                continue
            self.started = True
            if ch == '"':
                self.in_string = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.done = True
                    return i + 1
        return len(text)
