"""Chips for the attachments waiting to go with the next message: `[repo.txt · 183,412 tok]`.

With a PFlash scorer loaded a chip also says whether the file will be compressed
(`· auto: compress`, `· auto: full`, or the forced `· compress` / `· full`); clicking it cycles
auto → compress → full (the same as `/compress on|off|auto NAME`).
"""

from __future__ import annotations

from textual.containers import HorizontalGroup
from textual.message import Message
from textual.widgets import Static

from luce_tui.attachments import Attachment, compress_plan


class Chip(Static):
    DEFAULT_CSS = """
    Chip { width: auto; height: 1; margin: 0 1 0 0; padding: 0 1; background: $accent 25%; color: $text; }
    Chip.pending { background: $panel; color: $text-muted; text-style: italic; }
    Chip.too-big { background: $error 30%; }
    """

    class Pressed(Message):
        """A click on the chip of pending attachment `index`."""

        def __init__(self, index: int):
            super().__init__()
            self.index = index

    def __init__(self, text: str, index: int | None = None, **kwargs):
        super().__init__(text, markup=False, **kwargs)
        self.index = index            # position in the app's pending list; None while counting

    def on_click(self) -> None:
        if self.index is not None:
            self.post_message(self.Pressed(self.index))


class AttachmentChips(HorizontalGroup):
    DEFAULT_CSS = """
    AttachmentChips { height: auto; margin: 0 1; padding: 0 1; display: none; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.pending: list[str] = []          # names still being read/counted

    def refresh_chips(self, attachments: list[Attachment], n_ctx: int, compressor=None) -> None:
        self.remove_children()
        plan = compress_plan(attachments, compressor)
        chips = []
        for i, (a, will) in enumerate(zip(attachments, plan)):
            size = a.n_tokens * compressor.config.keep_ratio if will else a.n_tokens   # what will be prefilled
            chip = Chip(f"[{a.chip(will if compressor is not None else None)}]", i,
                        classes="too-big" if size >= n_ctx else "")
            chip.tooltip = ("click: auto → compress → full (PFlash)" if compressor is not None
                            else "sent in full: no PFlash scorer is in use (--pflash-scorer)")
            chips.append(chip)
        chips += [Chip(f"[{name} · counting…]", classes="pending") for name in self.pending]
        if chips:
            self.mount_all(chips)
        self.display = bool(chips)
