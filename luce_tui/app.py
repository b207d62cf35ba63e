"""The luce-chat Textual app: chat view, input, stats line; generation through generation.Job.

Layout: header · chat (one widget per message) · completion menu · attachment chips · input ·
stats line · footer. The slash commands live in app_commands.CommandsMixin; saving and loading
chats in persist.Persistence.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Footer, Header

from luce_tui import config, events, themes
from luce_tui.app_commands import CommandsMixin
from luce_tui.attachments import Attachment, budget_error
from luce_tui.conversation import Conversation
from luce_tui.generation import Job, JobFailed, JobFinished, JobStarted
from luce_tui.palette import LuceCommands
from luce_tui.widgets.chips import AttachmentChips
from luce_tui.widgets.messages import AssistantMessage, Notice, UserMessage, message_widgets
from luce_tui.widgets.prompt import CompletionMenu, PromptInput
from luce_tui.widgets.stats import LiveStats, StatsBar, reply_summary

FRAME = 1 / 30          # how often the UI drains the generation queue


@dataclasses.dataclass
class ChatOptions:
    """Everything the app needs besides the engine (from flags + config file, or set by tests)."""

    max_tokens: int = 1024
    system: str | None = None
    theme: str = "dark"
    highlight: bool = False
    paste_threshold: int = 2000
    resume: str | None = None
    draft: str | None = None
    pflash_scorer: str | None = None
    note: str | None = None                 # shown at start (e.g. speculative decoding unavailable)
    history_file: Path | None = None        # prompt history shared with the plain mode
    user_themes: Path | None = None
    reply_reserve: int = 256                # tokens of room a reply needs for a message to be sent
    threads: int | None = None              # CPU threads the engine computes with (shown in /model)
    state_budget_gib: float = 4.0           # engine state files of saved chats (session_state.py); 0: none


class BudgetError(Exception):
    """The message (with its attachments) does not fit the context; the text says what to do."""


class LuceApp(CommandsMixin, App):
    TITLE = "luce-chat"
    COMMANDS = App.COMMANDS | {LuceCommands}
    CSS = """
    #chat { height: 1fr; scrollbar-size-vertical: 1; }
    #composer { height: auto; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "cancel"),
        # Ctrl+C stops a reply, as in llama-cli and the plain loop (priority: before the input's copy)
        Binding("ctrl+c", "interrupt", "cancel", show=False, priority=True),
        Binding("f2", "toggle_highlight", "highlight"),
        Binding("f3", "sessions", "sessions"),
        Binding("ctrl+o", "edit_in_editor", "editor"),
        Binding("ctrl+n", "new_chat", "new chat", show=False),
    ]

    def __init__(self, runtime, sampling, options: ChatOptions | None = None, *, store=None, store_error: str | None = None,
                 conv=None):
        """conv: a RemoteConversation (--remote; runtime is None then): the model is on a server."""
        super().__init__()
        self.sampling = sampling
        self.opts = options or ChatOptions()
        self.remote = conv is not None
        if conv is None:
            self.runtime, self.engine, self.model = runtime, runtime.engine, runtime.engine.model
            conv = Conversation(self.engine, system=self.opts.system, speculator=runtime.speculator,
                                compressor=runtime.compressor)
        else:
            self.runtime, self.engine, self.model = runtime, conv.engine, conv.model
        self.conv = conv
        self.store, self.store_error = store, store_error
        self.persist = None
        if store is not None:
            from luce_tui.persist import Persistence

            settings = {"model": self.model.name, "model_path": self.model.path}
            if self.opts.system is not None:   # nothing to say otherwise (an export would print "None")
                settings["system"] = self.opts.system
            self.persist = Persistence(store, settings)
        self.states = None
        if store is not None and not self.remote:   # a server's model keeps its own state
            from luce_tui.session_state import SessionStates

            self.states = SessionStates(store.data_dir, self.engine, budget_gib=self.opts.state_budget_gib,
                                        report=self._warn_from_any_thread, busy=lambda: self.job is not None,
                                        speculator=runtime.speculator)
        self.highlight = self.opts.highlight
        self.pending: list[Attachment] = []
        self.job: Job | None = None
        self.edit_index: int | None = None
        self.live = LiveStats(ctx_max=self.engine.n_ctx, ctx_used=self.engine.n_past)
        self.last_result = None
        self._paste_count = 0
        # Time sources of the stats line: `clock` on the UI side, `job_clock` stamps the worker's
        # events (decode speed, ETA); tests replace both to get deterministic numbers.
        self.clock = self.job_clock = time.monotonic
        self._history = self._load_history()

    # -- layout ----------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        yield VerticalScroll(id="chat")
        with Vertical(id="composer"):
            yield CompletionMenu(id="completions")
            yield AttachmentChips(id="chips")
            yield PromptInput(id="input", history=self._history, paste_threshold=self.opts.paste_threshold,
                              themes=lambda: sorted(self.available_themes))
        yield StatsBar(id="stats")
        yield Footer()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(themes.VARIABLE_DEFAULTS)

    async def on_mount(self) -> None:
        loaded, warnings = themes.load_themes(self.opts.user_themes)
        for t in loaded:
            self.register_theme(t)
        if self.opts.theme in self.available_themes:
            self.theme = self.opts.theme
        else:
            warnings.append(f"unknown theme {self.opts.theme!r}; using dark (/theme lists them)")
            self.theme = "dark"
        self.input.menu = self.query_one(CompletionMenu)
        self.input.cursor_blink = not self.is_headless   # steady screenshots in tests
        self._timer = self.set_interval(FRAME, self._drain, pause=True)
        self.chat.anchor()
        self._update_title()
        m = self.model
        ctx = f" · n_ctx {self.engine.n_ctx:,}" if self.engine.n_ctx else ""
        await self.say(f"luce-chat: /help lists the commands, Ctrl+P opens the palette · {self.model_label} "
                       f"({m.arch}) on {m.device}{ctx}")
        if self.remote:
            await self.say("the model runs on the server: attachment sizes are estimates, PFlash and --draft "
                           "are the server's settings")
        if self.opts.note:
            await self.say(self.opts.note, "warning")
        for w in warnings:
            await self.say(w, "warning")
        if self.store_error:
            await self.say(f"chats are not saved this time: {self.store_error}", "warning")
        elif self.store is not None and self.store.recovery_message:
            await self.say(self.store.recovery_message, "warning")
        self._show_stats()
        self.input.focus()
        if self.opts.resume is not None:
            from luce_tui.commands import CommandError

            try:
                await self.cmd_resume(self.opts.resume)
            except CommandError as e:
                await self.say(str(e), "error")

    @property
    def chat(self) -> VerticalScroll:
        return self.query_one("#chat", VerticalScroll)

    @property
    def input(self) -> PromptInput:
        return self.query_one("#input", PromptInput)

    def _update_title(self) -> None:
        title = self.persist.title if self.persist and self.persist.title else "new chat"
        self.sub_title = f"{title} · {self.model_label} · {self.model.device}"

    @property
    def model_label(self) -> str:
        """The model as people name it: its file name (a GGUF's general.name is often a training tag)."""
        # (llama.cpp's server names its model by the file's path)
        name = Path(self.model.name if self.remote else self.model.path).name
        return name[:-5] if name.endswith(".gguf") else name

    async def say(self, text: str, kind: str = "info") -> Notice:
        """A notice in the chat (command output, warnings, errors)."""
        w = Notice(text, kind)
        await self.chat.mount(w)
        self.chat.scroll_end(animate=False)
        return w

    def _warn_from_any_thread(self, text: str) -> None:
        try:
            self.call_from_thread(self.say, text, "warning")
        except RuntimeError:   # on the UI thread itself
            self.call_later(self.say, text, "warning")

    def _save_state_soon(self) -> None:
        if self.states is not None and self.persist is not None:
            self.states.save_soon(self.persist.session_id)

    def _show_stats(self) -> None:
        if self.live.phase == "idle":
            self.live.ctx_used = self.engine.n_past
        self.query_one(StatsBar).show(self.live, self.clock())

    # -- input -----------------------------------------------------------------------------------
    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        text = event.text
        self._remember(text)
        if text.lstrip().startswith("/") and not text.lstrip().startswith("//"):
            self.input.clear()
            await self.run_command(text.strip())
            return
        if text.lstrip().startswith("//"):   # a message that starts with a slash
            text = text.lstrip()[1:]
        await self.send(text)

    def prefill_input(self, text: str) -> None:
        self.input.set_text(text)
        self.input.focus()

    # -- sending and generation --------------------------------------------------------------------
    def _busy(self) -> bool:
        return self.job is not None

    def _busy_text(self) -> str:
        if self.job is not None and self.job.kind == "prefill":
            return ("the saved chat's history is still being prefilled: wait a moment, or press Esc to stop it "
                    "(the next reply then prefills what is missing)")
        return "a reply is still being generated: wait, or press Esc to cancel it"

    async def send(self, text: str) -> None:
        if self._busy():
            self.notify(self._busy_text(), severity="warning")
            return
        if self.input.menu is not None:
            self.input.menu.hide()
        text = text.rstrip()
        atts = list(self.pending)
        msg = {"role": "user", "content": text,
               "attachments": [dict(a.part, n_tokens=a.n_tokens) for a in atts]}
        edit = self.edit_index
        if edit is not None:
            base = self.conv.messages[:edit]
            await self._remove_from(edit)
            self.edit_index = None
        else:
            base = list(self.conv.messages)
        self.pending = []
        self._refresh_chips()
        self.input.clear()
        await self._start_reply(base, msg, atts, edit=edit)

    async def _start_reply(self, base: list[dict], msg: dict | None, atts: list[Attachment], *,
                           edit: int | None = None) -> None:
        """A reply to base (+ msg, a new user message; None for /retry, where base ends with it).
        The messages of self.conv.messages beyond base are off the screen until the reply starts
        (edit: the index /edit replaces); a turn that fails before it starts puts them back."""
        history = base + ([msg] if msg else [])
        index = len(history)
        widgets = []
        if msg is not None:
            widgets.append(UserMessage(msg, index - 1))
        thinking = self.conv.render(history).rstrip().endswith("<think>")
        reply_w = AssistantMessage(index, highlight=self.highlight, thinking=thinking)
        widgets.append(reply_w)
        await self.chat.mount_all(widgets)
        self.chat.anchor()
        conv, opts = self.conv, self.opts

        def admit(prompt: list[int]) -> None:   # (a remote conversation has no prompt tokens to check)
            problem = budget_error(len(prompt), self.engine.n_ctx, self._reply_reserve(), self.model.n_ctx_train,
                                   **self._advice_context(history))
            if problem:
                raise BudgetError(problem)

        def work(job: Job):
            return conv.run_turn(history, sampling=self.sampling, max_tokens=opts.max_tokens, emit=job.emit,
                                 stop=job.cancel_requested, admit=admit, clock=job.clock)

        job = Job("reply", work, self, cancel=conv.cancel, clock=self.job_clock)
        job.info = {"msg": msg, "atts": atts, "widgets": widgets, "reply_w": reply_w, "edit": edit,
                    "base_len": len(base), "parent": base[-1].get("id") if base else None}
        self._start_job(job)

    def _start_job(self, job: Job, note: str = "") -> None:
        self.job = job
        self.live.note = note
        job.start()
        self._timer.resume()

    def _end_job(self) -> None:
        self._timer.pause()
        self.job = None
        self.live.phase, self.live.note = "idle", ""
        self._show_stats()

    async def _drain(self) -> None:
        if self.job is not None:
            await self._apply(self.job, self.job.drain())
            self._show_stats()

    async def _apply(self, job: Job, evs: list[events.Event]) -> None:
        """One frame's worth of queued events: one widget update for all the new text."""
        spans: list[tuple[str, bool]] = []
        live = self.live
        for ev in evs:
            match ev:
                case events.Started(reused=reused, prompt_tokens=n, t=t):
                    live.start(t, reused, n)
                    live.ctx_used = reused
                case events.PrefillProgress(done=done, total=total, t=t):
                    live.progress(t, done, total)
                    live.ctx_used = live.reused + done
                case events.ScoringProgress(done=done, total=total, t=t):
                    live.score(t, done, total)
                case events.Step(t=t):
                    live.step(t, ev)
                    live.ctx_used = live.prompt_tokens + live.decode_tokens
                    spans.extend(ev.spans)
        if spans and job.kind == "reply":
            await job.info["reply_w"].append(spans)

    async def on_job_started(self, event: JobStarted) -> None:
        job = event.job
        job.started = True
        msg = job.info.get("msg")
        if job.kind == "reply" and msg is not None and self.persist is not None:
            try:
                msg["id"] = self.persist.save_user(msg, job.info["parent"], job.info["atts"])
                self._update_title()
            except Exception as e:   # a full disk must not stop the chat
                await self.say(f"the message was not saved: {e}", "warning")

    async def on_job_finished(self, event: JobFinished) -> None:
        job = event.job
        await self._apply(job, job.drain())
        self._end_job()
        if job.kind == "prefill":
            n = event.result
            resumed = job.info.get("resumed")
            if resumed is not None:
                await self.say(resumed.notice())
                self.live.last = resumed.notice() + (f" · {n:,} tok prefilled" if n else "")
            else:
                self.live.last = f"history prefilled ({n:,} tok)" if n else "history already in the context"
            self._show_stats()
            self._save_state_soon()
            return
        result = event.result
        self.last_result = result
        reply_w: AssistantMessage = job.info["reply_w"]
        cancelled = result.finish_reason == "cancelled"
        why = {"cancelled": "cancelled", "length": "stopped at --max-tokens",
               "context": "context full"}.get(result.finish_reason)
        footer = reply_summary(result) + (f" · {why}" if why else "")
        await reply_w.finish(footer, cancelled=cancelled)
        reply = self.conv.messages[-1]
        reply["spans"] = list(reply_w.all_spans)
        reply["stats"] = _stats_dict(result, self.model.name)
        user = self.conv.messages[-2] if len(self.conv.messages) >= 2 else None
        if self.persist is not None:
            try:
                reply["id"] = self.persist.save_reply(result.text, user.get("id") if user else None,
                                                      reply["stats"], reply["spans"])
            except Exception as e:
                await self.say(f"the reply was not saved: {e}", "warning")
            self._save_state_soon()
        self.live.last = f"{why} · {reply_summary(result)}" if why else reply_summary(result)   # first: always visible
        self._show_stats()
        if result.compression:
            await self.say(f"{result.compression}: scorer {result.scorer_ms / 1e3:.2f} s, "
                           f"target prefill {result.prefill_ms / 1e3:.2f} s")
        if result.finish_reason == "context":
            await self.say("the context is full: /new starts over, or restart with a larger --max-ctx", "warning")

    async def on_job_failed(self, event: JobFailed) -> None:
        from luce_engine import GenerationCancelled

        job = event.job
        await self._apply(job, job.drain())
        self._end_job()
        err = event.error
        if job.kind == "prefill":
            if isinstance(err, GenerationCancelled):
                await self.say("prefilling the history was cancelled; the next reply prefills what is missing")
            else:
                await self.say(f"could not prefill the history: {err}", "error")
            return
        # The turn did not happen (conv.messages is unchanged): the screen and the store go back to
        # what the model sees, and the message returns to the input so it can be changed and resent.
        for w in job.info["widgets"]:
            await w.remove()
        await self._mount_messages(job.info["base_len"])   # what /retry or /edit took off the screen
        if job.info["edit"] is not None:
            self.edit_index = job.info["edit"]              # still an edit: Enter makes the branch
        msg = job.info.get("msg")
        if job.started and msg is not None and self.persist is not None and msg.get("id") is not None:
            try:   # the saved message stays as a branch; the chat continues from its parent
                leaf = self.conv.messages[-1].get("id") if self.conv.messages else None
                self.persist.store.set_current_leaf(self.persist.session_id, leaf)
            except Exception as e:
                await self.say(f"the saved chat could not be set back: {e}", "warning")
            msg.pop("id", None)
        if msg is not None:
            if not self.input.text.strip():
                self.input.set_text(msg["content"])
            self.pending = job.info["atts"] + self.pending
            self._refresh_chips()
        if isinstance(err, GenerationCancelled):
            await self.say("cancelled before the reply started" + ("; your message is back in the input"
                                                                   if msg is not None else ""))
            return
        text = str(err) if isinstance(err, BudgetError) else _error_text(err)
        await self.say(text, "error")

    async def _mount_messages(self, start: int) -> None:
        """Widgets for self.conv.messages[start:] that are not on the screen (after the others)."""
        shown = {w.index for w in self.chat.children if isinstance(w, (UserMessage, AssistantMessage))}
        widgets = message_widgets([(i, m) for i, m in enumerate(self.conv.messages) if i >= start and i not in shown],
                                  self.highlight)
        if widgets:
            await self.chat.mount_all(widgets)
            self.chat.anchor()

    def _reply_reserve(self) -> int:
        """Tokens kept free for the reply when a message is checked against the context: the
        configured reserve, but never more than a quarter of the context (a small --max-ctx still chats)."""
        return max(1, min(self.opts.max_tokens, self.opts.reply_reserve, self.engine.n_ctx // 4))

    def _advice_context(self, history: list[dict]) -> dict:
        """What budget_error's advice depends on (history ends in the new user message): is there
        history to drop, are there files, is there a compressor."""
        return {"has_history": len(history) > 1, "has_attachments": bool(history[-1].get("attachments")),
                "compressor": self.conv.compressor is not None}

    async def _remove_from(self, index: int) -> None:
        """Remove the message widgets of conversation index >= index (the notices stay)."""
        for w in list(self.chat.children):
            if isinstance(w, (UserMessage, AssistantMessage)) and w.index >= index:
                await w.remove()

    # -- actions -----------------------------------------------------------------------------------
    async def action_interrupt(self) -> None:
        """Ctrl+C: stop the reply; copy a selection in the input; else say how to quit."""
        if self.job is not None:
            await self.action_cancel()
        elif not self.input.selection.is_empty:
            self.input.action_copy()
        else:
            self.notify("Ctrl+Q quits (Ctrl+C stops a reply while one is running)", title="Do you want to quit?")

    async def action_cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.live.note = "cancelling…"
            self._show_stats()
        elif self.edit_index is not None:
            self.edit_index = None
            self.input.clear()
            self.pending = []
            self._refresh_chips()
            await self.say("edit cancelled")

    async def action_toggle_highlight(self) -> None:
        await self.cmd_highlight("")

    async def action_sessions(self) -> None:
        await self.cmd_sessions("")

    async def action_new_chat(self) -> None:
        await self.cmd_new("")

    def action_edit_in_editor(self) -> None:
        import os
        import shlex
        import subprocess
        import tempfile

        from textual.app import SuspendNotSupported

        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        with tempfile.NamedTemporaryFile("w", suffix=".md", prefix="luce-", delete=False, encoding="utf-8") as f:
            f.write(self.input.text)
            path = f.name
        try:
            with self.suspend():
                subprocess.call([*shlex.split(editor), path])
            self.input.set_text(Path(path).read_text(encoding="utf-8").rstrip("\n"))
        except SuspendNotSupported:
            self.notify("this terminal cannot hand over to an editor", severity="error")
        except OSError as e:
            self.notify(f"could not run {editor}: {e}", severity="error")
        finally:
            Path(path).unlink(missing_ok=True)

    async def on_prompt_input_large_paste(self, event: PromptInput.LargePaste) -> None:
        from luce_tui.screens.dialogs import ConfirmScreen

        text = event.text

        async def decide(attach: bool | None) -> None:
            if attach:
                self._paste_count += 1
                await self.attach_text(f"paste-{self._paste_count}.txt", text)
            else:
                self.input.insert(text)

        await self.push_screen(ConfirmScreen(f"You pasted {len(text):,} characters. Attach them as a file "
                                             "instead of putting them into the message?",
                                             yes="Attach as file", no="Paste inline"), decide)

    async def action_quit(self) -> None:
        self.shutdown_job()
        self.exit()

    def shutdown_job(self, timeout: float = 10.0) -> None:
        """Stop a running job and wait for its thread (the engine must be idle when we leave)."""
        if self.job is not None:
            self.job.cancel()
            self.job.join(timeout)

    # -- history of prompts ------------------------------------------------------------------------
    def _load_history(self) -> list[str]:
        if self.opts.history_file is None:
            return []
        try:
            from prompt_toolkit.history import FileHistory

            self._file_history = FileHistory(str(self.opts.history_file))
            return list(reversed(list(self._file_history.load_history_strings())))[-1000:]
        except OSError:
            return []

    def _remember(self, text: str) -> None:
        fh = getattr(self, "_file_history", None)
        if fh is not None:
            try:
                fh.store_string(text)
            except OSError:
                pass

    def _refresh_chips(self) -> None:
        self.query_one(AttachmentChips).refresh_chips(self.pending, self.engine.n_ctx, self.conv.compressor)


def _stats_dict(result, model_name: str) -> dict:
    d = {k: v for k, v in dataclasses.asdict(result).items() if k != "text"}
    d["model"] = model_name
    return d


def _error_text(err: BaseException) -> str:
    from luce_engine import ContextFullError

    if isinstance(err, ContextFullError):
        return f"{err}; /new starts over, or restart with a larger --max-ctx"
    return str(err) or type(err).__name__


def run_app(runtime, sampling, args, *, note: str | None = None, conv=None) -> int:
    """luce-chat without -p/--plain on a terminal."""
    from luce_tui import locations

    store, store_error = None, None
    try:
        from luce_sessions import SessionStore, SessionStoreError

        try:
            store = SessionStore(args.data_dir)
        except SessionStoreError as e:
            store_error = str(e)
    except ImportError as e:   # a broken install: chat anyway
        store_error = str(e)
    if args.resume is not None:   # a chat that is not there is an error before the screen opens
        from luce_sessions import NotFoundError

        from luce_tui.persist import Persistence

        try:
            if store is None:
                raise NotFoundError(f"cannot resume: {store_error}")
            args.resume = str(Persistence(store, {}).resolve(args.resume))
        except NotFoundError as e:
            if store is not None:
                store.close()
            print(f"luce-chat: error: {e}", file=sys.stderr)
            return 2
    data = locations.data_dir(args.data_dir)
    opts = ChatOptions(max_tokens=args.max_tokens, system=args.system, theme=args.theme or "dark",
                       highlight=bool(getattr(args, "highlight", False)),
                       paste_threshold=getattr(args, "paste_threshold", None) or 2000,
                       resume=args.resume, draft=args.draft, pflash_scorer=args.pflash_scorer, note=note,
                       threads=args.threads or config.default_threads(),
                       state_budget_gib=_state_budget(args),
                       history_file=_history_path(data), user_themes=locations.themes_dir())
    app = LuceApp(runtime, sampling, opts, store=store, store_error=store_error, conv=conv)
    try:
        app.run()
    finally:
        app.shutdown_job()
        if app.states is not None:
            app.states.flush(30)   # the last turn's engine state
        if store is not None:
            store.close()
    return 0


def _state_budget(args) -> float:
    value = getattr(args, "state_budget_gib", None)   # from the config file (userconfig.merge)
    return 4.0 if value is None else float(value)


def _history_path(data: Path) -> Path | None:
    try:
        data.mkdir(parents=True, exist_ok=True)
        path = data / "history"
        path.touch(exist_ok=True)
        return path
    except OSError:
        return None
