"""The server's one engine thread: requests run one at a time, first in first out, from a bounded queue.

A request is a Job: its turn runs on the engine thread (Conversation.run_turn) and its events
cross to the event loop through the job's deque; the loop is woken (call_soon_threadsafe) only
when it is not already due to wake, so events that pile up while it is busy are taken together,
at one hop for the lot instead of one per token. With a stream interval, a step that comes sooner
than that after the last step that woke the loop does not wake it: it waits for the next event
(the next step or the end), so a fast stream costs the loop and the client one wake and one
chunk per interval instead of one per token; the first step always wakes at once (TTFT is not
delayed), and no step waits longer than the next one takes. cancel() stops a
running job at the engine's next graph boundary, or drops a waiting one. Whatever a job raises
ends as an Error event; the thread and the conversation carry on with the next request.
A job's `after` (the engine state's save) runs on the engine thread once its response has been
sent (job.sent, or SENT_WAIT_S at most), before the next request starts.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Callable

from luce_engine import GenerationCancelled

from luce_tui import events

DONE = object()   # the last item of a job's queue
SENT_WAIT_S = 2.0  # how long `after` waits for the response to go out (a client that reads slowly)


class QueueFull(Exception):
    def __init__(self, waiting: int):
        super().__init__(f"{waiting} requests are already waiting")
        self.waiting = waiting


class Job:
    """One request: run(job) is called on the engine thread and hands its events to job.emit."""

    def __init__(self, run: Callable[["Job"], object], loop: asyncio.AbstractEventLoop, *,
                 stream_interval: float = 0.0):
        self.run, self.loop = run, loop
        self.stream_interval = stream_interval   # seconds (0: every step wakes the loop)
        self._step_woke = float("-inf")          # when a step last woke it (engine thread only)
        self.stop = threading.Event()
        self.info: dict = {}   # what run() learned for the response (set before its first event)
        self.after: Callable[[], object] | None = None   # set by run(): engine work once the response is out
        self.sent = threading.Event()                    # set by the response side when it is out
        self._events: collections.deque = collections.deque()
        self._wake_due = False   # a _wake is scheduled on the loop (set by emit, cleared by _wake)
        self._waiter: asyncio.Future | None = None

    def emit(self, ev) -> None:
        """From the engine thread (or the loop): queue an event for the response."""
        self._events.append(ev)
        if self._wake_due:   # one producer sets it, the loop clears it: at worst one wake too many
            return
        if self.stream_interval and type(ev) is events.Step:
            now = time.monotonic()
            if now - self._step_woke < self.stream_interval:
                return   # goes with the next event
            self._step_woke = now
        self._wake_due = True
        self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._wake_due = False   # before the consumer drains: an event emitted from here on wakes again
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def interrupt(self) -> None:
        """Wake a wait() now (on the loop): the client left."""
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def take(self) -> list:
        """Every event that has arrived (on the loop), oldest first; [] when none."""
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    async def wait(self, timeout: float | None = None) -> bool:
        """Until an event has arrived (True) or `timeout` seconds passed without one (False)."""
        if self._events:
            return True
        fut = self._waiter = self.loop.create_future()
        timer = self.loop.call_later(timeout, _resolve, fut) if timeout is not None else None
        try:
            await fut
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        return bool(self._events)


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class EngineWorker:
    def __init__(self, conversation, *, max_queue: int = 8):
        self.conv, self.max_queue = conversation, max_queue
        self._waiting: collections.deque[Job] = collections.deque()
        self._cv = threading.Condition()
        self.current: Job | None = None
        self.served = 0
        self._idle = threading.Event()   # no job and no `after` running
        self._idle.set()
        self._thread = threading.Thread(target=self._loop, name="luce-serve-engine", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def submit(self, job: Job) -> None:
        """Queue the job; QueueFull when max_queue requests already wait behind the running one."""
        with self._cv:
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(len(self._waiting))
            self._waiting.append(job)
            self._cv.notify()

    def cancel(self, job: Job) -> None:
        """From the event loop (a client that left): stop or drop the job."""
        with self._cv:
            job.stop.set()
            if self.current is job:
                self.conv.cancel()
            elif job in self._waiting:
                self._waiting.remove(job)
                job.emit(events.Error(GenerationCancelled("cancelled before it started")))
                job.emit(DONE)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._waiting:
                    self._cv.wait()
                job = self.current = self._waiting.popleft()
                self._idle.clear()
            try:
                job.run(job)
            except BaseException as e:   # never lost, never the end of the thread
                try:
                    job.emit(events.Error(e))
                except RuntimeError:     # the event loop is gone (server shutting down)
                    pass
            finally:
                with self._cv:
                    self.current = None
                    self.served += 1
                try:
                    job.emit(DONE)
                except RuntimeError:
                    pass
            if job.after is not None:
                job.sent.wait(SENT_WAIT_S)
                try:
                    job.after()   # it reports its own failures
                except BaseException:   # and never ends the thread
                    pass
            with self._cv:
                if not self._waiting:
                    self._idle.set()

    def wait_idle(self, timeout: float) -> bool:
        """Until no request runs and no save is under way (True), or `timeout` seconds (False)."""
        return self._idle.wait(timeout)
