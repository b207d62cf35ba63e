"""PFlash through `luce-chat serve`: long user and tool contents are compressed, system prompts and tool
definitions never; a compression is rendered the same when the agent resends the conversation, so the
context prefix is reused. The target is a scripted tool-calling model, the scorer a tiny qwen3."""
from __future__ import annotations

import json
import time

import httpx
import pytest

from server_support import serve
from tools.scripted_gguf import QWEN3_TOOLS, write_scripted_gguf
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

WORDS = "river stone market ledger winter signal copper harbor lantern orchard quarry meadow ".split()


def prose(n_words: int, seed: int) -> str:
    return " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(n_words))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("pflash")
    target = write_scripted_gguf(d / "t.gguf", ["Done", " here."], template=QWEN3_TOOLS)
    scorer = write_tiny_gguf(d / "s.gguf", TinyConfig(arch="qwen3", n_vocab=400, head_dim=32))
    with serve("--target", target, "--max-ctx", "8192", "--pflash-scorer", scorer, "--pflash-threshold", "1000",
               "--pflash-keep-ratio", "0.25", "--keepalive", "0.02") as s:
        yield s


def test_system_prompt_and_tool_definitions_are_never_compressed(server):
    system = prose(300, 1)                                   # ~2,200 byte tokens each: far over the threshold
    tools = [{"type": "function", "function": {"name": "lookup", "description": prose(300, 2),
                                               "parameters": {"type": "object", "properties": {}}}}]
    r = server.client().chat.completions.create(model="any", tools=tools, messages=[
        {"role": "system", "content": system}, {"role": "user", "content": "Which word comes first?"}])
    assert r.model_extra["luce"]["pflash"] is None
    assert r.usage.prompt_tokens > len(system) + len(tools[0]["function"]["description"])   # both went in whole


def test_long_tool_and_user_contents_are_compressed_and_reused(server):
    c = server.client()
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    document = prose(500, 3)
    messages = [{"role": "system", "content": "You are brief."},
                {"role": "user", "content": "Find the harbor."},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": document}]
    r = c.chat.completions.create(model="any", messages=messages)
    notice = r.model_extra["luce"]["pflash"]
    assert notice and notice.startswith("compressed ")
    n_original, n_kept = (int(x.replace(",", "")) for x in notice.split()[1:4:2])
    assert n_original >= len(document) * 0.9 and n_kept < n_original / 2
    assert r.usage.prompt_tokens < len(document) / 2              # the excerpts went in, not the document
    # the agent resends everything with a new question: the same excerpts, the prefix reused, no new scoring
    messages += [{"role": "assistant", "content": r.choices[0].message.content},
                 {"role": "user", "content": "And the lantern?"}]
    r2 = c.chat.completions.create(model="any", messages=messages)
    assert r2.model_extra["luce"]["pflash"] is None
    assert r2.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens
    # a long user message (a pasted document, the question in its last paragraph) is compressed too
    pasted = prose(500, 5) + "\n\nWhere is the quarry?"
    r3 = c.chat.completions.create(model="any", messages=[{"role": "user", "content": pasted}])
    assert r3.model_extra["luce"]["pflash"].startswith("compressed ")


def test_keepalive_comments_while_pflash_scores(server):
    """A streamed request whose long message is being scored: keep-alive comments at the interval
    (--keepalive 0.02 here) until the reply starts, then the reply as usual."""
    body = {"messages": [{"role": "user", "content": prose(800, 7) + "\n\nWhere is the meadow?"}], "stream": True}
    t0 = time.monotonic()
    with httpx.stream("POST", server.url + "/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    elapsed = time.monotonic() - t0
    data = [i for i, line in enumerate(lines) if line.startswith("data: ")]
    before = lines[:data[0]]
    assert before and set(before) == {": keep-alive"}
    assert json.loads(lines[data[0]][6:])["choices"][0]["delta"]["role"] == "assistant"
    final = json.loads(lines[data[-2]][6:])
    assert final["luce"]["pflash"].startswith("compressed ")        # it was the scorer that took the time
    assert len(before) >= 2, (len(before), elapsed)
    assert lines[-1] == "data: [DONE]"
