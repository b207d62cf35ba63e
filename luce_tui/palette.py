"""The command palette (Ctrl+P) offers the same commands as the slash commands.

A command without arguments runs at once; one that takes arguments puts `/name ` into the input
so the arguments can be typed (with completion).
"""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from luce_tui.commands import COMMANDS


class LuceCommands(Provider):
    async def _run(self, name: str) -> None:
        cmd = COMMANDS[name]
        if cmd.args and not cmd.args.startswith("["):   # required arguments: type them
            self.app.prefill_input(f"/{name} ")
        else:
            await self.app.run_command(f"/{name}")

    async def discover(self) -> Hits:
        for cmd in COMMANDS.values():
            yield DiscoveryHit(cmd.usage, partial(self._run, cmd.name), help=cmd.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query.lstrip("/"))
        for cmd in COMMANDS.values():
            score = max(matcher.match(cmd.name), matcher.match(cmd.help) * 0.5)
            if score > 0:
                yield Hit(score, matcher.highlight(cmd.usage), partial(self._run, cmd.name), help=cmd.help)
