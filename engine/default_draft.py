"""The DFlash draft shipped for the embedded default model, and when luce-chat uses it.

    choice = resolve_draft(draft_arg, spec_arg, model)   # after the target Model is loaded
    choice.path    # the draft GGUF to load, or None (plain decoding)
    choice.note    # why the shipped draft is not used, for the stats line / --verbose (or None)

`draft_arg` is --draft: None (the default policy), "default" (the shipped draft, forced) or a
path. `spec_arg` is --spec: "off" turns speculation off whatever the draft. With no --draft, the
shipped draft is used only for the model it was trained for (its `dflash.target_name` equals the
target's general.name) and only on a device class where it measured no slower than plain decoding
(DEFAULT_ON, from bench/bench_spec.py --real; docs/decisions.md). The file is package data of
luce_engine (engine/drafts/), found without network; tools/dflash_train/ reproduces it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SHIPPED_DRAFT = "smollm2-135m-instruct-dflash-q8_0.gguf"
# The target model the shipped draft belongs to: its general.name (also in the draft's metadata).
SHIPPED_TARGET_NAME = "Smollm2 135M 8k Lc100K Mix1 Ep2"

# Device class -> speculation on by default with the shipped draft (docs/decisions.md, 2026-12-06 afternoon).
DEFAULT_ON = {"cpu": False, "cuda": False}
OFF_REASON = {
    "cpu": "on the CPU the shipped draft measured slower than plain decoding",
    "cuda": ("on an H100 the shipped draft measured slower than plain decoding when sampling (T = 0.7: best mode "
             "0.92x), though 1.28x at temperature 0 with a chain of 7"),
}


@dataclass(frozen=True)
class DraftChoice:
    path: str | None
    note: str | None = None


def shipped_draft_path() -> str:
    """The shipped draft's path (package data of luce_engine)."""
    from luce_engine.errors import ModelFileError

    path = Path(__file__).resolve().parent / "drafts" / SHIPPED_DRAFT
    if not path.is_file():
        raise ModelFileError(f"the shipped draft is missing: {path} (reinstall luce-chat)")
    return str(path)


def device_class(device: str) -> str:
    """'cpu' or 'cuda' from a Model's device name (e.g. 'CPU', 'CUDA0')."""
    return "cpu" if device.lower().startswith("cpu") else "cuda"


def resolve_draft(draft_arg: str | None, spec_arg: str | None, model) -> DraftChoice:
    if spec_arg == "off":
        return DraftChoice(None)
    if draft_arg == "default":
        return DraftChoice(shipped_draft_path())
    if draft_arg:
        return DraftChoice(os.fspath(draft_arg))
    if model.name != SHIPPED_TARGET_NAME:
        return DraftChoice(None)      # another model: no draft unless --draft names one
    kind = device_class(model.device)
    if not DEFAULT_ON.get(kind, False):
        return DraftChoice(None, f"speculative decoding is off by default: {OFF_REASON[kind]} "
                                 f"(docs/decisions.md); --draft default turns it on")
    return DraftChoice(shipped_draft_path())
