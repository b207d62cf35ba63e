"""What a new user hits on a first run (issue 15), on the real tiny engine through Pilot: the
command palette, Esc followed by every way of sending again, failed turns, a small context,
Ctrl+C. After every step the screen, what the model sees and the stored tree must agree."""
from __future__ import annotations

import time

import pytest

from luce_tui.commands import COMMANDS
from luce_tui.widgets.messages import AssistantMessage, Notice, UserMessage
from tui_support import (SIZE, engine, make_app, run_async, screen_text, store,  # noqa: F401
                         tiny_model, type_and_send, wait_for, wait_idle)


def notices(app, kind=None) -> list[str]:
    return [str(n.render()) for n in app.query(Notice) if kind is None or n.kind == kind]


def shown(app) -> list[tuple[str, str]]:
    """The messages on the screen, in order, as (role, text)."""
    out = []
    for w in app.chat.children:
        if isinstance(w, UserMessage):
            out.append(("user", w.message.get("content") or ""))
        elif isinstance(w, AssistantMessage):
            out.append(("assistant", w.text))
    return out


def assert_agree(app, store=None) -> None:
    """Screen == conversation (what the model is prompted with) == the store's current branch."""
    seen = [(m["role"], m["content"]) for m in app.conv.messages]
    assert shown(app) == seen
    if store is not None and app.persist.session_id is not None:
        path = store.path(app.persist.session_id)
        assert [(m.role, m.content) for m in path] == seen
        assert [m.id for m in path] == [m.get("id") for m in app.conv.messages]


def paced(monkeypatch, engine, delay: float = 0.002):
    """Each step takes `delay` more, so a key press lands while the tiny model is still writing."""
    generate = engine.generate

    def slow(*args, **kwargs):
        for r in generate(*args, **kwargs):
            time.sleep(delay)
            yield r

    monkeypatch.setattr(engine, "generate", slow)


async def cancelled_reply(pilot, app, text: str, key: str = "escape") -> None:
    """Send text with a long reply and stop it with `key` once it streams."""
    app.opts.max_tokens = 600
    await type_and_send(pilot, app, text, wait=False)
    await wait_for(pilot, lambda: app.query(AssistantMessage) and app.query(AssistantMessage).last().text,
                   what="streamed text")
    await pilot.press(key)
    await wait_idle(pilot, app)
    assert app.last_result.finish_reason == "cancelled", "the reply ended before the key arrived"
    app.opts.max_tokens = 8


# -- 1: the command palette ------------------------------------------------------------------------
@run_async
async def test_palette_opens_runs_a_command_and_closes(engine):
    from textual.command import CommandPalette

    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        # the discovery list (every command) is drawn, brackets and all
        await wait_for(pilot, lambda: "/attach PATH… [--compress|--full]" in screen_text(app), what="the list")
        assert "/detach [NAME]" in screen_text(app)
        await pilot.press(*"highl")
        await wait_for(pilot, lambda: "/highlight" in screen_text(app), what="the search hit")
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, CommandPalette), what="the palette to close")
        assert app.highlight is True
        await pilot.press("ctrl+p")                    # and it opens again and closes with Esc
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, CommandPalette), what="the palette to close")


@run_async
async def test_every_command_usage_and_help_renders_in_the_palette(engine):
    """Both paths (the discovery list and a search) draw each command's usage and help as written."""
    from textual.command import CommandPalette

    app = make_app(engine)
    async with app.run_test(size=(160, 60)) as pilot:
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        palette = app.screen
        for cmd in COMMANDS.values():
            palette.query_one("Input").value = cmd.name
            await wait_for(pilot, lambda: cmd.usage in screen_text(app), what=f"the hit for /{cmd.name}")
            assert cmd.help[:40] in screen_text(app)
        palette.query_one("Input").value = ""
        await pilot.pause(0.3)
        prompts = [str(o.prompt) for o in palette.query_one("CommandList").options]
        for cmd in COMMANDS.values():
            assert any(cmd.usage in p and cmd.help in p for p in prompts), cmd.name


# -- 2, 3: Esc, then every way of sending again -------------------------------------------------------
@pytest.mark.parametrize("then", ["follow-up", "retry", "edit", "system"])
@run_async
async def test_after_escape_the_next_send_works(engine, store, monkeypatch, then):
    paced(monkeypatch, engine)
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await cancelled_reply(pilot, app, "Write a long essay about rivers")
        partial = app.conv.messages[-1]["content"]
        assert_agree(app, store)
        if then == "follow-up":
            await type_and_send(pilot, app, "And about lakes?")
            expect_users = ["Write a long essay about rivers", "And about lakes?"]
        elif then == "retry":
            await type_and_send(pilot, app, "/retry")
            expect_users = ["Write a long essay about rivers"]
        elif then == "edit":
            await type_and_send(pilot, app, "/edit", wait=False)
            await pilot.pause()
            await type_and_send(pilot, app, "Write about lakes instead")
            expect_users = ["Write about lakes instead"]
        else:
            await type_and_send(pilot, app, "/system Answer in one word.", wait=False)
            await pilot.pause()
            await type_and_send(pilot, app, "And about lakes?")
            expect_users = ["Write a long essay about rivers", "And about lakes?"]
        assert not notices(app, "error"), notices(app, "error")
        assert app.last_result.finish_reason in ("length", "eos") and app.last_result.generated_tokens > 0
        assert [m["content"] for m in app.conv.messages if m["role"] == "user"] == expect_users
        if then == "follow-up":
            assert app.conv.messages[1]["content"] == partial   # the cancelled reply stays in the chat
        assert_agree(app, store)
        # the model was prompted with exactly what is on the screen
        prompt = app.conv.encode(app.conv.messages[:-1])
        assert app.engine.tokens[:len(prompt)] == prompt


@run_async
async def test_ctrl_c_cancels_a_reply_and_only_hints_at_quitting_when_idle(engine, store, monkeypatch):
    paced(monkeypatch, engine)
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await cancelled_reply(pilot, app, "Write a long essay about rivers", key="ctrl+c")
        assert app.query(AssistantMessage).last().has_class("cancelled")
        assert app.is_running
        await type_and_send(pilot, app, "/retry")       # and the next turn is fine
        assert app.last_result.finish_reason in ("length", "eos") and not notices(app, "error")
        assert_agree(app, store)
        await pilot.press("ctrl+c")                     # idle: a hint, the app stays
        await pilot.pause()
        assert app.is_running
        assert any("Ctrl+Q" in str(n.message) for n in app._notifications)


@run_async
async def test_a_failed_edit_stays_an_edit(engine, store, monkeypatch):
    """An edited message that is refused (too long) puts the screen back as it was and stays an
    edit: the next Enter is a branch of the original question, not a continuation of it."""
    paced(monkeypatch, engine)
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await cancelled_reply(pilot, app, "First question")
        first = app.conv.messages[0]["id"]
        await type_and_send(pilot, app, "/edit", wait=False)
        await pilot.pause()
        await type_and_send(pilot, app, "word " * 1200)    # does not fit the 1,024-token context
        assert "does not fit the context" in notices(app, "error")[-1]
        assert_agree(app, store)                           # the original question and reply are back
        assert app.edit_index == 0 and app.input.text.startswith("word word")
        await type_and_send(pilot, app, "Second question")
        assert [m["content"] for m in app.conv.messages if m["role"] == "user"] == ["Second question"]
        assert_agree(app, store)
        sid = app.persist.session_id
        assert [r.content for r in store.roots(sid)] == ["First question", "Second question"]
        assert store.get_message(app.conv.messages[0]["id"]).parent_id is None and first != app.conv.messages[0]["id"]


@pytest.mark.parametrize("how", ["send", "retry"])
@run_async
async def test_a_turn_that_fails_after_it_started_leaves_everything_as_it_was(engine, store, monkeypatch, how):
    from luce_engine import ComputeError

    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "First question")
        before = [dict(m) for m in app.conv.messages]
        generate = engine.generate

        def broken(*args, **kwargs):
            for i, r in enumerate(generate(*args, **kwargs)):
                if i == 2:
                    raise ComputeError("the backend failed")
                yield r

        monkeypatch.setattr(engine, "generate", broken)
        await type_and_send(pilot, app, "Second question" if how == "send" else "/retry")
        assert "the backend failed" in notices(app, "error")[-1]
        assert [(m["role"], m["content"]) for m in app.conv.messages] == [(m["role"], m["content"]) for m in before]
        assert_agree(app, store)
        if how == "send":
            assert app.input.text == "Second question"
        monkeypatch.setattr(engine, "generate", generate)
        await type_and_send(pilot, app, "Third question" if how == "send" else "/retry")
        assert not app.query(AssistantMessage).last().has_class("cancelled")
        assert_agree(app, store)


# -- 5: a small context still chats -----------------------------------------------------------------
@run_async
async def test_a_256_token_context_still_answers(tiny_model):
    import luce_engine as le

    app = make_app(le.Engine(tiny_model, n_ctx=256), max_tokens=1024)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "Hi")
        assert not notices(app, "error"), notices(app, "error")
        assert app.last_result is not None and app.last_result.generated_tokens > 0
        await type_and_send(pilot, app, "word " * 300)       # too long: the advice fits the situation
        err = notices(app, "error")[-1]
        assert "does not fit the context" in err and "/new" in err and "/detach" not in err


# -- 11: the busy notice names what is running ----------------------------------------------------------
@run_async
async def test_sending_during_the_history_prefill_says_so(engine, store, monkeypatch):
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "First question")
        sid = app.persist.session_id
        await type_and_send(pilot, app, "/new")
        engine.truncate(0)
        release = __import__("threading").Event()
        prefill = engine.prefill

        def held(*args, **kwargs):
            release.wait(20)
            return prefill(*args, **kwargs)

        monkeypatch.setattr(engine, "prefill", held)
        await app.open_session(sid)
        await type_and_send(pilot, app, "Another", wait=False)
        await pilot.pause()
        messages = [str(n.message) for n in app._notifications]
        release.set()
        await wait_idle(pilot, app)
        assert any("history is still being prefilled" in m for m in messages), messages
        assert not any("reply is still being generated" in m for m in messages)


# -- 7, 10: /model names the threads and gives the plan --plan gives, with its verdict -------------------
@run_async
async def test_model_shows_threads_and_the_plan_with_a_verdict(engine, tiny_model):
    from luce_tui import config, memory

    app = make_app(engine, threads=2)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "/model", wait=False)
        await pilot.pause()
        text = notices(app)[-1]
        assert "device:  CPU, 2 CPU threads" in text
        plan = tiny_model.plan(n_ctx=engine.n_ctx, n_verify_max=engine.n_verify_max, check=False)
        assert config.format_plan(plan) in text
        assert f"fits: needs {config.human_bytes(memory.device_need(plan))} of " in text
        assert text.count("n_ctx") == 1


# -- 8: advice that fits the situation -----------------------------------------------------------------
def test_budget_advice_fits_the_situation():
    from luce_tui.attachments import budget_error

    first = budget_error(5000, 4096, 256, 8192, has_history=False, has_attachments=True, compressor=False)
    assert "/new" not in first and "--pflash-scorer" in first and "/detach" in first
    assert "/compress on" in budget_error(5000, 4096, 256, has_history=True, has_attachments=True, compressor=True)
    typed = budget_error(5000, 4096, 256, has_history=True, has_attachments=False)
    assert "/new" in typed and "/detach" not in typed and "PFlash" not in typed


# -- polish ------------------------------------------------------------------------------------------
def test_menu_help_and_keys_say_each_thing_once():
    from luce_tui import commands

    for value, description in commands.complete("/"):
        assert value.strip() not in description                # the menu shows the name already
    keys = commands.help_text().splitlines()[-2]
    assert "F3 sessions" in keys and "Ctrl+N new chat" in keys and "Ctrl+C" in keys


@run_async
async def test_system_sampling_and_highlight_say_what_they_did(engine):
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "/system", wait=False)
        await pilot.pause()
        assert "the template's default, “You are a helpful AI assistant named SmolLM" in notices(app)[-1]
        await type_and_send(pilot, app, "/sampling temp=0.3", wait=False)
        await pilot.pause()
        assert notices(app)[-1].startswith("sampling set, from the next reply: temperature=0.3")
        await type_and_send(pilot, app, "/highlight", wait=False)
        await pilot.pause()
        assert "no draft model is loaded" in notices(app)[-1]


@run_async
async def test_chips_keep_the_argument_order_and_tell_same_names_apart(engine, tmp_path):
    for d in ("a", "b", "c"):
        (tmp_path / d).mkdir()
    (tmp_path / "a" / "README.md").write_text("first " * 400)    # the largest first: it counts longest
    (tmp_path / "b" / "README.md").write_text("second")
    (tmp_path / "c" / "notes.txt").write_text("third")
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, f"/attach {tmp_path}/a/README.md {tmp_path}/b/README.md "
                                        f"{tmp_path}/c/notes.txt", wait=False)
        await wait_for(pilot, lambda: len(app.pending) == 3, what="three attachments")
        assert [a.name for a in app.pending] == ["a/README.md", "b/README.md", "notes.txt"]


@run_async
async def test_theme_is_remembered_and_export_goes_next_to_the_chats(engine, store, tmp_path, monkeypatch):
    import argparse

    from luce_tui import config, locations, userconfig

    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "/theme light", wait=False)
        await pilot.pause()
        await type_and_send(pilot, app, "Hi")
        monkeypatch.chdir(tmp_path)
        await type_and_send(pilot, app, "/export md", wait=False)
        await pilot.pause()
        path = locations.data_dir() / "exports" / f"luce-chat-{app.persist.session_id}.md"
        assert notices(app)[-1] == f"exported to {path}" and path.is_file()
        assert "system=None" not in path.read_text()
        assert not list(tmp_path.glob("luce-chat-*"))
    args = argparse.Namespace(theme=None)
    userconfig.merge(args, {})
    assert args.theme == "light"                                 # the next start opens in it
    args = argparse.Namespace(theme=None)
    userconfig.merge(args, {"theme": "high-contrast"})
    assert args.theme == "high-contrast"                         # the config file still wins
