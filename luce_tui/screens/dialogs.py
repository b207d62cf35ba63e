"""Small modal questions: yes/no with named buttons, and one line of text."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

DIALOG_CSS = """
{cls} {{ align: center middle; }}
{cls} > Vertical {{ width: 64; height: auto; padding: 1 2; background: $surface; border: thick $primary; }}
{cls} Horizontal {{ height: auto; align-horizontal: right; margin-top: 1; }}
{cls} Button {{ margin-left: 1; }}
"""


class ConfirmScreen(ModalScreen[bool]):
    """Returns True for the first button, False for the second or Esc."""

    DEFAULT_CSS = DIALOG_CSS.format(cls="ConfirmScreen")
    BINDINGS = [Binding("escape", "dismiss(False)", "cancel")]

    def __init__(self, question: str, yes: str = "Yes", no: str = "Cancel"):
        super().__init__()
        self.question, self.yes, self.no = question, yes, no

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question)
            with Horizontal():
                yield Button(self.yes, variant="primary", id="yes")
                yield Button(self.no, id="no")

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class AskScreen(ModalScreen[str | None]):
    """One line of text; None when cancelled."""

    DEFAULT_CSS = DIALOG_CSS.format(cls="AskScreen")
    BINDINGS = [Binding("escape", "dismiss(None)", "cancel")]

    def __init__(self, question: str, value: str = ""):
        super().__init__()
        self.question, self.value = question, value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question)
            yield Input(self.value, id="answer")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)
