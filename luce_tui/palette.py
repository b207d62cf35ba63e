"""The command palette (Ctrl+P) offers the same commands as the slash commands.

A command without arguments runs at once; one that takes arguments puts `/name ` into the input
so the arguments can be typed (with completion).

Textual parses a hit's strings as markup, and usages are full of brackets (`[key=value…]`), so
every string goes in as Content: shown as written, never parsed.
"""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content
from textual.fuzzy import Matcher

from luce_tui.commands import COMMANDS


def highlighted(matcher: Matcher, text: str) -> Content:
    """text as plain Content with the query's fuzzy match marked (Matcher.highlight would parse it)."""
    content = Content(text)
    score, offsets = matcher.fuzzy_search.match(matcher.query, text)
    if score:
        for i in offsets:
            if not text[i].isspace():
                content = content.stylize(matcher.match_style, i, i + 1)
    return content


class LuceCommands(Provider):
    async def _run(self, name: str) -> None:
        cmd = COMMANDS[name]
        if cmd.args and not cmd.args.startswith("["):   # required arguments: type them
            self.app.prefill_input(f"/{name} ")
        else:
            await self.app.run_command(f"/{name}")

    async def discover(self) -> Hits:
        for cmd in COMMANDS.values():
            yield DiscoveryHit(Content(cmd.usage), partial(self._run, cmd.name), text=cmd.usage,
                               help=Content(cmd.help))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query.lstrip("/"))
        for cmd in COMMANDS.values():
            score = max(matcher.match(cmd.name), matcher.match(cmd.help) * 0.5)
            if score > 0:
                yield Hit(score, highlighted(matcher, cmd.usage), partial(self._run, cmd.name), text=cmd.usage,
                          help=Content(cmd.help))
