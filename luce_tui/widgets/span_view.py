"""A streamed text by provenance runs (the /highlight view, and the model's reasoning).

Runs that came from accepted drafts are drawn in the theme's $draft-highlight colour. Lines are
independent here, so the text is sealed at its last line break once the live part is long
enough (see sealed.py); a frame re-wraps only the text after it.
"""

from __future__ import annotations

from textual.content import Content

from luce_engine.engine import add_span
from luce_tui.widgets.sealed import SealedColumn

Spans = list[tuple[str, bool]]
SPLIT_CHARS = 512        # live text this long: seal it up to its last line break


def provenance_content(spans: Spans, mark_drafted: bool = True) -> Content:
    if not mark_drafted:
        return Content("".join(text for text, _ in spans))
    return Content.assemble(*[(text, "$draft-highlight bold") if drafted else text for text, drafted in spans])


def cut_spans(spans: Spans, at: int) -> tuple[Spans, Spans]:
    """The runs before character `at` and after it (the character itself, a line break, dropped)."""
    head: Spans = []
    tail: Spans = []
    pos = 0
    for text, drafted in spans:
        end = pos + len(text)
        if end <= at:
            head.append((text, drafted))
        elif pos > at:
            tail.append((text, drafted))
        else:
            left, right = text[: at - pos], text[at - pos + 1:]
            if left:
                head.append((left, drafted))
            if right:
                tail.append((right, drafted))
        pos = end
    return head, tail


def draw_text(content: Content | None, width: int) -> list[Content]:
    return [] if content is None else content.wrap(width)


class SpanView(SealedColumn):
    """append() runs as they stream. strip: leave out leading and trailing whitespace.
    (Its widgets are pieces in the holder: see SealedColumn.)"""

    def __init__(self, *, classes: str | None = None, mark_drafted: bool = True, strip: bool = False):
        super().__init__(draw_text, classes=classes)
        self.mark_drafted, self.strip = mark_drafted, strip
        self._open: Spans = []
        self._open_chars = 0
        self._started = not strip

    def contents(self) -> list[Content]:
        """What the view shows, part by part (sealed parts, then the live one)."""
        parts = [part for piece in self.sealed_pieces for part in piece.source.parts]
        return [p for p in parts + self.live.source.parts if p is not None]

    def append(self, spans: Spans) -> None:
        for text, drafted in spans:
            if not self._started:
                text = text.lstrip()
                self._started = bool(text)
            add_span(self._open, text, drafted)
            self._open_chars += len(text)
        if self._open_chars >= SPLIT_CHARS:
            text = "".join(t for t, _ in self._open)
            cut = text.rfind("\n")
            if cut >= 0:
                head, self._open = cut_spans(self._open, cut)
                self._open_chars -= cut + 1
                self.seal(provenance_content(head, self.mark_drafted), cut)
        self._show()

    def _show(self) -> None:
        content = provenance_content(self._open, self.mark_drafted)
        if self.strip:
            content = content.rstrip()   # as text.strip() would show it
        # in strip mode, trailing blank lines after sealed text are not shown (None: no lines)
        self.show_live(None if self.strip and self._sealed and not content else content)
