"""A loaded GGUF model: weights on a device (native) plus its tokenizer and chat template."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from luce_engine import _core

MODEL_DEFAULTS = _core.model_defaults()       # luce_model_default_params()
ENGINE_DEFAULTS = _core.engine_defaults()     # luce_engine_default_params()


class Model:
    """A validated GGUF model on a device.

    >>> m = Model("SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu")
    >>> m.arch, m.n_vocab
    ('llama', 49152)

    Bad files raise a specific error naming the file and the key or tensor at fault
    (ModelFormatError, ModelValidationError, UnsupportedModelError, ModelFileError).
    """

    def __init__(self, path: str | os.PathLike, *, device: str = MODEL_DEFAULTS["device"],
                 use_mmap: bool = MODEL_DEFAULTS["use_mmap"], n_threads: int = MODEL_DEFAULTS["n_threads"],
                 plan_only: bool = False, fuse_weights: bool = MODEL_DEFAULTS["fuse_weights"],
                 repack_weights: bool | None = None):
        """plan_only: validate and size the file without loading weights (for `plan()`; an
        Engine cannot be created on such a model). fuse_weights: store projections that share
        their input and type as one fused weight on the device (False keeps every file tensor
        separate; the results are the same). repack_weights: on a CPU, store the matmul weights
        ggml's CPU kernels repack in their interleaved layout, as llama.cpp does by default (the
        results are then llama.cpp's bit for bit; with the file's layout the sums run in another
        order). None: MODEL_DEFAULTS["repack_weights"] (on)."""
        self.path = str(Path(path).expanduser())
        if repack_weights is None:   # read here, not at import: tests on AMX CPUs change it (conftest.py)
            repack_weights = MODEL_DEFAULTS["repack_weights"]
        self._core = _core.CoreModel(self.path, device, use_mmap, n_threads, plan_only, fuse_weights, repack_weights)
        self._info = self._core.info

    # -- metadata --------------------------------------------------------------------------
    arch = property(lambda self: self._info["arch"])
    name = property(lambda self: self._info["name"])
    device = property(lambda self: self._info["device"])
    n_vocab = property(lambda self: self._info["n_vocab"])
    n_embd = property(lambda self: self._info["n_embd"])
    n_layer = property(lambda self: self._info["n_layer"])
    n_ctx_train = property(lambda self: self._info["n_ctx_train"])
    n_params = property(lambda self: self._info["n_params"])
    weight_bytes = property(lambda self: self._info["weight_bytes"])
    weight_types = property(lambda self: self._info["types"])
    n_repacked = property(lambda self: self._info["n_repacked"])   # weights in ggml's CPU repacked layout

    @functools.cached_property
    def tokenizer(self):
        """The model's own tokenizer, built from its GGUF metadata (first use takes ~1 s)."""
        from luce_engine.tokenizer import Tokenizer

        return Tokenizer.from_gguf(self.path)

    @functools.cached_property
    def chat_template(self):
        from luce_engine.chat_template import ChatTemplate

        tok = self.tokenizer
        return ChatTemplate(tok.chat_template, bos_token=tok.bos_token, eos_token=tok.eos_token)

    def plan(self, *, check: bool = True, **engine_params) -> dict:
        """Memory an engine with these settings (Engine's keyword arguments) needs (bytes), without
        allocating it.

        Raises InsufficientMemoryError with a suggestion when it does not fit the device (unless
        check=False, e.g. to plan for another machine).
        """
        return self._core.plan(engine_params, check)

    def __repr__(self) -> str:
        return f"Model({self.name!r}, arch={self.arch}, device={self.device}, {self.weight_types})"


def devices() -> list[dict]:
    """Devices of ggml's backend registry: name, description, kind, memory_free, memory_total."""
    return _core.devices()
