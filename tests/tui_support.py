"""Shared pieces of the TUI tests: a real tiny engine, a scripted (oracle) engine, app helpers.

The tiny model has random weights but SmolLM2's tokenizer and chat template, so prompts are
real and replies are deterministic (greedy) gibberish made of real tokens.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import io
import itertools
import threading
import time

import pytest
from rich.console import Console

import luce_engine as le
from luce_engine import Sampling, StepResult
from luce_tui.app import ChatOptions, LuceApp
from luce_tui.runtime import Runtime
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

GREEDY = Sampling.chat_default().updated(temperature=0)


def run_async(fn):
    """Run an `async def` test in a fresh event loop (no pytest async plugin needed); pytest still
    sees the original signature, so fixtures work."""
    assert inspect.iscoroutinefunction(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper
SIZE = (100, 32)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("tui") / "tiny.gguf",
                           TinyConfig(tokenizer_from=le.default_model_path()))
    m = le.Model(path, device="cpu", n_threads=1)
    m.chat_template   # build the tokenizer once per module
    return m


@pytest.fixture
def engine(tiny_model):
    return le.Engine(tiny_model, n_ctx=1024)


@pytest.fixture
def store(tmp_path):
    from luce_sessions import SessionStore

    s = SessionStore(tmp_path / "data")
    yield s
    s.close()


def make_app(engine, store=None, *, compressor=None, **options) -> LuceApp:
    options.setdefault("max_tokens", 8)
    return LuceApp(Runtime(engine, compressor=compressor), GREEDY, ChatOptions(**options), store=store)


def screen_text(app) -> str:
    """The screen as plain text (what a user would read)."""
    w, h = app.size
    console = Console(width=w, height=h, file=io.StringIO(), force_terminal=True, color_system="truecolor",
                      record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


async def wait_for(pilot, cond, timeout: float = 20.0, what: str = "condition"):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)
    await pilot.pause()


async def wait_idle(pilot, app, timeout: float = 20.0):
    """Until the running job (reply or history prefill) has finished and its messages ran."""
    await wait_for(pilot, lambda: app.job is None, timeout, "the engine job to finish")
    await pilot.pause(0.05)


async def type_and_send(pilot, app, text: str, wait: bool = True):
    """Put text into the input and send it as Enter does. (pilot.press waits until the app is idle,
    which during a fast stream is only when the reply is done; submit() returns at once.)"""
    app.input.set_text(text)
    app.input.submit()
    await pilot.pause()
    if wait:
        await pilot.pause(0.05)
        await wait_idle(pilot, app)


def reference_reply(model, messages, max_tokens=8, system=None) -> str:
    """The same turn through the Python API on a fresh engine: what the app must show."""
    from luce_tui.conversation import Conversation

    conv = Conversation(le.Engine(model, n_ctx=1024), system=system)
    return conv.respond(messages, sampling=GREEDY, max_tokens=max_tokens).text


class FakeClock:
    """A clock that advances a fixed step per reading: deterministic rates and ETAs."""

    def __init__(self, step: float = 0.05):
        self._n = itertools.count()
        self.step = step

    def __call__(self) -> float:
        return 1000.0 + next(self._n) * self.step


class ScriptedEngine:
    """ORACLE / SCRIPTED STREAM — for highlighting, thinking and stats displays.

    No draft model exists in this build, so nothing real produces drafted tokens yet. This wrapper
    keeps the real tiny engine for everything about the prompt (tokenizer, template, prefill,
    context) but replaces generation by a fixed script of steps, each a list of (text, drafted)
    runs, and reports fixed timings, so that screenshots are deterministic. `hold_after=N` stops
    after N steps until `release` is set (a mid-stream screenshot).
    """

    PREFILL_MS_PER_TOKEN = 1.0
    DECODE_MS_PER_TOKEN = 20.0

    def __init__(self, engine, script: list[list[tuple[str, bool]]], *, hold_after: int | None = None,
                 n_drafted_per_step: int = 4):
        self._engine = engine
        self.script, self.hold_after, self.n_drafted_per_step = script, hold_after, n_drafted_per_step
        self.release = threading.Event()
        self._stats = {"n_prefill_tokens": 0, "prefill_ms": 0.0, "n_decode_tokens": 0, "decode_ms": 0.0}

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def stats(self) -> dict:
        return {**self._engine.stats(), **self._stats}

    def generate(self, prompt=None, *, sampling=None, max_tokens=256, progress=None, **kw):
        for _ in self._engine.generate(max_tokens=0):   # clears a stale cancel flag, like generate()
            pass
        if prompt:
            self._engine.prefill(prompt, progress=progress)
            self._stats["n_prefill_tokens"] += len(prompt)
            self._stats["prefill_ms"] += self.PREFILL_MS_PER_TOKEN * len(prompt)
        for i, spans in enumerate(self.script):
            if self.hold_after is not None and i == self.hold_after:
                self.release.wait(30)
            drafted = [d for _, d in spans]
            last = i == len(self.script) - 1
            self._stats["n_decode_tokens"] += len(spans)
            self._stats["decode_ms"] += self.DECODE_MS_PER_TOKEN * len(spans)
            yield StepResult(tokens=[0] * len(spans), drafted=drafted,
                             n_drafted=self.n_drafted_per_step if any(drafted) else 0,
                             n_accepted=sum(drafted), text="".join(t for t, _ in spans),
                             finish_reason="eos" if last else None, spans=list(spans))
