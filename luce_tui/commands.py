"""The slash commands of the app: names, arguments, help, parsing and completion.

One table serves the input's completion, the command palette and /help. The app runs a command
through its `cmd_<name>` method (dashes become underscores).
"""

from __future__ import annotations

import dataclasses
import shlex

from luce_tui import config


@dataclasses.dataclass(frozen=True)
class Command:
    name: str           # without the slash
    args: str           # usage of the arguments ("" when it takes none)
    help: str
    choices: tuple[str, ...] = ()   # completions of the first argument (fixed ones)

    @property
    def usage(self) -> str:
        return f"/{self.name} {self.args}".rstrip()


COMMANDS: dict[str, Command] = {c.name: c for c in [
    Command("help", "", "list the commands and keys"),
    Command("attach", "PATH… [--compress|--full]", "attach text files to the next message"),
    Command("detach", "[NAME]", "drop the pending attachments (or one of them)"),
    Command("compress", "[auto|on|off] [NAME…]", "PFlash per attachment before sending: auto, on (compress) "
            "or off (full); no args shows it", ("auto", "on", "off")),
    Command("new", "", "start a new chat (the current one stays saved)"),
    Command("sessions", "", "saved chats: open, search, rename, delete"),
    Command("save", "[NAME]", "save the chat now, optionally under a name"),
    Command("export", "md|json [PATH]", "write the chat as Markdown or JSON", ("md", "json")),
    Command("retry", "", "generate the last reply again (a new branch)"),
    Command("edit", "", "put your last message back into the input; sending makes a branch"),
    Command("system", "[TEXT]", "set the system prompt; no TEXT shows it"),
    Command("sampling", "[key=value…]", "change sampling; no args shows it",
            tuple(f"{k}=" for k in config.SAMPLING_KEYS)),
    Command("model", "", "model, draft, device, KV types and memory plan"),
    Command("theme", "[NAME]", "switch the colour theme; no NAME lists them"),
    Command("highlight", "", "toggle the view that colours tokens from accepted drafts"),
    Command("stats", "", "speed of the last reply and the context in use"),
    Command("quit", "", "leave luce-chat"),
]}
ALIASES = {"exit": "quit", "q": "quit", "reset": "new", "clear": "new", "open": "sessions"}


class CommandError(ValueError):
    """A line that is not a valid command (the message says why)."""


def parse(line: str) -> tuple[Command, str]:
    """'/attach a.txt b.txt' -> (the attach Command, 'a.txt b.txt')."""
    head, _, rest = line.strip()[1:].partition(" ")
    name = ALIASES.get(head.lower(), head.lower())
    if name not in COMMANDS:
        raise CommandError(f"unknown command /{head} (/help lists them)")
    return COMMANDS[name], rest.strip()


def split_args(rest: str) -> list[str]:
    """Shell-like words, so a path with spaces can be quoted."""
    try:
        return shlex.split(rest)
    except ValueError as e:
        raise CommandError(f"cannot parse the arguments: {e}") from None


def complete(text: str, *, themes: list[str] = ()) -> list[tuple[str, str]]:
    """Completions of the input text: (full replacement text, description), best first."""
    if not text.startswith("/") or "\n" in text:
        return []
    if " " not in text:
        word = text[1:].lower()
        # the menu shows the name itself; the description is the rest of the usage and the help
        return [(f"/{c.name} " if c.args else f"/{c.name}", f"{c.args} — {c.help}" if c.args else c.help)
                for c in COMMANDS.values() if c.name.startswith(word)]
    head, _, rest = text.partition(" ")
    name = ALIASES.get(head[1:].lower(), head[1:].lower())
    cmd = COMMANDS.get(name)
    if cmd is None:
        return []
    choices = list(themes) if name == "theme" else list(cmd.choices)
    before, _, word = rest.rpartition(" ")
    if name not in ("sampling",) and before:
        return []   # only the first argument of the others is completed
    prefix = f"{head} {before} " if before else f"{head} "
    return [(prefix + c, cmd.usage) for c in choices if c.startswith(word) and c != word]


def help_text() -> str:
    width = max(len(c.usage) for c in COMMANDS.values())
    lines = [f"{c.usage:<{width}}  {c.help}" for c in COMMANDS.values()]
    lines += ["", "keys: Enter send · Shift+Enter/Ctrl+J newline · Up history · Tab complete · "
                  "Ctrl+O $EDITOR · Esc or Ctrl+C cancel · Ctrl+P palette · F2 highlight · F3 sessions · "
                  "Ctrl+N new chat · Ctrl+Q quit",
              "click an attachment chip: its PFlash choice, auto → compress → full (with --pflash-scorer)"]
    return "\n".join(lines)
