"""Blocks (md_blocks) -> lines of Content at a given width, drawn the way Textual's Markdown
widget draws them: the same margins (collapsed between neighbours), bullets, fences, quotes,
rules and tables, styled through component classes that MarkdownPiece defines in CSS.

A block's lines are cached per width, so a finished block is wrapped once, however often the
view around it is laid out again.
"""

from __future__ import annotations

from textual.content import Content

from luce_tui.widgets.md_blocks import BULLETS, Block

BLANK = Content("")


def layout(blocks: list[Block], width: int, *, gap_before: int | None = None, trailing: bool = True,
           top_level: bool = True, in_list: bool = False) -> list[Content]:
    """The lines of blocks stacked vertically.

    gap_before: the bottom margin of the block drawn just above (None: nothing above, so the
    first block's own top margin applies). trailing: end with the last block's bottom margin.
    """
    lines: list[Content] = []
    above = gap_before
    for block in blocks:
        top, bottom = margins(block, top_level=top_level, in_list=in_list)
        lines.extend([BLANK] * (top if above is None else max(above, top)))
        lines.extend(block_lines(block, width))
        above = bottom
    if trailing and above:
        lines.extend([BLANK] * above)
    return lines


def margins(block: Block, *, top_level: bool = True, in_list: bool = False) -> tuple[int, int]:
    """(top, bottom) margin in lines, as Textual's Markdown CSS sets them."""
    kind = block.kind
    if kind == "paragraph":
        return (0, 1) if top_level else (0, 0)
    if kind == "heading":
        return (2, 1) if block.level <= 2 else (1, 1)
    if kind == "fence":
        return 0 if block.continuation else 1, 0 if block.continued else 1
    if kind == "quote":
        return 1, 1
    if kind == "list":
        return (0, 0) if in_list or block.continued else (0, 1)
    return 0, 1            # rule, table


def block_lines(block: Block, width: int) -> list[Content]:
    """A block's own lines (margins are the caller's), cached for the last width asked."""
    width = max(width, 4)
    if block.layout_cache is not None and block.layout_cache[0] == width:
        return block.layout_cache[1]
    lines = _DRAW[block.kind](block, width)
    block.layout_cache = (width, lines)
    return lines


def _paragraph(block: Block, width: int) -> list[Content]:
    return block.text.wrap(width)


def _heading(block: Block, width: int) -> list[Content]:
    style = f".h{block.level}"
    if block.level == 1:     # centred on a full-width band
        return [line.center(width).stylize_before(style) for line in block.text.wrap(width)]
    return [line.stylize_before(style) for line in block.text.wrap(width)]


def _rule(block: Block, width: int) -> list[Content]:
    return [BLANK, Content.styled("─" * width, ".rule")]


def _fence(block: Block, width: int) -> list[Content]:
    """Padding 1 2 around the code; long lines are cut, not wrapped (as Textual). A fence cut
    in two while streaming has no padding line where it was cut."""
    inner = width - 2
    band = Content(" " * width).stylize(".fence")
    lines = [] if block.continuation else [band]
    code = block.text.split("\n", allow_blank=True) if block.text or not block.continuation else []
    for line in code:
        line = line.expand_tabs(8).truncate(inner)
        lines.append(Content.assemble("  ", line, " " * (width - 2 - line.cell_length)).stylize_before(".fence"))
    if not block.continued:
        lines.append(band)
    return lines


def _quote(block: Block, width: int) -> list[Content]:
    inner = layout(block.children, width - 3, top_level=False)
    return [Content.assemble(("▌", ".quote-border"), " ", line, " " * (width - 2 - line.cell_length))
            .stylize_before(".quote") for line in inner]


def _list(block: Block, width: int) -> list[Content]:
    if block.ordered:
        numbers = range(block.start, block.start + len(block.items))
        size = max(len(f"{n}. ") for n in numbers) + 1
        symbols = [f"{n}. ".rjust(size) for n in numbers]
    else:
        symbols = [BULLETS[block.depth % len(BULLETS)]] * len(block.items)
    lines: list[Content] = []
    for symbol, item in zip(symbols, block.items):
        body = layout(item, width - len(symbol), top_level=False, in_list=True) or [BLANK]
        lines.append(Content.styled(symbol, ".bullet") + body[0])
        lines.extend(Content(" " * len(symbol)) + line for line in body[1:])
    return lines


def _table(block: Block, width: int) -> list[Content]:
    """A grid with thin keylines; columns share the width in proportion to their contents."""
    if not block.rows:
        return []
    n = max(len(row) for row in block.rows)
    rows = [row + [BLANK] * (n - len(row)) for row in block.rows]
    natural = [max(row[c].cell_length for row in rows) + 2 for c in range(n)]
    room = width - (n + 1)
    if sum(natural) < room:    # grow to the full width, in proportion
        total, grown = sum(natural), []
        for c, w in enumerate(natural):
            grown.append(room - sum(grown) if c == n - 1 else w * room // total)
        natural = grown
    cols = [max(w, 3) for w in natural]

    def rule(left: str, mid: str, right: str) -> Content:
        return Content.styled(left + mid.join("─" * w for w in cols) + right, ".table-lines")

    bar = Content.styled("│", ".table-lines")
    lines = [rule("┌", "┬", "┐")]
    for r, row in enumerate(rows):
        cells = [cell.truncate(w - 2, ellipsis=True) for cell, w in zip(row, cols)]
        parts: list[Content] = [bar]
        for cell, w in zip(cells, cols):
            if r == 0:
                cell = cell.stylize_before(".table-header")
            parts += [Content(" "), cell, Content(" " * (w - 1 - cell.cell_length)), bar]
        lines.append(Content.assemble(*parts))
        lines.append(rule("├", "┼", "┤") if r < len(rows) - 1 else rule("└", "┴", "┘"))
    return lines


_DRAW = {"paragraph": _paragraph, "heading": _heading, "rule": _rule, "fence": _fence, "quote": _quote,
         "list": _list, "table": _table}
