"""SVG snapshots of the app (pytest-textual-snapshot): streamed reply with highlighted draft
tokens, thinking block, stats line, attachment chip, error message.

Replies here come from tui_support.ScriptedEngine — an ORACLE / SCRIPTED stream: no draft model
exists in this build, so which tokens count as "drafted" is scripted to exercise the highlighting;
timings are fixed and clocks fake, so the pictures are deterministic. Update the pictures after an
intended change with `pytest tests/test_tui_snapshots.py --snapshot-update` and look at them.
"""
from __future__ import annotations

import pytest

from luce_tui.widgets.messages import AssistantMessage, Notice
from luce_tui.widgets.stats import LiveStats, StatsBar
from tui_support import (SIZE, FakeClock, ScriptedEngine, engine, make_app,  # noqa: F401
                         tiny_model, wait_for, wait_idle)

pytest.importorskip("pytest_textual_snapshot")

DRAFTED_SCRIPT = [
    [("Speculative ", False)],
    [("decoding ", True), ("lets a small ", True), ("draft ", True), ("model ", False)],
    [("propose ", True), ("several ", True), ("tokens", False)],
    [(" at once; ", False)],
    [("the target ", True), ("model ", True), ("verifies ", True), ("them ", True), ("in one ", False)],
    [("batch.", False)],
    [(" Accepted ", True), ("tokens ", True), ("are shown ", False)],
    [("highlighted.", False)],
]


def deterministic(app):
    app.clock, app.job_clock = FakeClock(), FakeClock()
    return app


async def send(pilot, app, text):
    app.input.set_text(text)
    await pilot.press("enter")


def test_streaming_reply_with_highlighted_draft_tokens(snap_compare, engine):
    # ORACLE / SCRIPTED stream: the drafted flags are scripted (no draft model yet), see module doc.
    scripted = ScriptedEngine(engine, DRAFTED_SCRIPT, hold_after=6)
    app = deterministic(make_app(scripted, highlight=True, max_tokens=64))
    held = "".join(t for step in DRAFTED_SCRIPT[:6] for t, _ in step)

    async def run_before(pilot):
        await send(pilot, app, "How does speculative decoding work?")
        await wait_for(pilot, lambda: app.query(AssistantMessage) and app.query_one(AssistantMessage).text == held
                       and app.live.n_steps == 6, what="six streamed steps")
        await pilot.pause(0.1)

    try:
        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
    finally:
        scripted.release.set()


def test_thinking_block_collapsed_after_answer(snap_compare, engine):
    script = [[("<think>", False)], [("The user asks for the answer. ", False)],
              [("It is 42, the classic one.", False)], [("</think>", False)],
              [("\n\nThe answer is **42**.", False)], [("\n\n- short\n- exact", False)]]
    app = deterministic(make_app(ScriptedEngine(engine, script), max_tokens=64))

    async def run_before(pilot):
        await send(pilot, app, "What is the answer?")
        await wait_for(pilot, lambda: app.job is None and app.query(AssistantMessage), what="the reply")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_stats_line_prefill_with_eta_and_cached_prefix(snap_compare, engine):
    app = deterministic(make_app(engine))

    async def run_before(pilot):
        await pilot.pause()
        live = LiveStats(phase="prefill", prompt_tokens=6144, reused=2048, prefill_done=1536, prefill_total=4096,
                         prefill_t0=100.0, ctx_used=2048 + 1536, ctx_max=4096)
        app.query_one(StatsBar).show(live, now=103.0)      # 1,536 tok in 3 s -> 5 s to go
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_attachment_chip(snap_compare, engine, tmp_path):
    f = tmp_path / "repo.txt"
    f.write_text("def main():\n    print('hello from the attached file')\n" * 20)
    app = deterministic(make_app(engine))

    async def run_before(pilot):
        await send(pilot, app, f"/attach {f}")
        await wait_for(pilot, lambda: app.pending, what="the attachment")
        app.input.set_text("Explain this code")
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_error_message(snap_compare, engine, tmp_path):
    f = tmp_path / "photo.jpg"
    f.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(200))
    app = deterministic(make_app(engine))

    async def run_before(pilot):
        await send(pilot, app, f"/attach {f}")
        await wait_for(pilot, lambda: any(n.kind == "error" for n in app.query(Notice)), what="the error")
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
