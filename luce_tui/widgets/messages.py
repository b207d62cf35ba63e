"""The chat's messages: the user's, the assistant's (streamed) and notices from the app.

An assistant reply has two views of the same text:
- Markdown (the default): one Markdown widget fed through Textual's MarkdownStream, which
  batches appends when the model is faster than the renderer;
- provenance (/highlight, F2): the raw text with every run that came from an accepted draft
  drawn in the theme's $draft-highlight colour. Markdown rendering cannot colour arbitrary
  character runs, so highlighting is a view of its own; the runs are kept per reply (and in the
  session store), so switching views and reloaded chats show them too.
A leading <think>…</think> block goes into a Collapsible, open while the model thinks and
collapsed as soon as the answer starts.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Collapsible, Markdown, Static

from luce_engine.engine import add_span
from luce_tui.thinking import ThinkSplitter

Spans = list[tuple[str, bool]]


def provenance_content(spans: Spans) -> Content:
    return Content.assemble(*[(text, "$draft-highlight bold") if drafted else text for text, drafted in spans])


class Notice(Static):
    """A line from the app itself (help, command output, warnings, errors)."""

    DEFAULT_CSS = """
    Notice { margin: 0 1 1 1; padding: 0 1; color: $text-muted; }
    Notice.error { color: $error; border-left: thick $error; }
    Notice.warning { color: $warning; border-left: thick $warning; }
    """

    def __init__(self, text: str, kind: str = "info"):
        prefix = {"error": "error: ", "warning": "note: "}.get(kind, "")
        super().__init__(Content(prefix + text), classes=kind, markup=False)
        self.kind = kind


class UserMessage(Static):
    """What the user sent: text plus one chip per attachment."""

    DEFAULT_CSS = """
    UserMessage { margin: 1 1 1 1; padding: 0 1; border-left: thick $user-border; background: $surface; }
    """

    def __init__(self, message: dict, index: int):
        chips = [f"[{a['name']} · {a['n_tokens']:,} tok]" if a.get("n_tokens") is not None else f"[{a['name']}]"
                 for a in message.get("attachments") or ()]
        text = message.get("content") or ""
        parts = [Content(text)] if text else []
        if chips:
            parts.append(Content.styled("  ".join(chips), "$accent"))
        super().__init__(Content("\n").join(parts), markup=False)
        self.index = index
        self.message = message


class AssistantMessage(Vertical):
    """One reply, streamed in by append() at frame rate, or loaded whole from history."""

    DEFAULT_CSS = """
    AssistantMessage { height: auto; margin: 0 1 1 1; padding: 0 1; }
    AssistantMessage Collapsible { margin: 0; padding: 0; border: none; background: transparent; }
    AssistantMessage #think-text { color: $think-foreground; text-style: italic; padding: 0 0 0 2; }
    AssistantMessage Markdown { margin: 0; padding: 0; background: transparent; }
    AssistantMessage #answer-prov { padding: 0; }
    AssistantMessage #reply-footer { color: $text-muted; text-style: italic; }
    AssistantMessage.cancelled #reply-footer { color: $warning; }
    """

    def __init__(self, index: int, *, highlight: bool = False, thinking: bool = False,
                 text: str | None = None, spans: Spans | None = None, footer: str = ""):
        super().__init__()
        self.index = index
        self.highlight = highlight
        self.splitter = ThinkSplitter(thinking)
        self.think = ""
        self.answer_spans: Spans = []     # the answer, by provenance
        self.all_spans: Spans = []        # the whole reply (think included), by provenance: what is stored
        self.streaming = text is None
        self._initial = (spans if spans is not None else [(text, False)]) if text is not None else None
        self._footer = footer
        self._stream = None
        self._thought_done = False

    def compose(self) -> ComposeResult:
        with Collapsible(title="Thinking…", collapsed=False, id="think"):
            yield Static("", id="think-text", markup=False)
        yield Markdown(id="answer-md")
        yield Static("", id="answer-prov", markup=False)
        yield Static(self._footer, id="reply-footer", markup=False)

    async def on_mount(self) -> None:
        self.query_one("#think").display = False
        self.query_one("#reply-footer").display = bool(self._footer)
        self._show_view()
        if self._initial is not None:
            self._feed(self._initial)
            self._feed_pieces(self.splitter.flush())
            await self.query_one("#answer-md", Markdown).update(self.answer_text)
            self._refresh_views()
        else:
            self._stream = Markdown.get_stream(self.query_one("#answer-md", Markdown))

    # -- text ------------------------------------------------------------------------------------
    @property
    def answer_text(self) -> str:
        return "".join(t for t, _ in self.answer_spans)

    @property
    def text(self) -> str:
        """The whole reply as generated (reasoning included), i.e. what goes into the history."""
        return "".join(t for t, _ in self.all_spans)

    def _feed(self, spans: Spans) -> str:
        """Route spans to think/answer; returns the new answer text."""
        new_answer = []
        for text, drafted in spans:
            add_span(self.all_spans, text, drafted)
            new_answer.append(self._feed_pieces(self.splitter.feed(text, drafted)))
        return "".join(new_answer)

    def _feed_pieces(self, pieces) -> str:
        new_answer = []
        for channel, text, drafted in pieces:
            if channel == "think":
                self.think += text
            else:
                add_span(self.answer_spans, text, drafted)
                new_answer.append(text)
        return "".join(new_answer)

    async def append(self, spans: Spans) -> None:
        """New streamed text (one frame's worth)."""
        new_answer = self._feed(spans)
        if new_answer and self._stream is not None:
            await self._stream.write(new_answer)
        self._refresh_views()

    async def finish(self, footer: str, *, cancelled: bool = False) -> None:
        new_answer = self._feed_pieces(self.splitter.flush())
        if self._stream is not None:
            if new_answer:
                await self._stream.write(new_answer)
            await self._stream.stop()
            self._stream = None
        self.streaming = False
        self.set_class(cancelled, "cancelled")
        self._footer = footer
        footer_w = self.query_one("#reply-footer", Static)
        footer_w.update(footer)
        footer_w.display = bool(footer)
        self._refresh_views()

    # -- views -------------------------------------------------------------------------------------
    def set_highlight(self, on: bool) -> None:
        self.highlight = on
        self._show_view()
        self._refresh_views()

    def _show_view(self) -> None:
        self.query_one("#answer-md").display = not self.highlight
        self.query_one("#answer-prov").display = self.highlight

    def _refresh_views(self) -> None:
        if self.think:
            box = self.query_one("#think", Collapsible)
            box.display = True
            self.query_one("#think-text", Static).update(self.think.strip())
            if self.answer_spans and not self._thought_done:
                self._thought_done = True
                box.collapsed = True
            if self._thought_done or not self.streaming:
                box.title = f"Thoughts ({len(self.think.split()):,} words)"
        if self.highlight:
            self.query_one("#answer-prov", Static).update(provenance_content(self.answer_spans))
