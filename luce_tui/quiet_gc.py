"""Garbage collection paced by UI frames while a job runs, so the collector never freezes the UI.

Textual's rendering leaves many short-lived reference cycles (a Strip caches itself), and with
automatic collection the objects that live a frame or two (rendered lines in caches) reach the
oldest generation. Full collections then walk the whole heap: 50-250 ms on a 2-core machine with
the app, the tokenizer and a long reply in memory, during which no key press is handled.

So while a job runs, automatic collection is off and the UI timer calls frame() instead: the
young generation every frame (a few ms), the middle one every YOUNG_EVERY frames, so what a frame
or two keeps alive dies young; a full collection runs only every FULL_EVERY frames (bounding
memory on long jobs). After the job, settle() runs the full collection once the user has not
typed for IDLE_BEFORE_FULL seconds, then hands collection back to Python (an app that closes
before that leaves it paced: the next job's frames and settle() carry on). The first job also
freezes what exists by then (model, tokenizer, Textual itself: they live as long as the
process), so full collections skip it.
"""

from __future__ import annotations

import gc
import threading
import time

YOUNG_EVERY = 10          # frames between collections of generation 1
FULL_EVERY = 30 * 60      # frames between full collections during a job (a minute at 30 Hz)
IDLE_BEFORE_FULL = 0.5    # seconds without a key press before the full collection after a job
SETTLE_LIMIT = 30.0       # seconds after a job when the full collection runs regardless

_lock = threading.Lock()
_jobs = 0
_frames = 0
_frozen = False
_paced = False            # automatic collection is off because of us
_ended_at = 0.0
_last_key = 0.0


def job_started() -> None:
    global _jobs, _frames, _frozen, _paced
    with _lock:
        if not _frozen:
            gc.collect()      # once, so that no garbage of the start-up is frozen with it
            gc.freeze()
            _frozen = True
        if _jobs == 0 and gc.isenabled():
            gc.disable()
            _paced, _frames = True, 0
        _jobs += 1


def frame() -> None:
    """Once per UI frame while a job runs (on the UI thread, between frames)."""
    global _frames
    if not _paced:
        return
    _frames += 1
    if _frames % FULL_EVERY == 0:
        gc.collect(2)
    elif _frames % YOUNG_EVERY == 0:
        gc.collect(1)
    else:
        gc.collect(0)


def job_ended() -> None:
    global _jobs, _ended_at
    with _lock:
        _jobs = max(_jobs - 1, 0)
        _ended_at = time.monotonic()


def key_pressed() -> None:
    global _last_key
    _last_key = time.monotonic()


def settle() -> bool:
    """After a job, every few hundred ms on the UI thread: True once nothing is left to do."""
    global _paced
    if _jobs or not _paced:
        return True
    now = time.monotonic()
    if now - _last_key < IDLE_BEFORE_FULL and now - _ended_at < SETTLE_LIMIT:
        gc.collect(0)       # the user is typing: keep up with the young generation only
        return False
    gc.collect()
    gc.enable()
    _paced = False
    return True
