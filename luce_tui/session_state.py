"""Engine state files of saved chats: reopening a chat reads its context instead of prefilling it.

Each chat's engine state lives in <data dir>/states/<session id>.state (luce_engine.state_files),
with a small <id>.json beside it (the prefill speed measured when it was saved, for the "prefill
would take" estimate). After each completed turn a writer thread saves the engine's context there
(an append when only new tokens came), so the UI never waits for the disk. Opening a chat loads
the file when its tokens are a prefix of the chat's: the longest saved prefix (a dense model cuts
the loaded context back to it; a hybrid model's recurrent state cannot be cut back, so it takes the
file only whole); the rest is prefilled as before. A file that does not fit this engine (another
model, KV type or context size; damaged; truncated; a newer format) is reported once and renamed to
<name>.rejected-<time>, kept for inspection and never overwritten; the chat prefills again. The
files together stay under a budget (config key state_budget_gib): the oldest go first.
"""
from __future__ import annotations

import dataclasses
import json
import os
import queue
import re
import threading
import time
from pathlib import Path
from typing import Callable

from luce_engine import EngineStateError, StateFileError, StateIOError
from luce_engine import state_files

HYBRID_ARCHS = ("qwen35",)   # recurrent state: a loaded context can be used only whole
GIB = 1 << 30


@dataclasses.dataclass
class Resumed:
    n_tokens: int                 # context tokens the file gave
    seconds: float                # reading it
    prefill_estimate: float | None  # what prefilling them would have taken (None: no speed known)
    n_captured: int = 0

    def notice(self) -> str:
        e = self.prefill_estimate
        est = f" (prefill would take ~{e:.1f} s)" if e and e >= 1 else f" (prefill would take ~{e:.2f} s)" if e else ""
        return f"resumed {self.n_tokens:,} tokens in {self.seconds:.2f} s{est}"


class SessionStates:
    """The state files of one data directory, for one engine. resume() runs on a worker thread;
    save_soon() is called from the UI thread and returns at once; warnings go to `report` (from
    whichever thread found them, at most once per kind and file)."""

    def __init__(self, data_dir: str | os.PathLike, engine, *, budget_gib: float = 4.0,
                 report: Callable[[str], None] = lambda text: None, busy: Callable[[], bool] = lambda: False,
                 speculator=None, directory: str | os.PathLike | None = None):
        self.dir = Path(data_dir) / "states" if directory is None else Path(directory)
        self.engine, self.speculator = engine, speculator
        self.budget = int(budget_gib * GIB)
        self._report, self._busy = report, busy
        self._reported: set[str] = set()
        self._queue: queue.Queue = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._remove_stale_temporaries()

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def path(self, session_id: int) -> Path:
        return self.dir / f"{session_id}.state"

    def saved_ids(self) -> set[int]:
        """Chats with a state file (they resume without prefilling)."""
        try:
            names = os.listdir(self.dir)
        except OSError:
            return set()
        return {int(m.group(1)) for m in map(re.compile(r"^(\d+)\.state$").match, names) if m}

    # -- resuming (worker thread) ------------------------------------------------------------------
    def resume(self, session_id: int, ids: list[int]) -> Resumed | None:
        """Load chat session_id's state when its tokens start `ids` (the chat's tokens); None when
        there is nothing usable (the caller prefills as usual)."""
        p = self.path(session_id)
        if not self.enabled or not p.is_file():
            return None
        self.flush()   # a save of this process still in flight
        try:
            saved = state_files.read_tokens(p)
            n = state_files.common_prefix(saved, ids)
            if n == 0 or (n < len(saved) and self.engine.model.arch in HYBRID_ARCHS):
                return None
            if self.speculator is not None:
                self.speculator.prepare()   # capture on first, so the draft's rows go back into the ring
            t0 = time.perf_counter()
            io = self.engine.load_state(p)
            seconds = time.perf_counter() - t0
        except StateIOError as e:
            self._warn(f"io:{p}", f"the saved engine state could not be read, so the chat is prefilled: {e}")
            return None
        except StateFileError as e:
            self._reject(p, e)
            return None
        if self.speculator is not None:
            self.speculator.resumed(io["n_captured"])
        if n < io["n_tokens"]:
            self.engine.truncate(n)   # another branch after the prefix: dense models cut back at once
        else:
            # A loaded context has no turn checkpoints: without one here a hybrid model's later cut
            # back past this point (an edit, a retry) would recompute the whole context.
            self.engine.checkpoint()
        rate = self._saved_rate(session_id)
        return Resumed(n, seconds, n / rate if rate else None, io["n_captured"])

    def _reject(self, p: Path, err: Exception) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = p.with_name(f"{p.name}.rejected-{stamp}")
        i = 1
        while target.exists():   # never over an earlier rejected file
            target = p.with_name(f"{p.name}.rejected-{stamp}-{i}")
            i += 1
        try:
            os.rename(p, target)
            where = f"it was kept as {target.name}"
        except OSError as e:
            where = f"it could not be set aside ({e}) and stays where it is"
        self._warn(f"reject:{p}", f"the saved engine state does not fit this engine, so the chat is "
                                  f"prefilled again: {err}; {where}")

    def _saved_rate(self, session_id: int) -> float | None:
        try:
            rate = json.loads(self.path(session_id).with_suffix(".json").read_text()).get("prefill_tok_s")
        except (OSError, ValueError, AttributeError):
            rate = None
        if isinstance(rate, (int, float)) and rate > 0:
            return float(rate)
        s = self.engine.stats()
        return s["n_prefill_tokens"] / (s["prefill_ms"] / 1e3) if s.get("prefill_ms") else None

    # -- saving (writer thread) --------------------------------------------------------------------
    def save_soon(self, session_id: int | None) -> None:
        """Save the engine's context as chat session_id's state, off this thread."""
        if session_id is None or not self.enabled:
            return
        self._idle.clear()
        self._queue.put(session_id)
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._writer, name="luce-state-writer", daemon=True)
            self._thread.start()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued save is done (True) or timeout passes (False)."""
        return self._idle.wait(timeout)

    def _writer(self) -> None:
        while True:
            try:
                sid = self._queue.get(timeout=1.0)
            except queue.Empty:
                return
            while not self._queue.empty():   # only the newest context matters
                sid = self._queue.get_nowait()
            try:
                self._save(sid)
            finally:
                if self._queue.empty():
                    self._idle.set()

    def _save(self, sid: int) -> bool:
        """Save now, on this thread (the writer's; the server's engine thread); False: not saved (reported)."""
        p = self.path(sid)
        for _ in range(200):   # the reply that started meanwhile is between a verify and its commit
            while self._busy():
                time.sleep(0.05)
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                self.engine.save_state(p)
                break
            except EngineStateError:
                time.sleep(0.02)
            except (StateFileError, OSError) as e:
                self._warn(f"save:{type(e).__name__}", f"the engine state of this chat was not saved "
                                                       f"(the chat itself is): {e}")
                return False
        else:
            return False
        s = self.engine.stats()
        if s.get("prefill_ms") and s["n_prefill_tokens"] > 0:   # this process's measured prefill speed
            try:
                p.with_suffix(".json").write_text(json.dumps(
                    {"prefill_tok_s": s["n_prefill_tokens"] / (s["prefill_ms"] / 1e3)}))
            except OSError:
                pass
        self.evict(keep=sid)
        return True

    save_now = _save

    def evict(self, keep: int | None = None) -> list[int]:
        """Remove the oldest state files until they fit the budget (never `keep`); returns their ids."""
        files = []
        for sid in self.saved_ids():
            try:
                st = self.path(sid).stat()
            except OSError:
                continue
            files.append((st.st_mtime, sid, st.st_size))
        total = sum(size for _, _, size in files)
        removed = []
        for _, sid, size in sorted(files):
            if total <= self.budget:
                break
            if sid == keep:
                continue
            for q in (self.path(sid), self.path(sid).with_suffix(".json")):
                try:
                    q.unlink()
                except OSError:
                    pass
            total -= size
            removed.append(sid)
        return removed

    def forget(self, session_id: int) -> None:
        """A deleted chat: its state goes too."""
        self.flush(10)
        for q in (self.path(session_id), self.path(session_id).with_suffix(".json")):
            try:
                q.unlink()
            except OSError:
                pass

    def _warn(self, key: str, text: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            self._report(text)

    def _remove_stale_temporaries(self) -> None:
        """A process killed in a full write leaves <id>.state.tmp-<pid>: never loaded, removed here."""
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for name in names:
            m = re.match(r"^\d+\.state\.tmp-(\d+)$", name)
            if m and not _alive(int(m.group(1))):
                try:
                    os.unlink(self.dir / name)
                except OSError:
                    pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
