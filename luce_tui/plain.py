"""The plain chat loop: prompt_toolkit on a terminal, one user turn per line when stdin is a pipe."""

from __future__ import annotations

import sys

from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.formatted_text import FormattedText

from luce_tui import config, events, locations
from luce_tui.conversation import Conversation, ConversationError, sigint_cancels

COMMANDS = {
    "/help": "list the commands",
    "/quit": "leave (also Ctrl+D, or Ctrl+C at an empty prompt)",
    "/new": "start a new conversation (clears the context)",
    "/system": "TEXT: set the system prompt; no TEXT shows it",
    "/sampling": "key=value ...: change sampling; no args shows it",
    "/stats": "speed of the last reply and the context in use",
    "/model": "model, device, context and memory plan",
    "/retry": "generate the last reply again",
    "/clear": "clear the screen",
}
_ALIASES = {"/exit": "/quit", "/q": "/quit", "/reset": "/new"}

_FINISH_NOTES = {
    "cancelled": "[cancelled]",
    "length": "[stopped at --max-tokens]",
    "context": "[the context is full: /new starts over, --max-ctx allows more]",
    "dropped": "[the server closed the stream before the reply ended; the partial reply is kept]",
}


class SlashCompleter(Completer):
    """Completes command names, and the keys after /sampling."""

    def get_completions(self, document, complete_event):
        text = document.text_before_cursor
        if not text.startswith("/"):
            return
        if " " not in text:
            for name, help_text in COMMANDS.items():
                if name.startswith(text):
                    yield Completion(name, start_position=-len(text), display_meta=help_text)
        elif text.startswith("/sampling "):
            word = document.get_word_before_cursor(WORD=True)
            if "=" not in word:
                for key in config.SAMPLING_KEYS:
                    if key.startswith(word):
                        yield Completion(key + "=", start_position=-len(word))


class Repl:
    """Commands and turns, independent of where lines come from (terminal or pipe)."""

    def __init__(self, runtime, sampling, *, system: str | None = None, max_tokens: int = 1024,
                 show_stats: bool = False, tty: bool = False, out=None, err=None, conv=None):
        """conv: the conversation to drive (a RemoteConversation for --remote; then runtime is None)."""
        if conv is None:
            conv = Conversation(runtime.engine, system=system, speculator=runtime.speculator,
                                compressor=runtime.compressor)
        self.conv = conv
        self.engine = runtime.engine if runtime is not None else None
        self.model = self.engine.model if self.engine is not None else conv.model
        self.sampling, self.max_tokens, self.show_stats, self.tty = sampling, max_tokens, show_stats, tty
        self.out, self.err = out or sys.stdout, err or sys.stderr

    # -- output ----------------------------------------------------------------------------
    def info(self, text: str) -> None:
        if self.tty:
            from prompt_toolkit import print_formatted_text

            print_formatted_text(FormattedText([("ansibrightblack", text)]))
        else:
            print(text, file=self.out, flush=True)

    def error(self, text: str) -> None:
        if self.tty:
            from prompt_toolkit import print_formatted_text

            print_formatted_text(FormattedText([("ansired", f"error: {text}")]))
        else:
            print(f"error: {text}", file=self.err, flush=True)

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    # -- input -----------------------------------------------------------------------------
    def handle(self, line: str) -> bool:
        """One line of input; False when the user asked to leave. Errors are reported, never raised."""
        from luce_engine import ContextFullError, EngineError
        from luce_engine.chat_template import ChatTemplateError
        from luce_engine.tokenizer import TokenizerError

        from luce_tui.remote import RemoteError

        line = line.strip()
        if not line:
            return True
        try:
            if line.startswith("/"):
                return self.command(line)
            self._stream(self.conv.messages + [{"role": "user", "content": line}])
        except ContextFullError as e:
            self.error(f"{e}; /new starts over, or restart with a larger --max-ctx")
        except (EngineError, ConversationError, ChatTemplateError, TokenizerError, RemoteError) as e:
            self.error(str(e))
        return True

    def _stream(self, history: list[dict]) -> None:
        """One reply to history, streamed as it comes; Ctrl+C stops it (the partial reply is kept).
        The turn's error is raised for handle() to report."""
        failure: list[BaseException] = []

        def emit(ev: events.Event) -> None:
            match ev:
                case events.Step(text=text) if text:
                    self._write(text)
                case events.Finished(result=result):
                    self._write("\n")
                    note = _FINISH_NOTES.get(result.finish_reason)
                    if note:
                        self.info(note)
                    if self.show_stats:
                        self.info(f"[{result.summary()}]")
                case events.Error(error=error):
                    failure.append(error)

        with sigint_cancels(self.conv.cancel):
            self.conv.run_turn(history, sampling=self.sampling, max_tokens=self.max_tokens, emit=emit)
        if failure:
            raise failure[0]

    def command(self, line: str) -> bool:
        name, _, rest = line.partition(" ")
        name = _ALIASES.get(name.lower(), name.lower())
        rest = rest.strip()
        if name == "/quit":
            return False
        handler = getattr(self, "cmd_" + name[1:], None) if name in COMMANDS else None
        if handler is None:
            self.error(f"unknown command {name} (/help lists them)")
        else:
            handler(rest)
        return True

    # -- commands --------------------------------------------------------------------------
    def cmd_help(self, rest: str) -> None:
        width = max(map(len, COMMANDS))
        self.info("\n".join(f"{name:<{width}}  {text}" for name, text in COMMANDS.items()))

    def cmd_new(self, rest: str) -> None:
        self.conv.reset()
        self.info("[new conversation]")

    def cmd_system(self, rest: str) -> None:
        if rest:
            self.conv.system = rest
            self.info("[system prompt set; it applies from the next reply]")
        else:
            self.info(f"system: {self.conv.system}" if self.conv.system else "system: (the template's default)")

    def cmd_sampling(self, rest: str) -> None:
        if rest:
            try:
                self.sampling = config.parse_sampling_assignments(rest.split(), self.sampling)
            except ValueError as e:
                self.error(str(e))
                return
        self.info(config.format_sampling(self.sampling))

    def cmd_stats(self, rest: str) -> None:
        eng, last = self.engine, self.conv.last
        if eng is None:   # --remote: what the server reported
            self.info(f"last reply: {last.summary()}" if last else "last reply: none yet")
            return
        s = eng.stats()
        lines = [f"last reply: {last.summary()}" if last else "last reply: none yet",
                 f"context: {eng.n_past} of {eng.n_ctx} tokens in use, {len(self.conv.messages)} messages",
                 f"total: prefill {s['n_prefill_tokens']} tok in {s['prefill_ms'] / 1e3:.2f} s, "
                 f"decode {s['n_decode_tokens']} tok in {s['decode_ms'] / 1e3:.2f} s"]
        self.info("\n".join(lines))

    def cmd_model(self, rest: str) -> None:
        from luce_tui import memory

        m, eng = self.model, self.engine
        if eng is None:
            self.info(f"model:   {m.name} on the server {m.url}" + (f"\ncontext: n_ctx {m.n_ctx}" if m.n_ctx else ""))
            return
        # the same plan and verdict as `luce-chat --plan` and the app's /model
        plan = m.plan(n_ctx=eng.n_ctx, cache_type_k=eng.cache_type_k, cache_type_v=eng.cache_type_v,
                      n_verify_max=getattr(eng, "n_verify_max", 16), rollback=eng.rollback, check=False)
        verdict = memory.verdict(memory.device_need(plan), memory.budget(plan),
                                 m.device)
        self.info("\n".join([
            f"model:   {m.name} ({m.arch}, {m.n_params / 1e6:.1f}M params, {config.human_bytes(m.weight_bytes)})",
            f"file:    {m.path}",
            f"device:  {m.device}",
            f"weights: {m.weight_types}",
            f"context: n_ctx {eng.n_ctx} (trained {m.n_ctx_train}), KV {eng.cache_type_k}/{eng.cache_type_v}",
            "memory plan:",
            config.format_plan(plan),
            "  " + verdict,
        ]))

    def cmd_retry(self, rest: str) -> None:
        self._stream(self.conv.retry_history())

    def cmd_clear(self, rest: str) -> None:
        if self.tty:
            from prompt_toolkit.shortcuts import clear

            clear()


def _history(args):
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    path = locations.data_dir(args.data_dir) / "history"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
        return FileHistory(str(path))
    except OSError as e:   # a read-only home should not stop the chat
        print(f"luce-chat: warning: no input history ({e})", file=sys.stderr)
        return InMemoryHistory()


def _key_bindings():
    from prompt_toolkit.key_binding import KeyBindings

    kb = KeyBindings()

    @kb.add("c-c")
    def _(event):
        # Like a shell: Ctrl+C drops the line being typed; at an empty prompt it leaves.
        buf = event.app.current_buffer
        if buf.text:
            buf.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt())

    return kb


def _terminal_loop(repl: Repl, args) -> int:
    from prompt_toolkit import PromptSession

    session = PromptSession(history=_history(args), completer=SlashCompleter(), complete_while_typing=True,
                            key_bindings=_key_bindings())
    m = repl.model
    ctx = repl.engine.n_ctx if repl.engine is not None else m.n_ctx
    repl.info(f"luce-chat · {m.name} on {m.device}" + (f" · n_ctx {ctx}" if ctx else "") +
              " · /help for commands, Ctrl+D to leave")
    while True:
        try:
            line = session.prompt(FormattedText([("bold ansicyan", "› ")]))
        except (EOFError, KeyboardInterrupt):
            return 0
        if not repl.handle(line):
            return 0


def _pipe_loop(repl: Repl) -> int:
    # One user turn (or command) per line, so the loop can be scripted and tested.
    for line in sys.stdin:
        if not repl.handle(line):
            break
    return 0


def run_plain(runtime, sampling, args, conv=None) -> int:
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    repl = Repl(runtime, sampling, system=args.system, max_tokens=args.max_tokens,
                show_stats=args.stats or args.verbose, tty=tty, conv=conv)
    try:
        return _terminal_loop(repl, args) if tty else _pipe_loop(repl)
    except KeyboardInterrupt:   # Ctrl+C between turns (outside a reply) just leaves
        return 0
