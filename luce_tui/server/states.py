"""The server's prefix reuse across restarts: engine state files in the state directory.

After a completed request the engine thread saves the engine's context (prompt + reply) to a
file of the state directory (default <data dir>/server-states, `--state-dir`): the file whose
tokens the context extends gets the new rows appended, else a new file is written (another
conversation, or a branch of one). A request whose prompt shares more tokens with a file than
with the live context loads that file first (a dense model cuts it back to the shared prefix; a
hybrid model's recurrent state cannot be cut back, so it takes a file only whole) and prefills
only the rest. The file mechanics (atomic writes, appends, the disk budget that removes the
oldest files, stale temporaries of killed writers) are the sessions' (session_state.py).

A file that this engine cannot use (another model, KV type or context size; damaged; truncated;
a newer format) is reported once in the log and ignored: never loaded, never written over,
never evicted: it stays for inspection (or for the server of the model it belongs to).
"""
from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Callable

from luce_engine import StateFileError, state_files

from luce_tui.session_state import HYBRID_ARCHS, SessionStates

_NAME = re.compile(r"^(\d+)\.state$")


@dataclasses.dataclass
class Restored:
    n_tokens: int    # context tokens the file gave (after a cut back to the prompt's prefix)
    ms: float        # reading it
    file: str        # its name in the state directory


class ServerStates(SessionStates):
    """State files of one server process: restore() before a request's prefill, save() after it;
    both on the engine thread. `report` gets one line per problem and file."""

    def __init__(self, directory: str | os.PathLike, engine, *, budget_gib: float,
                 report: Callable[[str], None], speculator=None):
        super().__init__(directory, engine, budget_gib=budget_gib, report=report, speculator=speculator,
                         directory=directory)
        self.tokens: dict[int, list[int]] = {}   # usable files -> their token ids
        self.ignored: set[int] = set()           # files reported as unusable: never touched again
        self._index()

    # -- what SessionStates' budget and errors act on ------------------------------------------
    def saved_ids(self) -> set[int]:
        """Only the usable files count against the budget and are evicted."""
        return set(self.tokens)

    def evict(self, keep: int | None = None) -> list[int]:
        removed = super().evict(keep)
        for sid in removed:
            self.tokens.pop(sid, None)
        return removed

    def _reject(self, p: Path, err: Exception) -> None:
        self._ignore(int(p.stem), f"does not fit this engine ({err})")

    def _ignore(self, sid: int, why: str) -> None:
        self.tokens.pop(sid, None)
        self.ignored.add(sid)
        self._warn(f"ignore:{sid}", f"state file {self.path(sid)} {why}: ignored and kept as it is")

    # -- the index of the directory -------------------------------------------------------------
    def _index(self) -> None:
        try:
            names = sorted(os.listdir(self.dir))
        except OSError:
            return
        eng = self.engine
        try:
            model_size = os.path.getsize(eng.model.path)
        except OSError:
            model_size = None
        for name in names:
            m = _NAME.match(name)
            if not m:
                continue
            sid = int(m.group(1))
            try:
                info = state_files.read_info(self.path(sid))
                tokens = state_files.read_tokens(self.path(sid))
            except StateFileError as e:
                self._ignore(sid, f"cannot be read ({e})")
                continue
            # what the header tells without loading; the model's hash is checked by the load
            theirs = (info.arch, info.model_file_size, info.n_ctx, info.cache_type_k, info.cache_type_v)
            ours = (eng.model.arch, model_size, eng.n_ctx, eng.cache_type_k, eng.cache_type_v)
            if theirs != ours:
                self._ignore(sid, "was saved by another model or context (arch, model size, context, KV types: "
                                  f"{theirs}, this server: {ours})")
                continue
            self.tokens[sid] = tokens

    # -- restoring and saving (engine thread) ---------------------------------------------------
    def restore(self, prompt: list[int], live: int) -> Restored | None:
        """Load the file that shares the longest prefix with `prompt` when that beats `live` (the
        tokens the engine's context shares with it); None: the engine was left as it was."""
        if not self.enabled:
            return None
        hybrid = self.engine.model.arch in HYBRID_ARCHS
        best, best_n = None, live
        for sid, tokens in self.tokens.items():
            n = state_files.common_prefix(tokens, prompt)
            # hybrid: the whole file, and short of the whole prompt (the turn keeps one prompt token
            # to evaluate, and cutting back below the loaded end would recompute everything)
            if n > best_n and (not hybrid or n == len(tokens) < len(prompt)):
                best, best_n = sid, n
        if best is None:
            return None
        t0 = time.perf_counter()
        resumed = self.resume(best, prompt)
        if resumed is None:   # reported (by resume or _reject): not tried again
            self.tokens.pop(best, None)
            self.ignored.add(best)
            return None
        try:
            os.utime(self.path(best))   # recently used: the last the budget removes
        except OSError:
            pass
        return Restored(resumed.n_tokens, (time.perf_counter() - t0) * 1e3, self.path(best).name)

    def save(self) -> int | None:
        """Save the engine's context: appended to the file it extends, else a new file (nothing when
        a file already holds all of it). Returns the file's id, None when nothing was written."""
        if not self.enabled:
            return None
        ctx = self.engine.tokens
        if not ctx:
            return None
        target, target_n = None, 0
        for sid, tokens in self.tokens.items():
            if len(tokens) >= len(ctx) and tokens[:len(ctx)] == ctx:
                return None   # already saved (the same request again)
            if target_n < len(tokens) <= len(ctx) and ctx[:len(tokens)] == tokens:
                target, target_n = sid, len(tokens)
        if target is None:
            target = 1 + max(self.tokens.keys() | self.ignored | self._ids_on_disk(), default=0)
        before = self.tokens.get(target)
        self.tokens[target] = list(ctx)   # first: the budget counts it (and keeps it)
        if not self.save_now(target):
            if before is None:
                del self.tokens[target]
            else:
                self.tokens[target] = before
            return None
        return target

    def _ids_on_disk(self) -> set[int]:
        """Every state file's id, also ones set aside (a new file never takes an existing name)."""
        try:
            names = os.listdir(self.dir)
        except OSError:
            return set()
        return {int(m.group(1)) for m in map(re.compile(r"^(\d+)\.state").match, names) if m}
