"""`luce-chat --remote URL` in a real terminal: the Textual app in tmux streaming from `luce-chat serve`
and from llama-cpp-python's own server (`python -m llama_cpp.server`) on the same GGUF. Send a
message, see the greedy reply rendered (the one the server gives the official client for the same
request), quit. Skipped where tmux is missing."""
from __future__ import annotations

import os
import sys

import openai
import pytest

import luce_engine as le
from server_support import llama_cpp_server, serve
from tmux_support import TMUX, Terminal

pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
QUESTION = "What is the capital of France?"
# the app's default sampling, sent as it sends it (greedy with --temp 0)
APP_SAMPLING = dict(temperature=0, top_p=0.95, extra_body={"top_k": 40, "min_p": 0.05, "repeat_penalty": 1.05})


def _reference(url: str, max_tokens: int) -> str:
    c = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    model = c.models.list().data[0].id
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}],
                                  max_tokens=max_tokens, **APP_SAMPLING)
    return r.choices[0].message.content


def _chat_in_tmux(tmp_path, url: str, label: str) -> None:
    reply = _reference(url, 12)
    words = reply.split()
    assert words, reply
    env = {"LUCE_DATA_DIR": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "TERM": "xterm-256color", "COLORTERM": "truecolor", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "HOME": str(tmp_path)}
    term = Terminal(env)
    try:
        term.start([sys.executable, "-m", "luce_tui", "--remote", url, "--temp", "0", "--max-tokens", "12"])
        screen = term.wait_for("/help lists the commands")
        assert label in screen                                  # the server's model, named in the header/welcome
        term.keys(QUESTION, literal=True)
        term.keys("Enter")
        screen = term.wait_for("stopped at --max-tokens", timeout=90)
        assert QUESTION in screen
        assert " ".join(words) in " ".join(screen.split()), screen   # the whole reply, rendered (maybe wrapped)
        assert "12 tok @" in screen                             # its stats, from the server's usage
        term.keys("C-q")
        term.wait_exit()
    finally:
        term.kill()


def test_remote_app_against_our_server_in_tmux(tmp_path):
    with serve("--max-ctx", "2048") as s:
        _chat_in_tmux(tmp_path, s.url, "SmolLM2-135M-Instruct")


def test_remote_app_against_llama_cpp_python_server_in_tmux(tmp_path):
    with llama_cpp_server(le.default_model_path()) as url:
        _chat_in_tmux(tmp_path, url, "SmolLM2-135M-Instruct")
