"""Chips for the attachments waiting to go with the next message: `[repo.txt · 183,412 tok]`."""

from __future__ import annotations

from textual.containers import HorizontalGroup
from textual.widgets import Static

from luce_tui.attachments import Attachment


class Chip(Static):
    DEFAULT_CSS = """
    Chip { width: auto; height: 1; margin: 0 1 0 0; padding: 0 1; background: $accent 25%; color: $text; }
    Chip.pending { background: $panel; color: $text-muted; text-style: italic; }
    Chip.too-big { background: $error 30%; }
    """


class AttachmentChips(HorizontalGroup):
    DEFAULT_CSS = """
    AttachmentChips { height: auto; margin: 0 1; padding: 0 1; display: none; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.pending: list[str] = []          # names still being read/counted

    def refresh_chips(self, attachments: list[Attachment], n_ctx: int) -> None:
        self.remove_children()
        chips = [Chip(f"[{a.chip()}]", classes="too-big" if a.n_tokens >= n_ctx else "", markup=False)
                 for a in attachments]
        chips += [Chip(f"[{name} · counting…]", classes="pending", markup=False) for name in self.pending]
        if chips:
            self.mount_all(chips)
        self.display = bool(chips)
