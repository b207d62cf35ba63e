"""Engine state files: a context saved to disk and read back (Engine.save_state / load_state).

A file holds the attention K/V rows in use (any cache type, as stored), the recurrent state of
hybrid models, the token ids, the logits after the last token and the capture rows a DFlash draft
is fed from; its header names the model (GGUF size and a checksum of its metadata and tensor
table), the cache types and the context size, and every part has a checksum
(engine/native/src/runtime/state_file.h has the layout). These helpers read a file without an
engine: what it holds, its tokens, and whether an engine could load it.
"""
from __future__ import annotations

import dataclasses
import os

from luce_engine import _core


@dataclasses.dataclass(frozen=True)
class StateFileInfo:
    format_version: int
    n_tokens: int
    n_ctx: int
    cache_type_k: str
    cache_type_v: str
    kv_rotation: bool
    arch: str
    model_file_size: int
    model_hash: int
    file_bytes: int       # the file's size
    live_bytes: int       # of which the current state (the rest: parts later appends replaced)
    n_capture_rows: int   # draft feature rows kept (0: no capture)


def read_info(path: str | os.PathLike) -> StateFileInfo:
    """The header of a state file. Raises StateDamagedError / StateNewerFormatError / StateIOError."""
    return StateFileInfo(**_core.state_file_info(os.fspath(path)))


def read_tokens(path: str | os.PathLike) -> list[int]:
    """The token ids of the saved context."""
    return _core.state_file_tokens(os.fspath(path))


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
