"""The app with `--remote`: the Textual app driven by a RemoteConversation against a real `luce-chat serve`
(the same reply as in-process, saved with its stats; errors from the server shown, the chat intact)."""
from __future__ import annotations

import pytest

from luce_tui.app import ChatOptions, LuceApp
from luce_tui.remote import RemoteConversation
from server_support import serve
from tui_support import GREEDY, SIZE, run_async, screen_text, store, type_and_send, wait_for  # noqa: F401


@pytest.fixture(scope="module")
def server():
    with serve("--max-ctx", "2048") as s:
        yield s


def _app(server, store=None, **options):
    options.setdefault("max_tokens", 8)
    return LuceApp(None, GREEDY, ChatOptions(**options), store=store, conv=RemoteConversation(server.url))


def _reference(server, messages, max_tokens=8) -> str:
    r = server.client().chat.completions.create(model="any", messages=messages, max_tokens=max_tokens,
                                                **{"temperature": 0, "top_p": 0.95},
                                                extra_body={"top_k": 40, "min_p": 0.05, "repeat_penalty": 1.05})
    return r.choices[0].message.content


@run_async
async def test_remote_chat_in_the_app(server, store):
    expected = _reference(server, [{"role": "user", "content": "Hello there"}])
    app = _app(server, store)
    async with app.run_test(size=SIZE) as pilot:
        assert "SmolLM2-135M-Instruct" in screen_text(app) and "n_ctx 2,048" in screen_text(app)
        await type_and_send(pilot, app, "Hello there")
        assert app.conv.messages[-1]["content"] == expected
        assert app.last_result.generated_tokens == 8 and app.last_result.finish_reason == "length"
        path = store.path(app.persist.session_id)
        assert [(m.role, m.content) for m in path] == [("user", "Hello there"), ("assistant", expected)]
        first = app.last_result
        await type_and_send(pilot, app, "And then?")
        # the server kept the first turn's prompt and reply in its context
        assert app.last_result.reused_tokens >= first.prompt_tokens + first.generated_tokens - 1
        await type_and_send(pilot, app, "/stats")
        assert "tokens in use" in screen_text(app)


@run_async
async def test_remote_errors_are_shown_and_the_chat_continues(server):
    app = _app(server)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "word " * 3000)            # over the server's context
        await wait_for(pilot, lambda: "context holds 2048" in screen_text(app), what="the server's 400")
        assert app.conv.messages == []
        await type_and_send(pilot, app, "Hi")
        assert app.conv.messages[-1]["role"] == "assistant" and app.conv.messages[-1]["content"]
