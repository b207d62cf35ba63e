"""The message input: a TextArea that grows with its text.

Enter sends; Shift+Enter (where the terminal reports it) and Ctrl+J insert a newline; Up on the
first line walks back through earlier prompts, Down on the last line forward again; while the
completion menu is open, Up/Down move in it, Tab or Enter take the highlighted entry and Esc
closes it. A paste longer than `paste_threshold` characters is offered as an attachment.
"""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.widgets import OptionList, TextArea
from textual.widgets.option_list import Option

from luce_tui import commands, quiet_gc


class CompletionMenu(OptionList):
    DEFAULT_CSS = """
    CompletionMenu { height: auto; max-height: 8; margin: 0 1; border: none; background: $panel; display: none; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.can_focus = False
        self.values: list[str] = []

    def show(self, items: list[tuple[str, str]]) -> None:
        self.values = [v for v, _ in items]
        self.clear_options()
        self.add_options([Option(Content.assemble((f"{v.strip():<14} ", "bold"), d)) for v, d in items])
        self.display = bool(items)
        if items:
            self.highlighted = 0

    def hide(self) -> None:
        self.values = []
        self.clear_options()
        self.display = False

    @property
    def value(self) -> str | None:
        if not self.display or self.highlighted is None or not self.values:
            return None
        return self.values[self.highlighted]


class PromptInput(TextArea):
    DEFAULT_CSS = """
    PromptInput { height: auto; min-height: 3; max-height: 12; margin: 0 1; border: tall $primary 40%; }
    PromptInput:focus { border: tall $primary; }
    """
    BINDINGS = [
        Binding("ctrl+j,shift+enter", "newline", "newline", show=False),
    ]

    class Submitted(Message):
        def __init__(self, text: str):
            super().__init__()
            self.text = text

    class LargePaste(Message):
        def __init__(self, text: str):
            super().__init__()
            self.text = text

    def __init__(self, *, history: list[str] | None = None, paste_threshold: int = 2000,
                 themes: callable = lambda: [], **kwargs):
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)
        self.prompt_history: list[str] = list(history or [])   # oldest first
        self._hist_pos: int | None = None                 # index into history while walking it
        self._draft = ""                                  # what was typed before walking history
        self.paste_threshold = paste_threshold
        self.menu: CompletionMenu | None = None
        self._menu_text = ""                              # the text the menu's entries are for
        self._theme_names = themes

    # -- actions -----------------------------------------------------------------------------
    def action_newline(self) -> None:
        self.insert("\n")

    def submit(self) -> None:
        text = self.text
        if not text.strip():
            return
        if not self.prompt_history or self.prompt_history[-1] != text:
            self.prompt_history.append(text)
        self._hist_pos = None
        self.post_message(self.Submitted(text))

    def set_text(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    # -- history -----------------------------------------------------------------------------
    def _walk(self, delta: int) -> bool:
        if not self.prompt_history:
            return False
        if self._hist_pos is None:
            if delta > 0:
                return False
            self._draft, self._hist_pos = self.text, len(self.prompt_history)
        pos = self._hist_pos + delta
        if pos < 0:
            return True            # at the oldest: stay
        if pos >= len(self.prompt_history):
            self._hist_pos = None
            self.set_text(self._draft)
            return True
        self._hist_pos = pos
        self.set_text(self.prompt_history[pos])
        return True

    # -- completion ----------------------------------------------------------------------------
    def _update_menu(self) -> None:
        if self.menu is None:
            return
        self._menu_text = self.text
        items = commands.complete(self.text, themes=self._theme_names())
        exact = len(items) == 1 and items[0][0].strip() == self.text.strip()
        if items and not exact:
            self.menu.show(items)
        else:
            self.menu.hide()

    def _accept_completion(self) -> bool:
        value = self.menu.value if self.menu else None
        if value is None:
            return False
        self.set_text(value)
        self.menu.hide()
        return True

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        self._update_menu()

    # -- keys and paste ----------------------------------------------------------------------------
    async def _on_key(self, event: events.Key) -> None:
        quiet_gc.key_pressed()   # the collector's full pass waits until typing stops
        key = event.key
        # Keys can arrive faster than the Changed messages that refresh the menu (a paste, a fast
        # typist, tmux): never let Enter or Tab take an entry computed for an older text.
        if self.menu is not None and self._menu_text != self.text:
            self._update_menu()
        menu_open = self.menu is not None and self.menu.display
        handled = True
        if menu_open and key in ("up", "down"):
            (self.menu.action_cursor_up if key == "up" else self.menu.action_cursor_down)()
        elif menu_open and key == "tab":
            self._accept_completion()
        elif menu_open and key == "escape":
            self.menu.hide()
        elif key == "enter":
            if menu_open and self._accept_completion() and self.text.endswith(" "):
                pass   # the command takes arguments: let the user type them
            else:
                self.submit()
        elif key == "up" and self.cursor_location[0] == 0 and self.selection.is_empty:
            handled = self._walk(-1)
        elif key == "down" and self.cursor_location[0] == self.document.line_count - 1 and self._hist_pos is not None:
            handled = self._walk(+1)
        else:
            handled = False
        if handled:   # else TextArea's own _on_key runs next (Textual calls it along the MRO)
            event.stop()
            event.prevent_default()

    async def _on_paste(self, event: events.Paste) -> None:
        if len(event.text) > self.paste_threshold:
            event.stop()
            event.prevent_default()
            self.post_message(self.LargePaste(event.text))
