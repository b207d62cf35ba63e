"""Cutting streamed Markdown into finished blocks and the source still open.

A top-level block is finished once another one has started after it and that one's first line
is complete (until then "9" may still become "9. item" of the list above). Two kinds of block
can be long enough to matter on their own and are cut inside: a top-level list between items,
and an unclosed fenced code block between lines. The cut-off part is drawn as continuing
(no bottom margin; the open part no top margin or band), so the pieces read as one block.
"""

from __future__ import annotations

import dataclasses

from markdown_it.token import Token

from luce_tui.widgets.md_blocks import Block, build, highlight_code, parse_tokens

FENCE_CUT_LINES = 24     # an open code block longer than this is cut...
FENCE_KEEP_LINES = 4     # ...keeping its last lines open


@dataclasses.dataclass(frozen=True)
class Carry:
    """What the open source continues from the sealed text above it."""

    list_start: int | None = None   # an ordered list, at this number
    fence: bool = False             # a fenced code block (the open source repeats its first line)


@dataclasses.dataclass
class Split:
    finished: list[Block]
    open_blocks: list[Block]        # what the open source looks like now
    open_source: str
    carry: Carry                    # for parsing open_source from now on


def parse(source: str, carry: Carry = Carry()) -> list[Block]:
    tokens = parse_tokens(source)
    return _carried(build(tokens), tokens, carry)


def split_finished(source: str, carry: Carry = Carry()) -> Split:
    tokens = parse_tokens(source)
    blocks = _carried(build(tokens), tokens, carry)
    openers = [t for t in tokens if t.level == 0 and t.nesting >= 0 and t.map is not None]
    if not blocks or len(openers) != len(blocks):   # nothing yet, or a construct we cannot line up
        return Split([], blocks, source, carry)
    lines = source.splitlines(keepends=True)
    finished, open_block, opener = blocks[:-1], blocks[-1], openers[-1]
    cut, prefix, next_carry = opener.map[0], "", Carry()
    if open_block.kind == "list" and len(open_block.items) > 1:
        items = [t.map[0] for t in tokens if t.type == "list_item_open" and t.level == 1 and t.map[0] >= cut]
        if len(items) == len(open_block.items):
            head, open_block, next_carry = _cut_list(open_block)
            finished, cut = finished + [head], items[-1]
    elif open_block.kind == "fence" and opener.type == "fence":
        body = opener.content.splitlines(keepends=True)
        closed = opener.map[1] - opener.map[0] - 1 > len(body)
        # cut after a line with text: blank lines at the end of a code block are not shown,
        # and which ones are at the end is not known yet
        k = len(body) - FENCE_KEEP_LINES
        while k > 0 and not body[k - 1].strip():
            k -= 1
        if not closed and len(body) > FENCE_CUT_LINES and k > 0:
            head, open_block = _cut_fence(open_block, body, k, opener.info)
            finished, cut = finished + [head], opener.map[0] + 1 + k
            prefix, next_carry = lines[opener.map[0]], Carry(fence=True)
    if not finished or not lines[cut].endswith("\n"):
        return Split([], blocks, source, carry)
    return Split(finished, [open_block], prefix + "".join(lines[cut:]), next_carry)


def _cut_list(block: Block) -> tuple[Block, Block, Carry]:
    head = dataclasses.replace(block, items=block.items[:-1], continued=True, layout_cache=None)
    number = block.start + len(block.items) - 1 if block.ordered else None
    tail = dataclasses.replace(block, items=block.items[-1:], start=number or 1, layout_cache=None)
    return head, tail, Carry(list_start=number)


def _cut_fence(block: Block, body: list[str], k: int, info: str) -> tuple[Block, Block]:
    head = dataclasses.replace(block, text=highlight_code("".join(body[:k]), info), continued=True,
                               layout_cache=None)
    tail = dataclasses.replace(block, text=highlight_code("".join(body[k:]).rstrip(), info), continuation=True,
                               layout_cache=None)
    return head, tail


def _carried(blocks: list[Block], tokens: list[Token], carry: Carry) -> list[Block]:
    if blocks and tokens:
        if carry.list_start is not None and tokens[0].type == "ordered_list_open":
            blocks[0].start = carry.list_start
        if carry.fence and tokens[0].type == "fence":
            blocks[0].continuation = True
    return blocks
