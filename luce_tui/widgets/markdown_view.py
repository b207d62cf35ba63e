"""A streamed reply as Markdown, at a cost per frame that does not grow with the reply.

Each frame re-parses only the open source (the text after the last finished block, after the
last finished item of a long top-level list, or the last lines of a long code block; see
md_stream.py); finished blocks are sealed (see sealed.py).
Blocks are drawn by md_layout in the style of Textual's Markdown widget, whose per-block widgets
cost too much at 2,000 tokens/s (mounting ~2.6 ms each, plus a layout pass over all of them).
"""

from __future__ import annotations

import dataclasses

from textual.content import Content

from luce_tui.widgets.md_blocks import Block
from luce_tui.widgets.md_layout import layout, margins
from luce_tui.widgets.md_stream import Carry, parse, split_finished
from luce_tui.widgets.sealed import Piece, SealedColumn

SPLIT_CHARS = 512        # open source this long: look for finished blocks to seal


@dataclasses.dataclass
class BlocksPart:
    blocks: list[Block]
    gap_before: int | None     # bottom margin of the block above (None: nothing above)
    trailing: bool             # ends with its last block's bottom margin (the end of the reply)


def draw_blocks(part: BlocksPart, width: int) -> list[Content]:
    return layout(part.blocks, width, gap_before=part.gap_before, trailing=part.trailing)


class MarkdownPiece(Piece):
    """Sealed or live blocks; the component classes style what md_layout marks."""

    COMPONENT_CLASSES = {"em", "strong", "s", "code_inline", "h1", "h2", "h3", "h4", "h5", "h6", "bullet",
                         "fence", "quote", "quote-border", "rule", "table-lines", "table-header"}
    DEFAULT_CSS = """
    MarkdownPiece {
        & > .em { text-style: italic; }
        & > .strong { text-style: bold; }
        & > .s { text-style: strike; }
        &:dark > .code_inline { background: $warning 10%; color: $text-warning 95%; }
        &:light > .code_inline { background: $error 5%; color: $text-error 95%; }
        & > .h1 { color: $markdown-h1-color; background: $markdown-h1-background; text-style: $markdown-h1-text-style; }
        & > .h2 { color: $markdown-h2-color; background: $markdown-h2-background; text-style: $markdown-h2-text-style; }
        & > .h3 { color: $markdown-h3-color; background: $markdown-h3-background; text-style: $markdown-h3-text-style; }
        & > .h4 { color: $markdown-h4-color; background: $markdown-h4-background; text-style: $markdown-h4-text-style; }
        & > .h5 { color: $markdown-h5-color; background: $markdown-h5-background; text-style: $markdown-h5-text-style; }
        & > .h6 { color: $markdown-h6-color; background: $markdown-h6-background; text-style: $markdown-h6-text-style; }
        & > .bullet { color: $text-primary; }
        &:light > .bullet { color: $text-secondary; }
        & > .fence { color: rgb(210,210,210); background: black 10%; }
        /* as Textual's; through a component style it comes out a little darker than the page */
        &:light > .fence { background: white 30%; }
        & > .quote { background: $boost; }
        & > .quote-border { color: $text-primary 50%; }
        &:light > .quote-border { color: $text-secondary; }
        & > .rule { color: $secondary; }
        & > .table-lines { color: $foreground 20%; }
        & > .table-header { color: $primary; }
    }
    """

    def action_link(self, href: str) -> None:
        self.app.open_url(href)


class MarkdownView(SealedColumn):
    """append() text as it streams; only the open blocks are parsed and drawn again.
    (Its widgets are pieces in the holder: see SealedColumn.)"""

    piece_class = MarkdownPiece

    def __init__(self):
        super().__init__(draw_blocks)
        self._open = ""                      # source not sealed yet
        self._carry = Carry()                # what the open source continues from above
        self._above: int | None = None       # bottom margin of the last sealed block

    def append(self, text: str) -> None:
        self._open += text
        if len(self._open) < SPLIT_CHARS:
            self._show(parse(self._open, self._carry))
            return
        split = split_finished(self._open, self._carry)
        if split.finished:
            self.seal(BlocksPart(split.finished, self._above, trailing=False),
                      max(len(self._open) - len(split.open_source), 1))
            self._above = margins(split.finished[-1])[1]
            self._open, self._carry = split.open_source, split.carry
        self._show(split.open_blocks)

    def _show(self, blocks: list[Block]) -> None:
        self.show_live(BlocksPart(blocks, self._above, trailing=True))
