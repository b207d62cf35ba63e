"""The reply views that stream at a cost independent of the reply's length: Markdown drawn like
Textual's Markdown widget, cut into sealed and live parts that read as one document; the
provenance view sealed at line breaks; the garbage collector paced by frames while a job runs."""
from __future__ import annotations

import gc
import random

from textual.app import App
from textual.containers import VerticalScroll
from textual.widgets import Markdown

from luce_tui import quiet_gc
from luce_tui.widgets import md_stream
from luce_tui.widgets.markdown_view import MarkdownView
from luce_tui.widgets.md_layout import layout, margins
from luce_tui.widgets.md_stream import Carry, parse, split_finished
from luce_tui.widgets.messages import spans_after
from luce_tui.widgets.span_view import SpanView, cut_spans
from tui_support import run_async, screen_text

SAMPLE = """# Title here

Some *emphasis*, **strong**, ~~struck~~ and `inline code` with a [link](https://example.com) in a paragraph
that is long enough to wrap around the edge of the screen.

## Second heading

- item one
- item two that is long enough to wrap around the edge of the sixty column wide screen
  - nested a
    - deeper
- item three

1. first
2. second

9. nine
10. ten

> a quote that is long enough to wrap around the edge of the sixty column wide screen
>
> second para

```python
def step(self):
    return self.engine.verify(block)  # a comment that is long enough to overflow the width
```

---

### Third

| col a | column b |
|---|---|
| 1 | two |

    indented code

- item with code:

  ```
  x = 1
  ```
- last
"""

SNIPPETS = ["# Head\n", "## Sub\n", "### H3\n", "para text here that is a bit long\n", "more text\n", "\n", "\n\n",
            "- item\n", "- item two\n", "  - nested\n", "1. one\n", "2. two\n", "* star\n", "> quote\n",
            "```py\nx = 1\n", "```\n", "    code\n", "---\n", "| a | b |\n", "|---|---|\n", "| 1 | 2 |\n",
            "text with **bold** and `code`\n", "3) paren\n", "Title\n===\n", "def f():\n", "    return 1\n",
            "~~~\n", "<div>\n"]


def stream_lines(doc: str, rng: random.Random, width: int) -> list[str]:
    """doc fed in random pieces the way MarkdownView does: sealed blocks + the open rest."""
    sealed, above, open_source, carry = [], None, "", Carry()
    pos = 0
    while pos < len(doc):
        n = rng.randint(1, 12)
        open_source += doc[pos:pos + n]
        pos += n
        split = split_finished(open_source, carry)
        if split.finished:
            sealed += split.finished
            above = margins(split.finished[-1])[1]
            open_source, carry = split.open_source, split.carry
    lines = layout(sealed, width, trailing=False) if sealed else []
    lines += layout(parse(open_source, carry), width, gap_before=above)
    return [line.plain for line in lines]


def test_streamed_markdown_reads_like_the_whole_document(monkeypatch):
    # small cut sizes so that code blocks are cut too
    monkeypatch.setattr(md_stream, "FENCE_CUT_LINES", 3)
    monkeypatch.setattr(md_stream, "FENCE_KEEP_LINES", 2)
    rng = random.Random(5)
    for _ in range(200):
        doc = "".join(rng.choice(SNIPPETS) for _ in range(rng.randint(1, 18)))
        whole = [line.plain for line in layout(parse(doc), 40)]
        assert stream_lines(doc, rng, 40) == whole, doc


def test_long_lists_and_code_blocks_are_cut_while_open():
    items = "".join(f"- item {i}\n" for i in range(200))
    split = split_finished(items)
    assert split.open_source == "- item 199\n" and len(split.finished[0].items) == 199
    numbered = split_finished("".join(f"{i}. x\n" for i in range(1, 40)))
    assert numbered.carry.list_start == 39 and parse(numbered.open_source, numbered.carry)[0].start == 39
    code = "```python\n" + "".join(f"x{i} = {i}\n" for i in range(100))
    split = split_finished(code)
    assert split.carry.fence and split.open_source.startswith("```python\n") and split.open_source.count("\n") < 10
    assert not split_finished("para\n\n9").finished          # "9" may still become "9. item" of a list


@run_async
async def test_markdown_view_draws_like_textual_markdown():
    class Reference(App):
        CSS = "Markdown { margin: 0; padding: 0; background: transparent; }"

        def compose(self):
            yield VerticalScroll(Markdown(SAMPLE))

    view = MarkdownView()

    class Streamed(App):
        def compose(self):
            yield VerticalScroll(view.live)

    screens = []
    for app, chunk in ((Reference(), 0), (Streamed(), 7)):
        async with app.run_test(size=(60, 80)) as pilot:
            await pilot.pause(0.3)
            if chunk:
                for i in range(0, len(SAMPLE), chunk):
                    view.append(SAMPLE[i:i + chunk])
                await pilot.pause(0.3)
            screens.append([line.rstrip() for line in screen_text(app).splitlines()])
    assert screens[1] == screens[0]


@run_async
async def test_a_long_reply_is_a_few_widgets():
    text = ("The engine verifies **sixteen** drafted tokens; `commit(k)` keeps the prefix.\n\n"
            "- item one\n- item two\n\n```\ncode line\n```\n\n") * 300       # ~26,000 characters

    md, prov = MarkdownView(), SpanView()

    class Streamed(App):
        def compose(self):
            yield VerticalScroll(md.live, prov.live)

    app = Streamed()
    async with app.run_test(size=(80, 30)) as pilot:
        for i in range(0, len(text), 400):
            md.append(text[i:i + 400])
            prov.append([(text[i:i + 400], (i // 400) % 2 == 1)])
            if i % 4000 == 0:
                await pilot.pause()
        await pilot.pause()
        assert len(md.sealed_pieces) == 1 and len(prov.sealed_pieces) == 1
        assert len(md._open) < 600                                  # only the open block is parsed again
        parts = prov.contents()
        assert "\n".join(part.plain for part in parts) == text
        drafted, base = set(), 0                    # drafted characters, line breaks aside
        for part in parts:
            drafted |= {base + i for span in part.spans for i in range(span.start, span.end)}
            base += len(part.plain) + 1
        expected = {i for i in range(len(text)) if (i // 400) % 2 == 1}
        assert {i for i in drafted if text[i] != "\n"} == {i for i in expected if text[i] != "\n"}


def test_cut_spans_and_spans_after():
    spans = [("ab\ncd", False), ("ef\ngh", True)]
    assert cut_spans(spans, 2) == ([("ab", False)], [("cd", False), ("ef\ngh", True)])
    assert cut_spans(spans, 7) == ([("ab\ncd", False), ("ef", True)], [("gh", True)])
    assert spans_after(spans, 10, 0) == spans
    assert spans_after(spans, 10, 4) == [("d", False), ("ef\ngh", True)]
    assert spans_after(spans, 10, 10) == []


def test_collection_is_paced_by_frames_while_a_job_runs(monkeypatch):
    monkeypatch.setattr(quiet_gc, "IDLE_BEFORE_FULL", 0.0)
    assert quiet_gc.settle() and gc.isenabled()     # an app of an earlier test may have left it paced
    monkeypatch.setattr(quiet_gc, "IDLE_BEFORE_FULL", 0.5)
    quiet_gc.job_started()
    try:
        assert not gc.isenabled()
        quiet_gc.frame()                    # a young collection, no full one
        quiet_gc.job_ended()
        quiet_gc.key_pressed()
        assert not quiet_gc.settle() and not gc.isenabled()     # the user is typing: later
        monkeypatch.setattr(quiet_gc, "IDLE_BEFORE_FULL", 0.0)
        assert quiet_gc.settle() and gc.isenabled()
    finally:
        gc.enable()
