"""Prompt token ids exactly as luce-chat sends them: the GGUF's chat template (its default system
prompt, then the user message, then the assistant header), tokenized by the engine's tokenizer.

Loads engine/tokenizer.py and engine/chat_template.py by file path, so it runs without the
compiled engine (on the GPU machine, beside PyTorch). Needs numpy, gguf, tokenizers, jinja2.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

_ENGINE = Path(__file__).resolve().parents[2] / "engine"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_luce_{name}", _ENGINE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class PromptEncoder:
    def __init__(self, target_path: str):
        tk, ct = _load("tokenizer"), _load("chat_template")
        self.tokenizer = tk.Tokenizer.from_gguf(target_path)
        t = self.tokenizer
        self.template = ct.ChatTemplate(t.chat_template, bos_token=t.bos_token, eos_token=t.eos_token)
        self.eog_ids = frozenset(t.eog_ids)

    def encode(self, messages: list[dict]) -> list[int]:
        """Our messages never hold control-token text, so parsing the whole render equals the
        conversation's markup/text split (Tokenizer.encode_parts)."""
        t = self.tokenizer
        ids = t.encode(self.template.render(messages, add_generation_prompt=True), parse_special=True)
        if t.add_bos and t.bos_id is not None and ids[:1] != [t.bos_id]:
            ids.insert(0, t.bos_id)
        return ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids))
