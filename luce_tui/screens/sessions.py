"""/sessions: the saved chats — list, search (titles and message text), open, rename, delete.

Dismissed with {"open": session id or None, "deleted": [ids], "renamed": [ids]}.
"""

from __future__ import annotations

import time

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from luce_tui.screens.dialogs import AskScreen, ConfirmScreen

_MARK = ("\x01", "\x02")


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _marked(snippet: str) -> Content:
    """A search snippet with the store's match marks turned into highlighting."""
    parts, rest = [], snippet
    while _MARK[0] in rest:
        before, _, rest = rest.partition(_MARK[0])
        hit, _, rest = rest.partition(_MARK[1])
        parts += [before, (hit, "bold $accent")]
    parts.append(rest)
    return Content.assemble(*parts)


class SessionsScreen(ModalScreen[dict]):
    DEFAULT_CSS = """
    SessionsScreen { align: center middle; }
    SessionsScreen > Vertical { width: 90%; height: 80%; background: $surface; border: thick $primary; padding: 0 1; }
    SessionsScreen #title { text-style: bold; padding: 1 0 0 0; }
    SessionsScreen OptionList { height: 1fr; border: none; margin: 1 0 0 0; }
    SessionsScreen #keys { color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape", "close", "close"),
        Binding("down", "move(1)", show=False, priority=True),
        Binding("up", "move(-1)", show=False, priority=True),
        Binding("ctrl+r,f2", "rename", "rename", priority=True),
        Binding("ctrl+d,delete", "delete", "delete", priority=True),
    ]

    def __init__(self, store, current_id: int | None = None, *, instant: set[int] | frozenset = frozenset()):
        super().__init__()
        self.store, self.current_id = store, current_id
        self.instant = instant   # chats with a saved engine state: they open without prefilling
        self.ids: list[int] = []
        self.result = {"open": None, "deleted": [], "renamed": []}

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Saved chats", id="title")
            yield Input(placeholder="search titles and messages…", id="search")
            yield OptionList(id="list")
            yield Label("Enter open · Ctrl+R rename · Ctrl+D delete · Esc close", id="keys")

    def on_mount(self) -> None:
        self.query_one("#list", OptionList).can_focus = False
        self.query_one("#search", Input).focus()
        self.reload()

    # -- listing -----------------------------------------------------------------------------
    def reload(self) -> None:
        keep = self.selected if self.ids else None
        query = self.query_one("#search", Input).value.strip()
        rows: list[tuple[int, Content]] = []
        if not query:
            for s in self.store.list_sessions(limit=200):
                rows.append((s.id, self._session_row(s.id, s.title, s.n_messages, s.updated)))
        else:
            seen: set[int] = set()
            for s in self.store.list_sessions(query=query, limit=100):
                seen.add(s.id)
                rows.append((s.id, self._session_row(s.id, s.title, s.n_messages, s.updated)))
            for hit in self.store.search(query, limit=100, mark=_MARK):
                if hit.session_id in seen:
                    continue
                seen.add(hit.session_id)
                rows.append((hit.session_id, Content.assemble(
                    (hit.session_title or "(untitled)", "bold"), "  ", _marked(hit.snippet))))
        self.ids = [sid for sid, _ in rows]
        lst = self.query_one("#list", OptionList)
        lst.clear_options()
        if rows:
            lst.add_options([Option(label) for _, label in rows])
            lst.highlighted = self.ids.index(keep) if keep in self.ids else 0
        else:
            lst.add_option(Option(Content("no saved chats" if not query else f"nothing matches {query!r}"),
                                  disabled=True))

    def _session_row(self, sid: int, title: str | None, n: int, updated: float) -> Content:
        mark = "● " if sid == self.current_id else "  "
        fast = " · resumes instantly" if sid in self.instant else ""
        return Content.assemble(mark, (title or "(untitled)", "bold"),
                                (f"  {n} messages · {_when(updated)}{fast}", "dim"))

    @property
    def selected(self) -> int | None:
        h = self.query_one("#list", OptionList).highlighted
        return self.ids[h] if h is not None and h < len(self.ids) else None

    # -- events and actions ----------------------------------------------------------------------
    @on(Input.Changed, "#search")
    def _search(self) -> None:
        self.reload()

    @on(Input.Submitted, "#search")
    def _open_selected(self) -> None:
        if self.selected is not None:
            self.result["open"] = self.selected
            self.dismiss(self.result)

    @on(OptionList.OptionSelected)
    def _clicked(self, event: OptionList.OptionSelected) -> None:
        self.query_one("#list", OptionList).highlighted = event.option_index
        self._open_selected()

    def action_move(self, delta: int) -> None:
        lst = self.query_one("#list", OptionList)
        (lst.action_cursor_down if delta > 0 else lst.action_cursor_up)()

    def action_close(self) -> None:
        self.dismiss(self.result)

    @work
    async def action_rename(self) -> None:
        sid = self.selected
        if sid is None:
            return
        title = self.store.get_session(sid).title or ""
        new = await self.app.push_screen_wait(AskScreen("New name of the chat:", title))
        if new is not None:
            self.store.rename_session(sid, new.strip() or None)
            self.result["renamed"].append(sid)
            self.reload()

    @work
    async def action_delete(self) -> None:
        sid = self.selected
        if sid is None:
            return
        title = self.store.get_session(sid).title or "(untitled)"
        if await self.app.push_screen_wait(ConfirmScreen(f"Delete the chat “{title}” and its messages?",
                                                         yes="Delete", no="Keep")):
            self.store.delete_session(sid)
            self.result["deleted"].append(sid)
            self.reload()
