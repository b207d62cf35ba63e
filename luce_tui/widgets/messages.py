"""The chat's messages: the user's, the assistant's (streamed) and notices from the app.

An assistant reply has two views of the same text:
- Markdown (the default): markdown_view.MarkdownView, drawn like Textual's Markdown widget;
- provenance (/highlight, F2): the raw text with every run that came from an accepted draft
  drawn in the theme's $draft-highlight colour (span_view.SpanView). Markdown rendering cannot
  colour arbitrary character runs, so highlighting is a view of its own; the runs are kept per
  reply (and in the session store), so switching views and reloaded chats show them too.
Only the view on screen is fed while streaming; the other catches up when it is shown. Both
re-render only their open tail each frame (sealed.py), so a long reply streams as fast as a short one.
A leading <think>…</think> block goes into a Collapsible, open while the model thinks and
collapsed as soon as the answer starts.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Collapsible, Static

from luce_engine.engine import add_span
from luce_tui.thinking import ThinkSplitter
from luce_tui.widgets.markdown_view import MarkdownView
from luce_tui.widgets.span_view import Spans, SpanView


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
    AssistantMessage .think-text { color: $think-foreground; text-style: italic; padding: 0 0 0 2; }
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
        self._thought_done = self._titled = False
        self._answer_chars = 0
        self.thoughts = SpanView(classes="think-text", mark_drafted=False, strip=True)
        self.markdown = MarkdownView()
        self.provenance = SpanView()
        self._fed = {self.thoughts: 0, self.markdown: 0, self.provenance: 0}   # characters each view has

    def compose(self) -> ComposeResult:
        with Collapsible(title="Thinking…", collapsed=False, id="think"):
            yield self.thoughts.live
        yield self.markdown.live
        yield self.provenance.live
        yield Static(self._footer, id="reply-footer", markup=False)

    def on_mount(self) -> None:
        self.query_one("#think").display = False
        self.query_one("#reply-footer").display = bool(self._footer)
        self._show_view()
        if self._initial is not None:
            self._feed(self._initial)
            self._feed_pieces(self.splitter.flush())
            self._refresh_views()

    # -- text ------------------------------------------------------------------------------------
    @property
    def answer_text(self) -> str:
        return "".join(t for t, _ in self.answer_spans)

    @property
    def text(self) -> str:
        """The whole reply as generated (reasoning included), i.e. what goes into the history."""
        return "".join(t for t, _ in self.all_spans)

    def _feed(self, spans: Spans) -> None:
        """Route spans to think/answer."""
        for text, drafted in spans:
            add_span(self.all_spans, text, drafted)
            self._feed_pieces(self.splitter.feed(text, drafted))

    def _feed_pieces(self, pieces) -> None:
        for channel, text, drafted in pieces:
            if channel == "think":
                self.think += text
            else:
                add_span(self.answer_spans, text, drafted)
                self._answer_chars += len(text)

    async def append(self, spans: Spans) -> None:
        """New streamed text (one frame's worth)."""
        self._feed(spans)
        self._refresh_views()

    async def finish(self, footer: str, *, cancelled: bool = False) -> None:
        self._feed_pieces(self.splitter.flush())
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
        self.markdown.show(not self.highlight)
        self.provenance.show(self.highlight)

    def _refresh_views(self) -> None:
        """Hand each shown view the text it has not seen yet."""
        if self.think:
            box = self.query_one("#think", Collapsible)
            box.display = True
            if len(self.think) > self._fed[self.thoughts]:
                self.thoughts.append([(self.think[self._fed[self.thoughts]:], False)])
                self._fed[self.thoughts] = len(self.think)
            if self.answer_spans and not self._thought_done:
                self._thought_done = True
                box.collapsed = True
            if (self._thought_done or not self.streaming) and not self._titled:
                self._titled = True     # the thoughts are complete: count them once
                box.title = f"Thoughts ({len(self.think.split()):,} words)"
        view = self.provenance if self.highlight else self.markdown
        fed = self._fed[view]
        if self._answer_chars > fed:
            new = spans_after(self.answer_spans, self._answer_chars, fed)
            if view is self.provenance:
                self.provenance.append(new)
            else:
                self.markdown.append("".join(t for t, _ in new))
            self._fed[view] = self._answer_chars


def spans_after(spans: Spans, total: int, offset: int) -> Spans:
    """The runs after character `offset` of runs that hold `total` characters (walks from the end,
    so a frame's new text costs the same however long the reply is)."""
    out: Spans = []
    pos = total
    for text, drafted in reversed(spans):
        if pos <= offset:
            break
        start = pos - len(text)
        out.append((text[max(offset - start, 0):], drafted))
        pos = start
    out.reverse()
    return out


def message_widgets(messages: list[tuple[int, dict]], highlight: bool) -> list:
    """Widgets for finished conversation messages (index, message): a saved chat being opened, or
    messages put back after a turn that failed; a compressed turn gets the notice it showed."""
    from luce_tui.conversation import combined_summary

    widgets = []
    for i, m in messages:
        if m["role"] == "user":
            widgets.append(UserMessage(m, i))
            infos = [a["compression"] for a in m.get("attachments") or () if a.get("compression")]
            if infos:
                widgets.append(Notice(combined_summary(infos) + f": scorer "
                                      f"{sum(c.get('scorer_ms', 0) for c in infos) / 1e3:.2f} s"))
        elif m["role"] == "assistant":
            stats = m.get("stats") or {}
            w = AssistantMessage(i, highlight=highlight, text=m["content"], spans=m.get("spans"),
                                 footer=stored_footer(stats))
            w.set_class(stats.get("finish_reason") == "cancelled", "cancelled")
            widgets.append(w)
    return widgets


def stored_footer(stats: dict) -> str:
    """The footer of a finished reply from its saved stats."""
    if not stats:
        return ""
    n, ms = stats.get("generated_tokens"), stats.get("decode_ms")
    parts = []
    if n is not None:
        parts.append(f"{n:,} tok" + (f" @ {n / ms * 1e3:.1f} tok/s" if ms else ""))
    reason = stats.get("finish_reason")
    if reason in ("cancelled", "length", "context"):
        parts.append({"cancelled": "cancelled", "length": "stopped at --max-tokens", "context": "context full"}[reason])
    return " · ".join(parts)
