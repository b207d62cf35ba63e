"""Markdown source -> a small tree of blocks (the model that md_layout draws).

Parsing uses the markdown-it "gfm-like" parser that Textual's Markdown widget uses, and turns
inline text into Content the same way it does (the component classes .em, .strong, .s,
.code_inline; links click through to `link(href)`), so a reply reads the same as it did in that
widget. Unlike the widget, nothing here is a DOM node: a reply of 20,000 tokens is a few
widgets, not thousands (mounting one Textual widget per block costs milliseconds each).

md_stream cuts a streamed source into the blocks that are finished and the part still open.
"""

from __future__ import annotations

import dataclasses
import re

from markdown_it import MarkdownIt
from markdown_it.token import Token
from textual.content import Content, Span
from textual.style import Style

BULLETS = ("• ", "▪ ", "‣ ", "⭑ ", "◦ ")      # by depth, as Textual's Markdown draws them
_PARSER = MarkdownIt("gfm-like")


@dataclasses.dataclass(eq=False)
class Block:
    kind: str                       # paragraph heading rule fence quote list table
    text: Content = Content("")     # paragraph/heading inline text; fence: highlighted code
    level: int = 0                  # heading level
    children: list["Block"] = dataclasses.field(default_factory=list)        # quote
    items: list[list["Block"]] = dataclasses.field(default_factory=list)     # list
    ordered: bool = False
    start: int = 1                  # ordered list: number of the first item
    depth: int = 0                  # bullet list: nesting depth (picks the bullet)
    rows: list[list[Content]] = dataclasses.field(default_factory=list)      # table, header first
    continued: bool = False         # goes on in the piece below (a list's items, a fence's lines)
    continuation: bool = False      # goes on from the piece above (a fence's lines)
    layout_cache: tuple | None = None   # (width, lines): md_layout's cache


def parse_tokens(source: str) -> list[Token]:
    return _PARSER.parse(source)


def build(tokens: list[Token]) -> list[Block]:
    return _Builder(tokens).blocks()


class _Builder:
    """markdown-it's flat token stream -> nested Blocks."""

    def __init__(self, tokens: list[Token]):
        self.tokens, self.i = tokens, 0

    def blocks(self, depth: int = 0, close: str | None = None) -> list[Block]:
        out: list[Block] = []
        tokens = self.tokens
        while self.i < len(tokens):
            t = tokens[self.i]
            self.i += 1
            kind = t.type
            if close is not None and kind == close:
                break
            if kind == "heading_open":
                out.append(Block("heading", self._inline_until("heading_close"), level=int(t.tag[1:])))
            elif kind == "paragraph_open":
                out.append(Block("paragraph", self._inline_until("paragraph_close")))
            elif kind == "hr":
                out.append(Block("rule"))
            elif kind in ("fence", "code_block"):
                out.append(Block("fence", highlight_code(t.content.rstrip(), t.info)))
            elif kind == "blockquote_open":
                out.append(Block("quote", children=self.blocks(depth, "blockquote_close")))
            elif kind in ("bullet_list_open", "ordered_list_open"):
                out.append(self._list(kind == "ordered_list_open", depth))
            elif kind == "table_open":
                out.append(Block("table", rows=self._table()))
            elif kind == "html_block":      # shown as typed rather than dropped
                out.append(Block("paragraph", Content(t.content.rstrip())))
        return out

    def _inline_until(self, close: str) -> Content:
        text = Content("")
        while self.i < len(self.tokens):
            t = self.tokens[self.i]
            self.i += 1
            if t.type == "inline":
                text = inline_content(t)
            elif t.type == close:
                break
        return text

    def _list(self, ordered: bool, depth: int) -> Block:
        close = "ordered_list_close" if ordered else "bullet_list_close"
        block = Block("list", ordered=ordered, depth=depth)
        first = True
        while self.i < len(self.tokens):
            t = self.tokens[self.i]
            self.i += 1
            if t.type == close:
                break
            if t.type == "list_item_open":
                if first and ordered:
                    block.start = int(t.info) if t.info.isdigit() else 1
                first = False
                block.items.append(self.blocks(depth + (0 if ordered else 1), "list_item_close"))
        return block

    def _table(self) -> list[list[Content]]:
        rows: list[list[Content]] = []
        while self.i < len(self.tokens):
            t = self.tokens[self.i]
            self.i += 1
            if t.type == "table_close":
                break
            if t.type == "tr_open":
                rows.append([])
            elif t.type == "inline" and rows:
                rows[-1].append(inline_content(t))
        return rows


def inline_content(token: Token) -> Content:
    """Inline Markdown -> Content, as Textual's MarkdownBlock builds it."""
    parts: list[str] = []
    spans: list[Span] = []
    opened: list[tuple[str | Style, int]] = []
    pos = 0

    def add(text: str) -> None:
        nonlocal pos
        parts.append(text)
        pos += len(text)

    for child in token.children or ():
        kind = child.type
        if kind == "text":
            add(re.sub(r"\s+", " ", child.content))
        elif kind == "hardbreak":
            add("\n")
        elif kind == "softbreak":
            add(" ")
        elif kind == "code_inline":
            spans.append(Span(pos, pos + len(child.content), ".code_inline"))
            add(child.content)
        elif kind in ("em_open", "strong_open", "s_open"):
            opened.append(("." + kind[:-5], pos))
        elif kind == "link_open":
            opened.append((_click(child.attrs.get("href", "")), pos))
        elif kind == "image":
            start = pos
            alt = child.attrs.get("alt", "")
            add("🖼  " + (f"({alt})" if alt else "") + "".join(c.content for c in child.children or ()))
            spans.append(Span(start, pos, _click(child.attrs.get("src", ""))))
        elif kind.endswith("_close") and opened:
            style, start = opened.pop()
            spans.append(Span(start, pos, style))
    return Content("".join(parts), spans=spans)


def _click(href) -> Style:
    return Style.from_meta({"@click": f"link({str(href)!r})"})


def highlight_code(code: str, language: str) -> Content:
    from textual.highlight import HighlightTheme, highlight

    return highlight(code, language=language.split()[0] if language.strip() else None, theme=HighlightTheme)
