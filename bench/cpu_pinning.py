"""CPU placement for bench_server.py (Linux): the engine's threads on their own cores, the server's
event loop and the client on others, so that a measurement of the server's cost is not a
measurement of who got the core; and the CPU time each thread of a process has used."""
from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class Layout:
    engine: set[int]   # the engine thread(s): in-process, and the server's engine thread
    loop: set[int]     # the server's event loop (its main thread)
    client: set[int]   # the benchmark's client (this process's main thread while it reads a stream)

    def describe(self) -> str:
        return f"engine on {sorted(self.engine)}, server loop on {sorted(self.loop)}, client on {sorted(self.client)}"


def layout(threads: int) -> Layout:
    """Engine on the first `threads` allowed cores, then the loop, then the client (with the loop
    when only one core is left). ValueError when fewer than threads + 1 cores are allowed."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < threads + 1:
        raise ValueError(f"--pin needs {threads + 1} cores (engine threads + 1), this process may use {len(cpus)}")
    engine, rest = set(cpus[:threads]), cpus[threads:]
    return Layout(engine, {rest[0]}, {rest[1]} if len(rest) > 1 else {rest[0]})


def tids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def pin_server(pid: int, lay: Layout) -> None:
    """The server's main thread (uvicorn's event loop) on the loop cores, every other thread (the
    engine thread, ggml's workers) on the engine cores."""
    for tid in tids(pid):
        try:
            os.sched_setaffinity(tid, lay.loop if tid == pid else lay.engine)
        except OSError:   # a thread that just ended
            pass


def pin_self(cpus: set[int]) -> None:
    """Every thread of this process (the main thread runs the in-process engine or the client)."""
    for tid in tids(os.getpid()):
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass


def cpu_ns(pid: int) -> dict[int, int]:
    """Nanoseconds on a CPU so far, per thread of `pid` (/proc/…/schedstat)."""
    out = {}
    for tid in tids(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out
