"""A real terminal for end-to-end tests of the Textual app: tmux on a server socket of our own."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import time
import uuid

TMUX = shutil.which("tmux")


class Terminal:
    """One tmux server of our own (-L), so the user's sessions are never touched."""

    def __init__(self, env: dict, cols: int = 110, rows: int = 36):
        self.sock, self.name, self.env = f"luce-test-{uuid.uuid4().hex[:8]}", "chat", env
        self.cols, self.rows = cols, rows

    def tmux(self, *args, check=True) -> subprocess.CompletedProcess:
        return subprocess.run([TMUX, "-L", self.sock, *args], capture_output=True, text=True, check=check)

    def start(self, argv: list[str]) -> None:
        cmd = " ".join(shlex.quote(a) for a in argv)
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        self.tmux("new-session", "-d", "-s", self.name, "-x", str(self.cols), "-y", str(self.rows),
                  f"env {exports} {cmd}; sleep 30")   # sleep: keep the pane to read an exit message

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name).stdout

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", "-t", self.name, *(["-l"] if literal else []), *keys)

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} did not appear; the screen shows:\n{self.screen()}")

    def wait_gone(self, text: str, timeout: float = 60.0) -> str:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            screen = self.screen()
            if text not in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} did not go away; the screen shows:\n{self.screen()}")

    def wait_exit(self, timeout: float = 30.0) -> str:
        """Until the app has left the alternate screen (the shell's `sleep` keeps the pane)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.tmux("display-message", "-p", "-t", self.name, "#{alternate_on}").stdout.strip() == "0":
                return self.screen()
            time.sleep(0.2)
        raise AssertionError(f"luce-chat did not quit; the screen shows:\n{self.screen()}")

    def kill(self) -> None:
        self.tmux("kill-server", check=False)
