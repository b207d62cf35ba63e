"""A conversation on one Engine: messages rendered with the model's chat template, prefilled incrementally.

The engine's context (engine.tokens) is the source of truth for what is already evaluated: each
turn renders the whole conversation, keeps the longest common prefix of the context and the new
prompt, and prefills only the rest. A normal follow-up turn therefore evaluates just the new user
message; editing the system prompt or retrying rewinds the context to where the prompts diverge.

A reply is one typed event stream (events.py): run_turn() runs it on the calling thread (the app's
job thread, the server's engine thread, the main thread of -p and the plain REPL) and hands each event
to its `emit`; reply()/retry()/respond() wrap it with callbacks for the Python API. `cancel()` (any
thread) stops the engine at its next graph boundary and the partial reply is kept; a plain front end
turns Ctrl+C into that with `sigint_cancels`.

Messages are dicts with "role" and "content"; a user message may also carry "attachments", a list
of {"name", "text"} parts that are rendered into the prompt at send time (after the typed text, one
fenced block per file), so the files stay separate parts of the message for whoever needs them
(the session store, a prompt compressor). Other keys (e.g. the session store's "id") are ignored.
Only the template's markup is tokenized with control tokens parsed; message text never is (encode()).

PFlash: with a compressor (an AttachmentCompressor, the runtime's), the attachments of a new user message that pass its policy are replaced, in
the prompt only, by the parts a scorer model ranks relevant to the message's typed question
(`compress_attachments`). The kept text is stored on the attachment part ("compressed"), so later
turns render the same prompt (the context prefix stays reusable) and the original stays in "text".
Only attachments are ever compressed: the system prompt, earlier turns and the question are not.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import signal
import threading
import time
from typing import Callable, Sequence

from luce_engine import ContextFullError, Engine, GenerationCancelled, Sampling
from luce_engine.chat_template import ChatTemplateError

from luce_tui import events

TextFn = Callable[[str], object]
ProgressFn = Callable[[int, int], object]


StepFn = Callable[[events.Step], object]
StartFn = Callable[[int, int], object]   # (reused tokens, prompt tokens) once the prefix is known


class ConversationError(Exception):
    """A request the conversation cannot serve in its current state (e.g. /retry with no reply)."""


class PromptTooLong(ContextFullError):
    """The rendered prompt does not leave room for a reply in the context (numbers kept for the server's 400)."""

    def __init__(self, prompt_tokens: int, n_ctx: int):
        super().__init__(f"the conversation is {prompt_tokens} tokens but the context holds {n_ctx}")
        self.prompt_tokens, self.n_ctx = prompt_tokens, n_ctx


@dataclasses.dataclass
class TurnResult:
    """One reply and what producing it cost."""

    text: str
    finish_reason: str          # eos, stop, length, context or cancelled
    prompt_tokens: int          # the whole rendered prompt
    reused_tokens: int          # of those, already in the engine's context
    prefill_tokens: int         # evaluated for this turn
    prefill_ms: float
    generated_tokens: int
    decode_ms: float
    n_steps: int = 0            # engine steps (each commits one token, more with an accepted draft)
    n_drafted: int = 0          # draft tokens proposed / accepted (0 without a draft model)
    n_accepted: int = 0
    compression: str | None = None   # "compressed 183,412 → 9,170 tokens (5%)" when this turn compressed
    scorer_ms: float = 0.0           # the scorer's time for that
    spec_mode: str | None = None     # the speculator's describe(): "chain of 15", "tree, budget 16"

    @property
    def acceptance(self) -> float | None:
        """Accepted share of the drafted tokens (None when nothing was drafted)."""
        return self.n_accepted / self.n_drafted if self.n_drafted else None

    @property
    def accept_length(self) -> float | None:
        """AL: tokens committed per target step (None when nothing was drafted)."""
        return self.generated_tokens / self.n_steps if self.n_drafted and self.n_steps else None

    @property
    def prefill_tps(self) -> float:
        return self.prefill_tokens / self.prefill_ms * 1e3 if self.prefill_ms > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.generated_tokens / self.decode_ms * 1e3 if self.decode_ms > 0 else 0.0

    def summary(self) -> str:
        pflash = f"{self.compression}, scorer {self.scorer_ms / 1e3:.2f} s | " if self.compression else ""
        return (f"{pflash}prompt {self.prompt_tokens:,} tok ({self.reused_tokens:,} reused), "
                f"prefill {self.prefill_tokens:,} tok @ {self.prefill_tps:,.1f} tok/s "
                f"({self.prefill_ms / 1e3:,.2f} s) | "
                f"generated {self.generated_tokens:,} tok @ {self.decode_tps:,.1f} tok/s | "
                + (f"AL {self.accept_length:.2f}{f' ({self.spec_mode})' if self.spec_mode else ''}, "
                   f"{100 * self.acceptance:.0f}% of drafts accepted | " if self.accept_length else "")
                + f"finish: {self.finish_reason}")


# Message keys besides role and content that reach the chat template: those of tool use (OpenAI's names).
_TEMPLATE_KEYS = ("tool_calls", "tool_call_id", "name", "reasoning_content")


def fence(text: str) -> str:
    """A backtick fence longer than any backtick run in text, so the block cannot end early."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def render_content(message: dict) -> str:
    """A message's prompt text: its typed content, then each attachment as a fenced block (the kept
    excerpts of a compressed attachment, under a title that says so)."""
    content = message.get("content") or ""
    parts = [content] if content else []
    for att in message.get("attachments") or ():
        text, title = att["text"], att["name"]
        if att.get("compressed") is not None:
            text, title = att["compressed"], f"{att['name']} (excerpts)"
        f = fence(text)
        parts.append(f"{title}:\n{f}\n{text.rstrip(chr(10))}\n{f}")
    return "\n\n".join(parts)


def combined_summary(infos: list[dict]) -> str:
    """'compressed 183,412 → 9,170 tokens (5%)' over one or more compressed attachments."""
    before, after = sum(i["n_original"] for i in infos), sum(i["n_kept"] for i in infos)
    return f"compressed {before:,} → {after:,} tokens ({after / before if before else 1.0:.0%})"


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class Conversation:
    """System prompt + messages on one engine; replies speculate with `speculator` (a ChainSpeculator
    on that engine) and long attachments go through `compressor` (PFlash) when they are given.

    >>> conv = Conversation(engine, system="Be brief.")
    >>> conv.reply("Hi!", sampling=Sampling(), max_tokens=32, on_text=print).text
    """

    def __init__(self, engine: Engine, *, system: str | None = None, speculator=None, compressor=None):
        self.engine = engine
        self.tokenizer = engine.model.tokenizer
        self.template = engine.model.chat_template
        self.system = system          # None: whatever the template does without one
        self.messages: list[dict] = []
        self.last: TurnResult | None = None
        self._stop: threading.Event | None = None      # the running turn's, for cancel()
        self._encoded: tuple[str, list[int]] | None = None   # last render -> ids (big attachments)
        self.speculator = speculator
        self.compressor = compressor   # PFlash (AttachmentCompressor) or None
        self._compressed: list[dict] = []              # compressions of the turn being prepared

    # -- prompt ----------------------------------------------------------------------------
    def chat_messages(self, history: list[dict] | None = None) -> list[dict]:
        """The messages as the chat template takes them: the system prompt first (when set), each
        content rendered with its attachments; the OpenAI keys of tool use travel along."""
        history = self.messages if history is None else history
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [dict({k: m[k] for k in _TEMPLATE_KEYS if k in m}, role=m["role"], content=render_content(m))
                       for m in history]

    def default_system(self) -> str | None:
        """The system prompt the template writes when none is set (SmolLM2's names itself), or None.
        Found by rendering a probe chat with and without a system prompt of our own."""
        mark, probe = f"\ue000{secrets.token_hex(4)}\ue001", f"\ue002{secrets.token_hex(4)}\ue003"
        try:
            bare = self.template.render([{"role": "user", "content": mark}], add_generation_prompt=False)
            with_system = self.template.render([{"role": "system", "content": probe},
                                                {"role": "user", "content": mark}], add_generation_prompt=False)
        except ChatTemplateError:
            return None
        before, head = bare.split(mark)[0], with_system.split(mark)[0]
        if probe not in head:
            return None
        start, end = head.split(probe, 1)
        if len(before) > len(start) + len(end) and before.startswith(start) and before.endswith(end):
            return before[len(start):len(before) - len(end)] or None
        return None

    def render(self, history: list[dict] | None = None, add_generation_prompt: bool = True, *,
               tools: list | None = None, template_kwargs: dict | None = None) -> str:
        return self.template.render(self.chat_messages(history), add_generation_prompt=add_generation_prompt,
                                    tools=tools, **(template_kwargs or {}))

    def encode(self, history: list[dict] | None = None, add_generation_prompt: bool = True, *,
               tools: list | None = None, template_kwargs: dict | None = None, reply_prefix: str = "") -> list[int]:
        """Prompt tokens for the conversation, ending in the assistant header (unless
        add_generation_prompt is False: then just the history, e.g. to prefill a resumed chat).
        Only the template's markup may become control tokens; message text (typed or attached)
        is always tokenized as text, so a file that holds '<|im_end|>' cannot end its turn.
        tools and template_kwargs go to the template (tool definitions are its markup); reply_prefix
        is markup that opens the reply (the server's forced tool call)."""
        tok = self.tokenizer
        chat = self.chat_messages(history)
        extra = dict(template_kwargs or {}, tools=tools)
        text = self.template.render(chat, add_generation_prompt=add_generation_prompt, **extra)
        if self._encoded is not None and self._encoded[0] == text + reply_prefix:
            return list(self._encoded[1])
        parts = self._prompt_parts(chat, add_generation_prompt, text, extra) + [(reply_prefix, True)] * bool(reply_prefix)
        ids = tok.encode_parts(parts, add_special=False)
        # Add BOS when the model wants one and the template did not already write it.
        if tok.add_bos and tok.bos_id is not None and ids[:1] != [tok.bos_id]:
            ids.insert(0, tok.bos_id)
        self._encoded = (text + reply_prefix, list(ids))
        return ids

    def _prompt_parts(self, chat: list[dict], add_generation_prompt: bool, text: str,
                      extra: dict) -> list[tuple[str, bool]]:
        """The rendered prompt `text` as (piece, parse_special) parts: markup True, message text False.

        The template is rendered again with a unique placeholder for each message's content, which
        marks where the content goes. That holds only if putting the contents back gives `text`
        exactly. A template that rewrites a content (Qwen's drop the <think> part of earlier
        replies) fails that check; then only the system, user and tool contents get placeholders (the
        replies are the model's own output and stay markup). If that fails too, the whole text is
        markup, which is safe only while no system, user or tool content holds control-token text; such
        a message is refused rather than turned into control tokens."""
        nonce = secrets.token_hex(8)
        for roles in (None, ("system", "user", "tool")):
            if roles is not None and all(m["role"] in roles for m in chat):
                break   # the same render as the first pass
            slots, masked = {}, []
            for i, m in enumerate(chat):
                if roles is None or m["role"] in roles:
                    mark = f"\ue000{nonce}:{i}\ue001"
                    slots[mark] = m["content"]
                    m = dict(m, content=mark)
                masked.append(m)
            try:
                rendered = self.template.render(masked, add_generation_prompt=add_generation_prompt, **extra)
            except ChatTemplateError:
                continue
            pieces = re.split(f"(\ue000{nonce}:\\d+\ue001)", rendered)   # odd items: the placeholders
            parts = [(slots[p], False) if i % 2 else (p, True) for i, p in enumerate(pieces)]
            if "".join(p for p, _ in parts) == text:
                return parts
        if any(m["role"] != "assistant" and self.tokenizer.has_control_text(m["content"]) for m in chat):
            raise ConversationError("a message holds control-token text (such as <|im_end|>) and this chat "
                                    "template rewrites messages, so it cannot be kept apart from the markup")
        return [(text, True)]

    # -- state -----------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the messages and empty the engine's context (the system prompt stays)."""
        self.messages = []
        self.last = None
        self.engine.clear_cancel()
        self.engine.truncate(0)

    def cancel(self) -> None:
        """Stop the running turn (any thread); its partial reply is kept."""
        if self._stop is not None:
            self._stop.set()
        self.engine.cancel()
        if self.compressor is not None:
            self.compressor.cancel()

    def compress_attachments(self, history: list[dict], progress: ProgressFn | None = None) -> str | None:
        """PFlash: compresses the attachments of history's last message (a user message) that the
        compressor's policy selects, for that message's typed question; returns the notice
        ("compressed 183,412 → 9,170 tokens (5%)") or None. Idempotent: compressed attachments keep
        their excerpts. An attachment part's "compress" key (True/False) overrides the policy.
        Raises GenerationCancelled when cancel() stops the scorer."""
        comp = self.compressor
        if comp is None or not history or history[-1].get("role") != "user":
            return None
        msg = history[-1]
        atts = [a for a in msg.get("attachments") or () if a.get("compressed") is None and a.get("text")]
        if not atts:
            return None
        n_total = sum(a.get("n_tokens") or len(self.tokenizer.encode(a["text"], parse_special=False)) for a in atts)
        chosen = [a for a in atts if comp.applies(n_total, a.get("compress"))]
        question = msg.get("content") or ""
        infos = []
        for att in chosen:
            c = comp.compress(att["text"], question, progress=progress)
            att["compressed"] = c.kept_text(self.tokenizer)
            att["compression"] = {"n_original": c.n_original, "n_kept": c.n_kept, "scorer_ms": c.scorer_ms,
                                  "keep_ratio": comp.config.keep_ratio}
            infos.append(att["compression"])
        self._compressed += infos
        return combined_summary(infos) if infos else None

    def prefill_history(self, progress: ProgressFn | None = None, stop: threading.Event | None = None) -> int:
        """Evaluate the messages (no generation prompt) so the next turn only prefills its new
        message, e.g. after resuming a saved chat. Returns the tokens evaluated now; raises
        GenerationCancelled when `stop` is set (before or during the work)."""
        if not self.messages:
            return 0
        ids = self.encode(add_generation_prompt=False)
        eng = self.engine
        keep = common_prefix(eng.tokens, ids)
        if len(ids) >= eng.n_ctx:
            raise ContextFullError(f"the conversation is {len(ids)} tokens but the context holds {eng.n_ctx}")
        stop = stop or threading.Event()

        def report(done: int, total: int) -> bool:
            if progress:
                progress(done, total)
            return not stop.is_set()

        eng.clear_cancel()   # a cancel of earlier work must not stop this one
        if stop.is_set():
            raise GenerationCancelled("cancelled")
        if keep < eng.n_past:
            eng.truncate(keep)
        if keep < len(ids):
            eng.prefill(ids[keep:], progress=report)
            eng.checkpoint()
        return len(ids) - keep

    # -- turns -----------------------------------------------------------------------------
    def reply(self, text: str | dict, *, sampling: Sampling, max_tokens: int, on_text: TextFn | None = None,
              on_progress: ProgressFn | None = None, on_step: StepFn | None = None,
              on_start: StartFn | None = None, stop: threading.Event | None = None) -> TurnResult:
        """Add a user message (text, or a message dict with attachments) and generate the
        assistant's reply (kept even when cancelled)."""
        message = {"role": "user", "content": text} if isinstance(text, str) else dict(text, role="user")
        return self.respond(self.messages + [message], sampling=sampling, max_tokens=max_tokens,
                            on_text=on_text, on_progress=on_progress, on_step=on_step, on_start=on_start, stop=stop)

    def retry(self, *, sampling: Sampling, max_tokens: int, on_text: TextFn | None = None,
              on_progress: ProgressFn | None = None, on_step: StepFn | None = None,
              on_start: StartFn | None = None, stop: threading.Event | None = None) -> TurnResult:
        """Replace the last assistant reply by a newly generated one."""
        return self.respond(self.retry_history(), sampling=sampling, max_tokens=max_tokens, on_text=on_text,
                            on_progress=on_progress, on_step=on_step, on_start=on_start, stop=stop)

    def retry_history(self) -> list[dict]:
        """The history a retry answers again: the messages without the last reply."""
        if not self.messages or self.messages[-1]["role"] != "assistant":
            raise ConversationError("there is no reply to retry yet")
        return self.messages[:-1]

    def respond(self, history: list[dict], *, sampling: Sampling, max_tokens: int, on_text: TextFn | None = None,
                on_progress: ProgressFn | None = None, on_step: StepFn | None = None,
                on_start: StartFn | None = None, stop: threading.Event | None = None) -> TurnResult:
        """run_turn() with callbacks for who wants them (the Python API, tests): returns the
        TurnResult, raises the turn's error."""
        outcome: list = []

        def emit(ev: events.Event) -> None:
            match ev:
                case events.Started(reused=reused, prompt_tokens=n) if on_start:
                    on_start(reused, n)
                case events.PrefillProgress(done=done, total=total) if on_progress:
                    on_progress(done, total)
                case events.Step() if on_step or on_text:
                    if on_step:
                        on_step(ev)
                    if ev.text and on_text:
                        on_text(ev.text)
                case events.Finished(result=result):
                    outcome.append(result)
                case events.Error(error=error):
                    outcome.append(error)

        self.run_turn(history, sampling=sampling, max_tokens=max_tokens, emit=emit, stop=stop)
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def run_turn(self, history: list[dict], *, sampling: Sampling, max_tokens: int, emit: Callable[[events.Event], object],
                 stop: threading.Event | None = None, stop_strings: Sequence[str] = (), tools: list | None = None,
                 template_kwargs: dict | None = None, reply_prefix: str = "",
                 admit: Callable[[list[int]], object] | None = None,
                 restore: Callable[[list[int], int], object] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> TurnResult | None:
        """Generate the assistant's reply to `history` (ending in a user or tool message) on the
        calling thread, handing each event of the reply to `emit` (events.py says their order);
        afterwards self.messages is history + the reply. Returns the TurnResult, or None after an
        Error event (then nothing changed).

        stop: this turn's cancel request (set from any thread, also before the turn starts);
        cancel() sets it too. stop_strings end the reply where one appears (cut before it).
        tools, template_kwargs: handed to the chat template (tool definitions, enable_thinking);
        reply_prefix: markup the prompt writes as the start of the reply (not part of its text).
        admit(prompt ids): raise to refuse a prompt (the app's context budget). restore(prompt ids,
        tokens the context shares with them): may load a saved context into the engine before the
        reused prefix is chosen (the server's state files). An exception
        raised by `emit` itself stops the engine and propagates (a closed pipe under -p)."""
        stop = stop or threading.Event()
        self._stop = stop

        def out(ev: events.Event) -> None:
            try:
                emit(ev)
            except BaseException as e:
                raise _EmitFailed(e) from e

        def progress(kind):
            def report(done: int, total: int) -> bool:
                out(kind(done, total, clock()))
                return not stop.is_set()
            return report

        try:
            try:
                return self._turn(history, sampling, max_tokens, stop, stop_strings, tools, template_kwargs,
                                  reply_prefix, admit, restore, out, progress, clock)
            except _EmitFailed:
                raise
            except Exception as e:
                # Everything that fails before the reply leaves self.messages untouched.
                out(events.Error(e, clock()))
                return None
        except _EmitFailed as e:
            self.engine.cancel()
            raise e.error from None
        finally:
            self._stop = None
            self._compressed = []

    def _turn(self, history, sampling, max_tokens, stop, stop_strings, tools, template_kwargs, reply_prefix, admit,
              restore, out, progress, clock) -> TurnResult:
        # PFlash first: a compressed attachment is what has to fit the context
        self.compress_attachments(history, progress(events.ScoringProgress))
        if stop.is_set():   # a cancel while scoring, or before the scorer cleared its flag
            raise GenerationCancelled("cancelled")
        compressed = self._compressed
        prompt = self.encode(history, tools=tools, template_kwargs=template_kwargs, reply_prefix=reply_prefix)
        if not prompt:
            raise ConversationError("the chat template rendered an empty prompt")
        eng = self.engine
        if admit is not None:   # first: its refusal says more than the check below
            admit(prompt)
        if len(prompt) >= eng.n_ctx:
            raise PromptTooLong(len(prompt), eng.n_ctx)
        if restore is not None:
            restore(prompt, common_prefix(eng.tokens, prompt))
        # Keep at least one prompt token to evaluate, so the prefill leaves fresh logits behind.
        keep = min(common_prefix(eng.tokens, prompt), len(prompt) - 1)
        out(events.Started(keep, len(prompt), clock()))
        before = eng.stats()
        text, reason, generated = [], "cancelled", 0
        steps = drafted = accepted = 0
        # The engine's flag may still hold the cancel of an earlier turn; this turn's own request
        # is `stop`, which a cancel sets before it arms the engine.
        eng.clear_cancel()
        try:
            if stop.is_set():
                raise GenerationCancelled("cancelled")
            if keep < eng.n_past:
                eng.truncate(keep)
            # `stop` also covers a cancel that came before generate() cleared the engine's flag again.
            for r in eng.generate(prompt[keep:], sampling=sampling, max_tokens=max_tokens, stop=stop_strings,
                                  progress=progress(events.PrefillProgress), speculator=self.speculator):
                generated += len(r.tokens)
                steps += 1 if r.tokens else 0
                drafted, accepted = drafted + r.n_drafted, accepted + r.n_accepted
                reason = r.finish_reason or reason
                if r.text:
                    text.append(r.text)
                out(events.Step.of(r, clock()))
                if stop.is_set():
                    break
        except GenerationCancelled:
            reason = "cancelled"
            out(events.Step([], [], "", [], finish_reason="cancelled", t=clock()))
        # Turn boundary: hybrid models keep their recurrent state here so that editing or
        # retrying a later turn recomputes only what follows (a no-op for dense models).
        eng.checkpoint()
        after = eng.stats()
        reply = "".join(text)
        self.messages = history + [{"role": "assistant", "content": reply}]
        self.last = TurnResult(
            text=reply, finish_reason=reason, prompt_tokens=len(prompt), reused_tokens=keep,
            prefill_tokens=after["n_prefill_tokens"] - before["n_prefill_tokens"],
            prefill_ms=after["prefill_ms"] - before["prefill_ms"],
            generated_tokens=generated, decode_ms=after["decode_ms"] - before["decode_ms"],
            n_steps=steps, n_drafted=drafted, n_accepted=accepted,
            compression=combined_summary(compressed) if compressed else None,
            scorer_ms=sum(c["scorer_ms"] for c in compressed),
            spec_mode=self.speculator.describe() if hasattr(self.speculator, "describe") else None)
        out(events.Finished(self.last, clock()))
        return self.last


class _EmitFailed(Exception):
    """An exception raised by the consumer of the events (not by the turn): re-raised as it is."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class sigint_cancels:
    """For a plain front end: while a reply is prepared or generated on the main thread, Ctrl+C
    calls `cancel` (the engine or the scorer stops at its next graph boundary) instead of raising
    KeyboardInterrupt. Only the main thread may install signal handlers; elsewhere this does nothing.
    """

    def __init__(self, cancel: Callable[[], object]):
        self.cancel, self.previous = cancel, None

    def _handler(self, signum, frame) -> None:
        self.cancel()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
