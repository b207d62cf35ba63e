"""Saved chats in the app: /sessions (list, search, open, rename, delete), resume, /save, /export."""
from __future__ import annotations

import json

from luce_tui.screens.dialogs import AskScreen, ConfirmScreen
from luce_tui.screens.sessions import SessionsScreen
from luce_tui.widgets.messages import AssistantMessage, Notice, UserMessage
from tui_support import (SIZE, engine, make_app, run_async, store, tiny_model,  # noqa: F401
                         type_and_send, wait_for, wait_idle)


def last_notice(app, kind=None) -> str:
    found = [n for n in app.query(Notice) if kind is None or n.kind == kind]
    return str(found[-1].render()) if found else ""


async def two_chats(pilot, app):
    await type_and_send(pilot, app, "Tell me about penguins")
    first = app.persist.session_id
    await type_and_send(pilot, app, "/new")
    await type_and_send(pilot, app, "What about giraffes?")
    return first, app.persist.session_id


def listed(screen: SessionsScreen) -> list[str]:
    lst = screen.query_one("#list")
    return [str(lst.get_option_at_index(i).prompt) for i in range(lst.option_count)]


@run_async
async def test_sessions_list_search_open(engine, store):
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        first, second = await two_chats(pilot, app)
        assert first != second
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionsScreen), what="the sessions screen")
        screen = app.screen
        rows = listed(screen)
        assert len(rows) == 2 and "What about giraffes?" in rows[0] and "Tell me about penguins" in rows[1]
        assert rows[0].startswith("● ")                       # the open chat is marked
        await pilot.press(*"penguin")
        await pilot.pause()
        assert screen.ids == [first]
        await pilot.press("enter")
        await wait_idle(pilot, app)
        assert app.screen is not screen and app.persist.session_id == first
        assert [m["content"] for m in app.conv.messages][0] == "Tell me about penguins"
        assert len(app.query(UserMessage)) == 1 and len(app.query(AssistantMessage)) == 1
        assert "Tell me about penguins" in app.sub_title
        # the history was prefilled: the engine holds the chat, and the next turn reuses it all
        history = app.conv.encode(add_generation_prompt=False)
        assert app.engine.tokens[: len(history)] == history
        await type_and_send(pilot, app, "More please")
        assert app.last_result.reused_tokens >= len(history) - 1
        assert len(store.path(first)) == 4


@run_async
async def test_sessions_search_finds_message_text(engine, store):
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        first, second = await two_chats(pilot, app)
        store.rename_session(first, "Birds")
        await type_and_send(pilot, app, "/sessions", wait=False)
        await wait_for(pilot, lambda: isinstance(app.screen, SessionsScreen), what="the sessions screen")
        await pilot.press(*"giraffes")
        await pilot.pause()
        assert app.screen.ids == [second]
        await pilot.press(*"zzz")
        await pilot.pause()
        assert app.screen.ids == [] and "nothing matches" in listed(app.screen)[0]
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, SessionsScreen)


@run_async
async def test_sessions_rename_and_delete(engine, store):
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        first, second = await two_chats(pilot, app)
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionsScreen), what="the sessions screen")
        await pilot.press("down")                             # the older chat
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, AskScreen), what="the rename question")
        app.screen.query_one("#answer").value = "Penguin facts"
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionsScreen), what="the list again")
        assert store.get_session(first).title == "Penguin facts"
        rows = listed(app.screen)                             # renamed: now the latest activity
        assert "Penguin facts" in rows[0] and app.screen.selected == first
        await pilot.press("down")                             # the open chat
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the delete question")
        await pilot.click("#yes")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionsScreen), what="the list again")
        assert [s.id for s in store.list_sessions()] == [first]
        await pilot.press("escape")
        await pilot.pause()
        assert app.persist.session_id is None and "deleted" in last_notice(app, "warning")


@run_async
async def test_resume_last_shows_history_and_prefills(engine, store, tiny_model):
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "/system Answer in one word.", wait=False)
        await type_and_send(pilot, app, "Remember the number seven")
        sid = app.persist.session_id
        shown = app.conv.messages[1]["content"]

    import luce_engine as le

    fresh = le.Engine(tiny_model, n_ctx=1024)
    app2 = make_app(fresh, store, resume="last", state_budget_gib=0)   # the prefill path (state files: test_tui_session_state)
    async with app2.run_test(size=SIZE) as pilot:
        await wait_idle(pilot, app2)
        assert app2.persist.session_id == sid
        assert app2.conv.system == "Answer in one word."
        assert [m["role"] for m in app2.conv.messages] == ["user", "assistant"]
        assert app2.query_one(AssistantMessage).text == shown
        history = app2.conv.encode(add_generation_prompt=False)
        assert fresh.tokens == history
        assert "history prefilled" in str(app2.query_one("#status").render())

    app3 = make_app(le.Engine(tiny_model, n_ctx=1024), store, resume=str(sid + 100))
    async with app3.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "no session with id" in last_notice(app3, "error")


@run_async
async def test_save_and_export(engine, store, tmp_path):
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "/export md", wait=False)
        await pilot.pause()
        assert "nothing to export" in last_notice(app, "error")
        await type_and_send(pilot, app, "Hello")
        await type_and_send(pilot, app, "/save My first chat", wait=False)
        await pilot.pause()
        assert store.get_session(app.persist.session_id).title == "My first chat"
        assert "My first chat" in app.sub_title and "--resume" in last_notice(app)
        md, js = tmp_path / "out.md", tmp_path / "out.json"
        await type_and_send(pilot, app, f"/export md {md}", wait=False)
        await type_and_send(pilot, app, f"/export json {js}", wait=False)
        await pilot.pause()
        assert "Hello" in md.read_text() and "My first chat" in md.read_text()
        data = json.loads(js.read_text())
        assert [m["role"] for m in data["messages"]] == ["user", "assistant"]


@run_async
async def test_app_without_store_still_chats(engine):
    from luce_tui.app import ChatOptions, LuceApp
    from luce_tui.runtime import Runtime
    from tui_support import GREEDY

    app = LuceApp(Runtime(engine), GREEDY, ChatOptions(max_tokens=4), store=None, store_error="disk on fire")
    async with app.run_test(size=SIZE) as pilot:
        assert "not saved this time: disk on fire" in last_notice(app, "warning")
        await type_and_send(pilot, app, "Hi")
        assert len(app.conv.messages) == 2
        await type_and_send(pilot, app, "/sessions", wait=False)
        await pilot.pause()
        assert "not being saved" in last_notice(app, "error")
