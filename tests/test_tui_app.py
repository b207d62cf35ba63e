"""The Textual app driven through Pilot with a real tiny engine: send, stream, cancel, attach,
edit/retry branches, themes, input conveniences. Greedy sampling, short replies."""
from __future__ import annotations

import time

import pytest

from luce_tui.screens.dialogs import ConfirmScreen
from luce_tui.widgets.chips import Chip
from luce_tui.widgets.messages import AssistantMessage, Notice, UserMessage
from tui_support import (SIZE, run_async, ScriptedEngine, engine, make_app, reference_reply,  # noqa: F401
                         screen_text, store, tiny_model, type_and_send, wait_for, wait_idle)


def notices(app, kind=None):
    return [n for n in app.query(Notice) if kind is None or n.kind == kind]


def last_notice(app, kind=None) -> str:
    found = notices(app, kind)
    return str(found[-1].render()) if found else ""


@run_async
async def test_send_streams_reply_and_saves_it(engine, store, tiny_model):
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        app.input.set_text("Hello there")
        await pilot.press("enter")                    # the real key, once
        await wait_idle(pilot, app)
        expected = reference_reply(tiny_model, [{"role": "user", "content": "Hello there"}])
        assert expected.strip()
        msgs = app.conv.messages
        assert [m["role"] for m in msgs] == ["user", "assistant"]
        assert msgs[1]["content"] == expected
        reply_w = app.query_one(AssistantMessage)
        assert reply_w.text == expected and not reply_w.streaming
        assert "tok/s" in screen_text(app)            # the reply's footer and the stats line
        assert "ctx " in screen_text(app)
        assert app.input.text == ""
        # both messages are in the store, with stats and provenance runs
        path = store.path(app.persist.session_id)
        assert [(m.role, m.content) for m in path] == [("user", "Hello there"), ("assistant", expected)]
        assert path[1].stats["finish_reason"] == "length" and path[1].stats["generated_tokens"] == 8
        assert path[1].spans() == [(expected, False)]
        assert path[1].parent_id == path[0].id
        # a second turn reuses the context: only the new message is prefilled
        await type_and_send(pilot, app, "And then?")
        assert app.last_result.reused_tokens >= path[1].stats["prompt_tokens"]
        assert len(store.path(app.persist.session_id)) == 4


@run_async
async def test_queue_is_drained_per_frame_not_per_token(engine):
    """100 steps that arrive at once reach the widget in a few batched updates."""
    script = [[(f"w{i} ", False)] for i in range(100)]
    app = make_app(ScriptedEngine(engine, script), max_tokens=200)
    calls = []
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "go", wait=False)
        await wait_for(pilot, lambda: app.query(AssistantMessage), what="the reply widget")
        w = app.query_one(AssistantMessage)
        original = w.append

        async def counting(spans):
            calls.append(len(spans))
            await original(spans)

        w.append = counting
        await wait_idle(pilot, app)
        assert w.text == "".join(f"w{i} " for i in range(100))
    assert sum(calls) <= 100 and len(calls) < 20


@run_async
async def test_escape_cancels_and_keeps_partial_reply(engine, store):
    script = [[(f"word{i} ", False)] for i in range(400)]
    scripted = ScriptedEngine(engine, script, hold_after=5)
    app = make_app(scripted, store, max_tokens=500)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "Tell me a long story", wait=False)
        await wait_for(pilot, lambda: app.query(AssistantMessage) and "word4" in app.query_one(AssistantMessage).text,
                       what="the first words")
        await pilot.press("escape")
        scripted.release.set()
        await wait_idle(pilot, app)
        assert app.last_result.finish_reason == "cancelled"
        reply = app.conv.messages[-1]
        assert reply["role"] == "assistant" and reply["content"].startswith("word0 word1")
        assert len(reply["content"].split()) < 400
        assert "cancelled" in screen_text(app)
        assert app.query_one(AssistantMessage).has_class("cancelled")
        saved = store.path(app.persist.session_id)[-1]
        assert saved.cancelled and saved.content == reply["content"]


@run_async
async def test_escape_cancels_real_engine(engine, tiny_model, monkeypatch):
    # The tiny model writes 900 tokens in well under a second; on a loaded machine it could finish
    # before the key press arrives. Each token is made to take 2 ms, so Escape lands mid-generation.
    generate = engine.generate

    def paced(*args, **kwargs):
        for r in generate(*args, **kwargs):
            time.sleep(0.002)
            yield r

    monkeypatch.setattr(engine, "generate", paced)
    app = make_app(engine, max_tokens=900)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "Write a long essay", wait=False)
        await wait_for(pilot, lambda: app.query(AssistantMessage) and app.query_one(AssistantMessage).text,
                       what="streamed text")
        await pilot.press("escape")
        await wait_idle(pilot, app)
        r = app.last_result
        assert r.finish_reason == "cancelled" and 0 < r.generated_tokens < 900
        assert app.conv.messages[-1]["content"] == r.text
        # the engine is usable afterwards (a new chat: the tiny model fills most of the context fast)
        await type_and_send(pilot, app, "/new")
        app.opts.max_tokens = 8
        await type_and_send(pilot, app, "Short one")
        assert app.last_result.finish_reason in ("length", "eos")
        assert app.last_result.generated_tokens > 0


@run_async
async def test_attach_counts_tokens_and_goes_into_the_prompt(engine, store, tmp_path, tiny_model):
    f = tmp_path / "notes.txt"
    f.write_text("The quick brown fox jumps over the lazy dog.\n" * 5)
    n = len(tiny_model.tokenizer.encode(f.read_text(), parse_special=False))
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, f"/attach {f}", wait=False)
        await wait_for(pilot, lambda: app.pending, what="the attachment")
        chip = f"[notes.txt · {n:,} tok]"
        assert chip in [str(c.render()) for c in app.query(Chip)]
        assert chip in screen_text(app)
        await type_and_send(pilot, app, "Summarise the file")
        user = app.conv.messages[0]
        assert user["attachments"][0]["name"] == "notes.txt"
        prompt = app.conv.render(app.conv.messages[:1])
        assert "notes.txt:\n```\nThe quick brown fox" in prompt and "Summarise the file" in prompt
        assert not app.pending and not app.query(Chip)
        saved = store.path(app.persist.session_id)[0]
        assert saved.content == "Summarise the file"
        assert [a.name for a in saved.attachments] == ["notes.txt"] and saved.attachments[0].n_tokens == n
        assert app.query_one(UserMessage).render().plain.endswith(chip)


@run_async
async def test_attach_over_budget_is_refused_with_advice(engine, store, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("lorem ipsum dolor sit amet " * 130)       # ~1,300 tokens: > n_ctx 1,024, < the 2,048 trained
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, f"/attach {big}", wait=False)
        await wait_for(pilot, lambda: app.pending, what="the attachment")
        assert "will not fit" in last_notice(app, "warning") and "--max-ctx" in last_notice(app, "warning")
        await type_and_send(pilot, app, "What does it say?")
        err = last_notice(app, "error")
        assert "does not fit the context" in err and "restart with --max-ctx 1536" in err and "/detach" in err
        # nothing was sent or saved; the text and the attachment are back for another try
        assert app.conv.messages == [] and app.persist.session_id is None
        assert app.input.text == "What does it say?" and [a.name for a in app.pending] == ["big.txt"]
        assert not app.query(UserMessage)
        await type_and_send(pilot, app, "/detach", wait=False)
        await pilot.pause()
        assert app.pending == []
        app.input.clear()
        await type_and_send(pilot, app, "What does it say?")
        assert len(app.conv.messages) == 2


@run_async
async def test_attach_refuses_binary_and_missing_files(engine, tmp_path):
    binary = tmp_path / "image.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, f"/attach {binary}", wait=False)
        await wait_for(pilot, lambda: notices(app, "error"), what="an error")
        assert "image.bin looks like a binary file" in last_notice(app, "error")
        await type_and_send(pilot, app, f"/attach {tmp_path / 'nope.txt'}", wait=False)
        await wait_for(pilot, lambda: len(notices(app, "error")) == 2, what="a second error")
        assert "no such file" in last_notice(app, "error")
        assert app.pending == []


@run_async
async def test_retry_and_edit_make_branches(engine, store):
    app = make_app(engine, store, max_tokens=4)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "First question")
        sid = app.persist.session_id
        user_id = app.conv.messages[0]["id"]
        first_reply_id = app.conv.messages[1]["id"]

        await type_and_send(pilot, app, "/retry")
        assert len(app.conv.messages) == 2 and len(app.query(AssistantMessage)) == 1
        assert [m.id for m in store.children(user_id)] == [first_reply_id, app.conv.messages[1]["id"]]
        assert store.get_session(sid).current_leaf == app.conv.messages[1]["id"]

        await type_and_send(pilot, app, "/edit", wait=False)
        await pilot.pause()
        assert app.input.text == "First question" and app.edit_index == 0
        await type_and_send(pilot, app, "Second question")
        assert [m["content"] for m in app.conv.messages if m["role"] == "user"] == ["Second question"]
        assert len(app.query(UserMessage)) == 1 and len(app.query(AssistantMessage)) == 1
        roots = store.roots(sid)
        assert [r.content for r in roots] == ["First question", "Second question"]   # siblings
        assert [m.content for m in store.path(sid)][0] == "Second question"
        # the engine context follows the branch: it starts with the edited prompt
        assert app.engine.tokens[: len(app.conv.encode(app.conv.messages[:1]))] == app.conv.encode(
            app.conv.messages[:1])


@run_async
async def test_retry_without_reply_and_unknown_command(engine):
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "/retry", wait=False)
        await pilot.pause()
        assert "no reply to retry" in last_notice(app, "error")
        await type_and_send(pilot, app, "/bogus", wait=False)
        await pilot.pause()
        assert "unknown command /bogus" in last_notice(app, "error")
        await type_and_send(pilot, app, "/sampling top_k=", wait=False)
        await pilot.pause()
        assert "expected an integer" in last_notice(app, "error")


@run_async
async def test_theme_switch_and_user_theme(engine, tmp_path):
    user_themes = tmp_path / "themes"
    user_themes.mkdir()
    (user_themes / "mine.toml").write_text('name = "mine"\nprimary = "#123456"\ndark = true\n'
                                           '[variables]\ndraft-highlight = "#abcdef"\n')
    (user_themes / "broken.toml").write_text('primary = \n')
    app = make_app(engine, user_themes=user_themes)
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "dark"
        assert {"dark", "light", "high-contrast", "mine"} <= set(app.available_themes)
        assert any("broken.toml" in str(n.render()) for n in notices(app, "warning"))
        dark = app.theme_variables["draft-highlight"]
        await type_and_send(pilot, app, "/theme light", wait=False)
        await pilot.pause()
        assert app.theme == "light" and app.theme_variables["draft-highlight"] != dark
        await type_and_send(pilot, app, "/theme mine", wait=False)
        await pilot.pause()
        assert app.theme_variables["draft-highlight"] == "#abcdef"
        await type_and_send(pilot, app, "/theme nope", wait=False)
        await pilot.pause()
        assert "unknown theme 'nope'" in last_notice(app, "error") and app.theme == "mine"


@run_async
async def test_highlight_toggle_shows_drafted_runs(engine):
    script = [[("plain ", False)], [("drafted ", True), ("run ", True)], [("end", False)]]
    app = make_app(ScriptedEngine(engine, script))
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "go")
        w = app.query_one(AssistantMessage)
        assert w.answer_spans == [("plain ", False), ("drafted run ", True), ("end", False)]
        assert not w.highlight and w.markdown.live.display and not w.provenance.live.display
        await pilot.press("f2")
        await pilot.pause()
        assert w.highlight and w.provenance.live.display and not w.markdown.live.display
        content = w.provenance.contents()[-1]
        drafted = [content.plain[s.start:s.end] for s in content.spans if "draft-highlight" in str(s.style)]
        assert drafted == ["drafted run "]
        assert app.last_result.acceptance == 0.5 and app.last_result.accept_length == 4 / 3
        await type_and_send(pilot, app, "/highlight", wait=False)
        await pilot.pause()
        assert not w.highlight


@run_async
async def test_thinking_block_collapses_when_the_answer_starts(engine):
    script = [[("<think>", False)], [("Let me", False)], [(" think.", False)], [("</think>", False)],
              [("\n\nThe answer", False)], [(" is 42.", False)]]
    scripted = ScriptedEngine(engine, script, hold_after=3)
    app = make_app(scripted)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "think", wait=False)
        await wait_for(pilot, lambda: app.query(AssistantMessage) and "think." in app.query_one(AssistantMessage).think,
                       what="the thoughts")
        box = app.query_one(AssistantMessage).query_one("#think")
        assert box.display and not box.collapsed
        scripted.release.set()
        await wait_idle(pilot, app)
        w = app.query_one(AssistantMessage)
        assert box.collapsed and w.think == "Let me think." and w.answer_text == "The answer is 42."
        assert app.conv.messages[-1]["content"] == "<think>Let me think.</think>\n\nThe answer is 42."


@run_async
async def test_input_history_completion_and_newlines(engine):
    from textual import events

    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "/stats", wait=False)
        await type_and_send(pilot, app, "/model", wait=False)
        await pilot.pause()
        assert "memory plan" in last_notice(app) and "draft:   none" in last_notice(app)
        await pilot.press("up")
        assert app.input.text == "/model"
        await pilot.press("up")
        assert app.input.text == "/stats"
        await pilot.press("down", "down")
        assert app.input.text == ""
        await pilot.press("/", "t", "h")
        menu = app.query_one("#completions")
        assert menu.display and menu.values == ["/theme "]
        await pilot.press("tab")
        assert app.input.text == "/theme "
        assert "/theme high-contrast" in menu.values           # now its argument is completed
        await pilot.press("l")
        assert menu.display and menu.values == ["/theme light"]
        # Enter that comes before the menu caught up with the text (a paste, tmux, a fast typist)
        # sends what was typed, not the menu's entry for an older prefix
        app.input.clear()
        await pilot.press("/", "t", "h", "e", "m", "e", "space")
        assert menu.display and menu.values[0] != "/theme light"
        app.input.insert("light")                # no pause: the Changed message is still queued
        await app.input._on_key(events.Key("enter", None))
        assert app.input.prompt_history[-1] == "/theme light"
        app.input.clear()
        await pilot.press("a", "ctrl+j", "b")
        assert app.input.text == "a\nb"
        assert app.input.size.height == 2        # grew with its second line


@run_async
async def test_large_paste_offers_attachment(engine):
    from textual import events

    app = make_app(engine, paste_threshold=100)
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(events.Paste("x" * 50))
        await pilot.pause()
        assert app.input.text == "x" * 50                      # small: pasted inline
        app.input.clear()
        app.post_message(events.Paste("word " * 100))
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.click("#yes")
        await wait_for(pilot, lambda: app.pending, what="the attachment")
        assert app.pending[0].name == "paste-1.txt" and app.pending[0].text == "word " * 100
        assert app.input.text == ""


@run_async
async def test_palette_provider_has_the_commands(engine):
    from luce_tui.palette import LuceCommands

    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        provider = LuceCommands(app.screen)
        hits = [h async for h in provider.search("sess")]
        assert any("/sessions" in str(h.match_display) for h in hits)
        found = [h async for h in provider.search("highl")]
        await found[0].command()
        await pilot.pause()
        assert app.highlight is True
        attach = [h async for h in provider.search("attach")][0]
        await attach.command()
        await pilot.pause()
        assert app.input.text == "/attach "


@run_async
async def test_prefill_drafter_without_a_compressor_says_so(engine):
    from luce_tui.cli import build_parser, speculative_note

    assert speculative_note(build_parser().parse_args(["--pflash-scorer", "/models/d.gguf"])) is None
    note = speculative_note(build_parser().parse_args(["--pflash-mode", "always"]))
    assert "needs a scorer" in note   # never faked: without a scorer nothing is compressed
    app = make_app(engine, note=note, pflash_scorer="/models/d.gguf")
    async with app.run_test(size=SIZE) as pilot:
        assert "needs a scorer" in last_notice(app, "warning")
        await type_and_send(pilot, app, "/model", wait=False)
        await pilot.pause()
        assert "/models/d.gguf (compression off)" in last_notice(app)
