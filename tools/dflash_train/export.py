"""Write a trained draft as a GGUF in llama.cpp's `dflash` dialect (ALGORITHMS.md §1.1 table).

Keys and tokenizer come from the same code that writes the tiny test drafts (tools/tiny_dflash.py,
whose files llama.cpp loads and matches to ~1e-6), so the real draft and the tests share one
dialect writer. Added here: the draft's own general.* keys and `dflash.target_name`, the
general.name of the target it was trained for (the engine refuses the draft for another target
with DraftMismatchError; llama.cpp ignores the key). Matrices Q8_0 (or F16/F32), norms F32.
"""
from __future__ import annotations

import os

import numpy as np
import gguf
from gguf import GGUFValueType as VT

from tools.tiny_dflash import TinyDraftConfig, _kvs, check_config, target_info
from tools.tiny_gguf import _Writer, _encode
from tools.tiny_dflash import WEIGHT_TYPES

TARGET_NAME_KEY = "dflash.target_name"


def target_general_name(target_path: str) -> str:
    r = gguf.GGUFReader(target_path)
    f = r.fields.get("general.name")
    return str(f.contents()) if f is not None else os.path.splitext(os.path.basename(target_path))[0]


def write_draft_gguf(path: str, target_path: str, cfg, tensors: list[tuple[str, np.ndarray]], *,
                     weight_type: str = "q8_0", name: str = "SmolLM2-135M-Instruct DFlash draft (luce-chat)",
                     description: str = "") -> str:
    """cfg: a tools.dflash_train.draft_torch.DraftConfig; tensors: (GGUF name, float32 [out, in])."""
    t = target_info(target_path)
    tcfg = TinyDraftConfig(convention="llama", n_layer=cfg.n_layer, n_head=cfg.n_head, n_head_kv=cfg.n_head_kv,
                           head_dim=cfg.head_dim, n_ff=cfg.n_ff, block_size=cfg.block_size,
                           capture=tuple(cfg.capture), mask_token_id=cfg.mask_token_id, weight_type=weight_type,
                           rope_freq_base=cfg.rope_base, rms_eps=cfg.eps, n_ctx_train=4096)
    check_config(tcfg, t)
    if cfg.n_embd != t.n_embd:
        raise ValueError(f"draft n_embd {cfg.n_embd} != target {t.n_embd}")
    qtype, _ = WEIGHT_TYPES[weight_type]
    w = _Writer(str(path), "dflash")
    w.add_key_value("general.name", name, VT.STRING)
    if description:
        w.add_key_value("general.description", description, VT.STRING)
    w.add_key_value(TARGET_NAME_KEY, target_general_name(target_path), VT.STRING)
    Nf = len(cfg.capture)
    for key, val, vt, *sub in _kvs(tcfg, t, cfg.n_embd, tuple(cfg.capture), cfg.mask_token_id, Nf * cfg.n_embd):
        if key == "general.name":
            continue
        w.add_key_value(key, val, vt, sub_type=sub[0] if sub else None)
    for key, val, vt, sub in t.tokenizer_kvs:
        if key != "tokenizer.ggml.mask_token_id":
            w.add_key_value(key, val, vt, sub_type=sub)
    w.add_key_value("tokenizer.ggml.mask_token_id", cfg.mask_token_id, VT.UINT32)
    for tname, arr in tensors:
        arr = np.ascontiguousarray(np.asarray(arr, dtype=np.float32))
        if arr.ndim == 2 and qtype != gguf.GGMLQuantizationType.F32:
            w.add_tensor(tname, _encode(arr, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(tname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
