"""End to end in a real terminal: `luce-chat` (the Textual app) in tmux with the real SmolLM2 on
CPU, greedy. Ask, see the reply, /save, Ctrl+O through $EDITOR, quit; relaunch with --resume last
and see the history again, resumed from the saved engine state. Skipped where tmux is missing."""
from __future__ import annotations

import os
import re
import sys
import time

import pytest

import luce_engine as le
from luce_engine import Sampling
from luce_tui.conversation import Conversation
from tmux_support import TMUX, Terminal

pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
QUESTION = "What is the capital of France?"


def expected_reply(max_tokens: int) -> str:
    m = le.Model(le.default_model_path(), device="cpu", n_threads=1)
    conv = Conversation(le.Engine(m, n_ctx=1024))
    greedy = Sampling.chat_default().updated(temperature=0)
    return conv.reply(QUESTION, sampling=greedy, max_tokens=max_tokens).text


def test_chat_save_quit_resume_in_tmux(tmp_path):
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nprintf 'Typed in the editor' > \"$1\"\n")
    editor.chmod(0o755)
    env = {"LUCE_DATA_DIR": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "EDITOR": str(editor), "TERM": "xterm-256color", "COLORTERM": "truecolor",
           "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "luce_tui", "--device", "cpu", "--threads", "1", "--temp", "0",
            "--max-tokens", "12", "--max-ctx", "1024"]
    reply = expected_reply(12)
    first_words = " ".join(reply.split()[:3])
    assert first_words

    term = Terminal(env)
    try:
        term.start(argv)
        term.wait_for("/help lists the commands")
        term.keys(QUESTION, literal=True)
        term.keys("Enter")
        screen = term.wait_for("stopped at --max-tokens")
        assert QUESTION in screen and first_words in screen
        term.keys("/save France chat", literal=True)
        term.keys("Enter")
        term.wait_for("saved as “France chat”")
        term.keys("C-o")                                   # $EDITOR writes the message
        term.wait_for("Typed in the editor")
        term.keys("C-u")                                   # clear the line again
        term.wait_gone("Typed in the editor")              # (keys sent while the app resumes could be lost)
        term.keys("/quit", literal=True)
        term.wait_for("/quit")
        term.keys("Enter")
        term.wait_exit()
        term.kill()

        term = Terminal(env)
        term.start(argv + ["--resume", "last"])
        screen = term.wait_for("resumed ")                 # the engine state saved with the chat: no prefill
        assert re.search(r"resumed \d+ tokens in [\d.]+ s \(prefill would take ~[\d.]+ s\)", screen), screen
        assert "opened “France chat” (2 messages)" in screen
        assert QUESTION in screen and first_words in screen
        screen = term.wait_for("luce-chat — France chat")  # a resume this fast can beat the header's redraw
        assert "France chat" in screen.splitlines()[0]     # the header names the chat
        term.keys("C-q")
        term.wait_exit()
    finally:
        term.kill()


def status_line(screen: str) -> str:
    """The app's stats line (the one with the context gauge)."""
    return next((line for line in reversed(screen.splitlines()) if "ctx " in line and "/" in line), "")


def wait_reply_done(term: Terminal, before: str, timeout: float = 90.0) -> str:
    """Until the stats line shows neither `before` (what it showed before the send) nor a running
    prefill or decode."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        screen = term.screen()
        line = status_line(screen)
        if line and line != before and not re.match(r"\s*(cancelling|decode|scoring|prefill \d+%)", line):
            return screen
        time.sleep(0.3)
    raise AssertionError(f"the reply did not finish; the screen shows:\n{term.screen()}")


def test_palette_then_escape_follow_up_and_retry_in_tmux(tmp_path):
    """The first-run path of issue 15: Ctrl+P runs a command; Esc stops a reply; the follow-up
    and /retry after it answer (no "error: cancelled"), and the partial reply stays on screen."""
    env = {"LUCE_DATA_DIR": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "TERM": "xterm-256color", "COLORTERM": "truecolor", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "luce_tui", "--device", "cpu", "--threads", "1", "--temp", "0",
            "--max-tokens", "300", "--max-ctx", "2048"]
    term = Terminal(env)
    try:
        term.start(argv)
        term.wait_for("/help lists the commands")
        term.keys("C-p")
        term.wait_for("Search for commands")
        term.wait_for("/attach PATH… [--compress|--full]")      # brackets drawn as written
        term.keys("stats", literal=True)
        term.wait_for("speed of the last reply")
        term.keys("Enter")
        term.wait_for("last reply: none yet")                    # the command ran, the palette closed
        term.wait_gone("Search for commands")

        term.keys("Write a long story about a dragon.", literal=True)
        term.keys("Enter")
        t0 = time.monotonic()
        while "decode" not in status_line(term.screen()):
            assert time.monotonic() - t0 < 60, term.screen()
            time.sleep(0.1)
        term.keys("Escape")
        screen = wait_reply_done(term, "")
        assert status_line(screen).strip().startswith("cancelled · ")

        before = status_line(screen)
        term.keys("And what did it eat?", literal=True)
        term.wait_for("And what did it eat?")
        term.keys("Enter")
        screen = wait_reply_done(term, before)
        assert "error:" not in screen and "cancelled" not in status_line(screen), screen

        before = status_line(screen)
        term.keys("/retry", literal=True)
        term.wait_for("/retry")
        term.keys("Enter")
        screen = wait_reply_done(term, before)
        assert "error:" not in screen and "cancelled" not in status_line(screen), screen
        term.keys("C-q")
        term.wait_exit()
    finally:
        term.kill()
