"""PFlash for the server: long user and tool message contents are compressed before the prompt is
built; system prompts and tool definitions never are (an agent's instructions and its tools'
schemas must reach the model whole, or its tool calls break).

Only the messages after the last assistant reply are new in a request; one of those whose content
passes the compressor's policy (`--pflash-mode`, `--pflash-threshold`) is replaced, in the prompt
only, by the excerpts the scorer ranks relevant to the question: for a tool result the last user
message, for a user message its own last paragraph (where the question follows a pasted document).
Each compression is remembered by its content, so when the agent resends the conversation next
turn the same excerpts are rendered and the engine's context prefix is reused; a long message
that was sent uncompressed stays uncompressed.
"""

from __future__ import annotations

import hashlib

from luce_tui.conversation import combined_summary

ROLES = ("user", "tool")
REMEMBERED = 256   # compressions kept (the oldest go first)


def _key(m: dict) -> tuple[str, str]:
    return m["role"], hashlib.sha256(m["content"].encode("utf-8")).hexdigest()


def _question(messages: list[dict], i: int) -> str:
    m = messages[i]
    if m["role"] == "user":
        return m["content"].rstrip().rsplit("\n\n", 1)[-1][-2000:]
    return next((p["content"] for p in reversed(messages[:i]) if p["role"] == "user"), "")[-2000:]


class ServerPFlash:
    def __init__(self, compressor, tokenizer):
        self.compressor, self.tokenizer = compressor, tokenizer
        self.done: dict[tuple[str, str], tuple[str, dict]] = {}   # content key -> (kept text, numbers)

    def apply(self, messages: list[dict], progress=None) -> tuple[list[dict], str | None]:
        """The messages with remembered and new compressions in place, and this request's notice
        ("compressed 183,412 → 9,170 tokens (5%)") when it compressed something now."""
        last_reply = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
        out, infos = [], []
        for i, m in enumerate(messages):
            if m["role"] not in ROLES or not m["content"]:
                out.append(m)
                continue
            key = _key(m)
            if key not in self.done and i > last_reply:
                n = len(self.tokenizer.encode(m["content"], parse_special=False))
                if self.compressor.applies(n):
                    c = self.compressor.compress(m["content"], _question(messages, i), progress=progress)
                    info = {"n_original": c.n_original, "n_kept": c.n_kept, "scorer_ms": c.scorer_ms}
                    self.done[key] = (c.kept_text(self.tokenizer), info)
                    infos.append(info)
                    while len(self.done) > REMEMBERED:
                        del self.done[next(iter(self.done))]
            if key in self.done:
                m = dict(m, content=self.done[key][0])
            out.append(m)
        return out, (combined_summary(infos) if infos else None)
