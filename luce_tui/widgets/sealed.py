"""A growing text drawn as pieces: sealed ones that never change again, and one live piece.

Streaming at thousands of tokens/s, re-rendering a whole reply every frame costs time in
proportion to its length. Here a frame re-parses and re-wraps only the live piece (the part later
text can still change); finished parts are sealed: wrapped once (again only if the width
changes) and appended to the last sealed widget until it holds MERGE_CHARS, so a long reply is a
few widgets, not thousands (each widget costs time in every layout pass). Pieces render only the
lines on screen (Textual's line API), so a big sealed piece costs nothing while it scrolls by.
"""

from __future__ import annotations

from typing import Any, Callable

from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.cache import LRUCache
from textual.content import Content
from textual.geometry import Size
from textual.selection import Selection
from textual.strip import Strip
from textual.style import Style
from textual.visual import Visual
from textual.widget import Widget

MERGE_CHARS = 64_000      # source characters per sealed widget

Draw = Callable[[Any, int], list[Content]]     # (part, width) -> its lines


class PartLines:
    """The lines of a list of parts at one width; adding a part wraps only that part."""

    def __init__(self, draw: Draw, parts: list[Any] | None = None):
        self.draw = draw
        self.parts: list[Any] = list(parts or ())
        self._width: int | None = None
        self._lines: list[Content] = []

    def add(self, part: Any) -> None:
        self.parts.append(part)
        if self._width is not None:
            self._lines.extend(self.draw(part, self._width))

    def lines(self, width: int) -> list[Content]:
        if width != self._width:
            self._width, self._lines = width, [line for part in self.parts for line in self.draw(part, width)]
        return self._lines


def _with_offsets(strip: Strip, y: int) -> Strip:
    """The strip with each character's (x, y) in its style, which mouse selection reads.
    (Strip.apply_offsets does the same but keeps the result in the original's cache, which
    would keep two strips alive per cached line.)"""
    segments, x = [], 0
    for text, style, control in strip:
        offset = RichStyle.from_meta({"offset": (x, y)})
        segments.append(Segment(text, style + offset if style else offset, control))
        x += len(text)
    return Strip(segments, strip.cell_length)


class StripCache:
    """Rendered lines by content, shared by the pieces of one column: a line drawn while live is
    not drawn again when it is sealed, nor when a piece is redrawn."""

    def __init__(self, size: int = 256):
        self._cache: LRUCache[tuple, tuple[Content, Strip]] = LRUCache(size)

    def get(self, line: Content, key: tuple) -> Strip | None:
        hit = self._cache.get((line.plain, *key))
        return hit[1] if hit is not None and (hit[0] is line or hit[0].is_same(line)) else None

    def put(self, line: Content, key: tuple, strip: Strip) -> None:
        self._cache[(line.plain, *key)] = (line, strip)

    def clear(self) -> None:
        self._cache.clear()


class Piece(Widget):
    """Pre-wrapped lines; only the lines on screen are rendered. Text in it can be selected."""

    DEFAULT_CSS = "Piece { width: 1fr; height: auto; }"

    def __init__(self, source: PartLines, strips: StripCache, *, classes: str | None = None):
        super().__init__(classes=classes)
        self.source, self.strips = source, strips

    def show(self, source: PartLines) -> None:
        self.source = source
        self.changed()

    def changed(self) -> None:
        """The source's lines changed: replaced (show) or appended to."""
        self.refresh(layout=True)

    def notify_style_update(self) -> None:
        self.strips.clear()
        super().notify_style_update()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.source.lines(width))

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        lines = self.source.lines(width)
        if y >= len(lines):
            return Strip.blank(width, self.rich_style)
        line = lines[y]
        selection = self.text_selection
        span = selection.get_span(y) if selection is not None else None
        if span is not None:
            start, end = span
            style = Style.from_styles(self.screen.get_component_styles("screen--selection"))
            strip = self._draw(line.stylize(style, start, len(line.plain) if end == -1 else end), width)
        else:
            key = (width, self.app.theme)
            strip = self.strips.get(line, key)
            if strip is None:
                strip = self._draw(line, width)
                self.strips.put(line, key, strip)
        return _with_offsets(strip, y)

    def _draw(self, line: Content, width: int) -> Strip:
        strips = Visual.to_strips(self, line, width, 1, self.visual_style, apply_selection=False, pad=True)
        return strips[0] if strips else Strip.blank(width, self.rich_style)

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        text = "\n".join(line.plain for line in self.source.lines(self.content_size.width))
        return selection.extract(text), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self.refresh()


class SealedColumn:
    """One growing text as pieces in the widget that holds it: sealed pieces above one live piece.

    Not a widget itself: a container around the pieces would be one more layer to draw on every
    frame while the chat scrolls (about a tenth of a frame, measured). The holder yields `live`
    in its compose(); sealed pieces are mounted just above it. Subclasses give draw (a part's
    lines at a width) and call seal() / show_live().
    """

    piece_class: type[Piece] = Piece

    def __init__(self, draw: Draw, *, classes: str | None = None):
        self.draw, self.classes = draw, classes
        self.strips = StripCache()
        self.shown = True
        self.live = self._piece(PartLines(draw))
        self._sealed: list[tuple[Piece, int]] = []    # (widget, source characters in it)

    def _piece(self, source: PartLines) -> Piece:
        piece = self.piece_class(source, self.strips, classes=self.classes)
        piece.display = self.shown
        return piece

    @property
    def sealed_pieces(self) -> list[Piece]:
        return [piece for piece, _ in self._sealed]

    def show(self, on: bool) -> None:
        self.shown = on
        for piece in [*self.sealed_pieces, self.live]:
            piece.display = on

    def show_live(self, part: Any) -> None:
        self.live.show(PartLines(self.draw, [part]))

    def seal(self, part: Any, chars: int) -> None:
        """A finished part, shown above the live piece from now on."""
        if self._sealed and self._sealed[-1][1] + chars <= MERGE_CHARS:
            piece, held = self._sealed[-1]
            piece.source.add(part)
            piece.changed()
            self._sealed[-1] = (piece, held + chars)
            return
        piece = self._piece(PartLines(self.draw, [part]))
        self._sealed.append((piece, chars))
        self.live.parent.mount(piece, before=self.live)
