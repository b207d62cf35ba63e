"""Generation off the UI thread: a worker thread runs the engine, the UI drains a queue at ~30 Hz.

The worker never touches widgets. The reply's events (luce_tui.events: prefill progress, steps with
their (text, drafted) spans, …), stamped with the worker's clock, go into a queue.SimpleQueue; the
app's timer drains it in one batch per frame, so the UI does one update per frame, never one per
token. Lifecycle events (started, finished, failed) are also Textual messages posted to the app
(post_message is thread-safe); a handler drains the queue first, so it never overtakes the stream. While a job
runs, garbage collection is paced by the frames (quiet_gc), so no collector pause stalls the UI.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Any, Callable

from textual.message import Message
from textual.message_pump import MessagePump

from luce_tui import events, quiet_gc


class JobStarted(Message):
    """The prompt is known and accepted: reused of prompt_tokens are already in the context."""

    def __init__(self, job: "Job", reused: int, prompt_tokens: int):
        super().__init__()
        self.job, self.reused, self.prompt_tokens = job, reused, prompt_tokens


class JobFinished(Message):
    def __init__(self, job: "Job", result: Any):
        super().__init__()
        self.job, self.result = job, result


class JobFailed(Message):
    def __init__(self, job: "Job", error: BaseException):
        super().__init__()
        self.job, self.error = job, error


class Job:
    """One piece of engine work (a reply, or prefilling a resumed chat) on its own thread.

    work(job) runs on the thread and hands its events to job.emit (job.on_progress for a bare
    prefill); whatever it returns arrives in JobFinished, whatever it raises (or an Error event)
    in JobFailed. A cancel belongs to
    this job: `cancel_requested` is its own event, which work hands to the engine work as its stop
    (set before `cancel` reaches the engine, so a request that comes before the work starts is seen).
    """

    def __init__(self, kind: str, work: Callable[["Job"], Any], target: MessagePump, *,
                 cancel: Callable[[], None], clock: Callable[[], float] = time.monotonic):
        self.kind = kind                    # "reply" or "prefill"
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.cancel_requested = threading.Event()
        self.started = False                # set on the UI side by JobStarted
        self.info: dict[str, Any] = {}      # the UI's bookkeeping for this job
        self.error: BaseException | None = None   # the turn's Error event, if any
        self.clock = clock
        self._work, self._target, self._cancel, self._clock = work, target, cancel, clock
        self._thread = threading.Thread(target=self._main, name=f"luce-{kind}", daemon=True)

    def start(self) -> None:
        quiet_gc.job_started()     # collections paced by frames, not 100+ ms pauses mid-stream
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def cancel(self) -> None:
        """From the UI: stop at the next graph boundary (the partial reply is kept)."""
        self.cancel_requested.set()
        self._cancel()

    def _main(self) -> None:
        try:
            result = self._work(self)
        except BaseException as e:   # reported to the UI, never lost in a thread
            self._target.post_message(JobFailed(self, e))
        else:
            self._target.post_message(JobFailed(self, self.error) if self.error is not None
                                      else JobFinished(self, result))
        finally:
            quiet_gc.job_ended()
            self._target.call_later(self._settle_gc)   # call_later only posts a message: thread-safe

    def _settle_gc(self) -> None:
        """On the UI thread after the job: the collector's deferred full pass, at a quiet moment."""
        def check() -> None:
            if quiet_gc.settle():
                timer.stop()

        timer = self._target.set_interval(0.2, check)

    # -- called on the worker thread -----------------------------------------------------------
    def emit(self, ev: events.Event) -> None:
        """The reply's events, in order (Conversation.run_turn's emit)."""
        match ev:
            case events.Error(error=error):
                self.error = error
                return
            case events.Finished():
                return   # the result arrives with JobFinished
        self.events.put(ev)
        if isinstance(ev, events.Started):
            self._target.post_message(JobStarted(self, ev.reused, ev.prompt_tokens))

    def on_progress(self, done: int, total: int) -> None:
        """Prefill progress of work that is not a reply (a resumed chat's history)."""
        self.events.put(events.PrefillProgress(done, total, self._clock()))

    # -- called on the UI thread ---------------------------------------------------------------
    def drain(self) -> list[events.Event]:
        """Called by the UI timer once a frame."""
        # the collection runs as a callback of its own, so that a key press waiting in the
        # event loop is handled between it and this frame's update rather than after both
        asyncio.get_running_loop().call_soon(quiet_gc.frame)
        out = []
        try:
            while True:
                out.append(self.events.get_nowait())
        except queue.Empty:
            return out
