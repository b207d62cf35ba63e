"""Exceptions raised by luce_engine. Every native status code maps to one class here."""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine reports."""


class ModelFileError(EngineError, OSError):
    """The model file is missing or unreadable."""


class ModelFormatError(EngineError, ValueError):
    """Not a GGUF file, or a malformed/truncated one."""


class ModelValidationError(EngineError, ValueError):
    """A required key or tensor is missing, or a tensor has the wrong shape."""


class UnsupportedModelError(EngineError, ValueError):
    """A valid GGUF that this engine cannot run (architecture, tensor type, feature)."""


class DeviceError(EngineError):
    """The requested device does not exist or its backend failed."""


class InsufficientMemoryError(EngineError):
    """The memory plan does not fit the device; the message says what to change."""


class ContextFullError(EngineError):
    """The tokens do not fit in the remaining context window."""


class GenerationCancelled(EngineError):
    """engine.cancel() interrupted the call; the engine stays usable."""


class EngineStateError(EngineError):
    """The call is not valid in the engine's current state (e.g. stepping before a prefill)."""


class ComputeError(EngineError):
    """The backend failed while computing, or produced non-finite logits."""


class InvalidArgumentError(EngineError, ValueError):
    """A parameter is out of range."""


class DraftMismatchError(ModelValidationError):
    """A valid DFlash draft that does not fit the target model (hidden size, capture layers,
    feature width, vocabulary)."""


class StateFileError(EngineError):
    """A saved engine state (luce_engine.state_files) cannot be used; the engine is unchanged
    unless the message says it was left empty (a payload found damaged while it was read)."""


class StateMismatchError(StateFileError, ValueError):
    """A valid state file of another model, KV cache type or context size."""


class StateDamagedError(StateFileError, ValueError):
    """Not a state file, or a truncated or corrupt one (a checksum disagrees)."""


class StateNewerFormatError(StateFileError, ValueError):
    """A state file written by a newer luce."""


class StateIOError(StateFileError, OSError):
    """A state file cannot be written or read: disk full, read-only directory, or another process
    writing the same file."""


# native status code (luce.h) -> exception class
STATUS_ERRORS = {
    1: InvalidArgumentError,
    2: ModelFileError,
    3: ModelFormatError,
    4: UnsupportedModelError,
    5: ModelValidationError,
    6: DeviceError,
    7: InsufficientMemoryError,
    8: ContextFullError,
    9: GenerationCancelled,
    10: EngineStateError,
    11: ComputeError,
    12: DraftMismatchError,
    13: StateMismatchError,
    14: StateDamagedError,
    15: StateNewerFormatError,
    16: StateIOError,
}
