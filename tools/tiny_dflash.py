"""Tiny random-weight DFlash draft GGUFs that match a tiny target from tools/tiny_gguf.py.

A DFlash draft (docs/gguf-formats.md §1.5, §3.2; docs/algorithms.md §1.1) is a small non-causal Qwen3-style
decoder conditioned on captured target hidden states. It has the target's hidden size E and
vocabulary, and by default NO token_embd/output of its own (the engine uses the target's).

    tgt = write_tiny_gguf(dir / "t.gguf", TinyConfig(arch="qwen3", n_layer=4))
    write_tiny_dflash(dir / "d.gguf", tgt, TinyDraftConfig(capture=(0, 1, 2)))
    write_tiny_dflash(dir / "l.gguf", tgt, TinyDraftConfig(capture=(0, 1, 2), convention="lucebox"))

Capture indices are given in the internal convention (docs/algorithms.md §1.2): index i = residual
stream after target layer i (= input of layer i+1 = HF hidden_states[i+1]).

The same seed and shape config give bit-identical weights in both conventions: only tensor
names and metadata keys differ. Defaults: 2 layers, 4 Q / 2 KV heads of 16, n_ff 128, block 8,
capture = default_capture(target n_layer) (up to 3 indices spread over 0..n_layer-2),
mask token = target n_vocab - 2, f32 weights, no SWA.

llama.cpp (llama-cpp-python 0.3.36) loads the "llama" files with or without token_embd
(tests/test_tiny_dflash.py), and its dflash graph run with a target context as ctx_other
matches tests/dflash_reference.py to ~1e-6. It refuses a sliding_window without the pattern
key and does not know the lucebox arch names.

Convention "llama" (llama.cpp arch `dflash`, src/models/dflash.cpp):
    keys    dflash.{context_length, embedding_length, block_count, feed_forward_length,
            attention.head_count, attention.head_count_kv, attention.key_length,
            attention.value_length, rope.dimension_count, rope.freq_base,
            attention.layer_norm_rms_epsilon, vocab_size, block_size}  (u32 / f32)
            dflash.target_layers                 i32[Nf]  = i + 1 (input of target layer L)
            tokenizer.* (copied from the target) + tokenizer.ggml.mask_token_id (u32)
            optional: dflash.rope.dimension_sections i32[4], dflash.attention.sliding_window u32
            + dflash.attention.sliding_window_pattern bool[n_layer] (true = SWA),
            dflash.attention.causal bool (only with causal_key=True/False)
    tensors fc.weight [Nf*E, E], enc.output_norm.weight [E],
            blk.i.{attn_norm, attn_q, attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm,
                   ffn_norm, ffn_gate, ffn_up, ffn_down}.weight, output_norm.weight [E]

Convention "lucebox" (arch `dflash-draft` or `qwen35-dflash-draft`; lucebox draft_gguf_loader /
spiritbuun converter). Every key carries the arch prefix A:
    keys    A.{context_length, embedding_length, block_count, feed_forward_length,
            attention.head_count, attention.head_count_kv, attention.key_length,
            attention.value_length, rope.dimension_count, rope.freq_base,
            attention.layer_norm_rms_epsilon, vocab_size}
            A.attention.causal = false (bool)
            A.dflash.block_size u32, A.dflash.mask_token_id u32,
            A.dflash.target_layer_ids i32[Nf] = i (output of target layer id), or with
            capture_key="n_target_layers" only A.dflash.n_target_layers u32 = Nf (what Lucebox's
            own converter writes; the ids are then lucebox_capture(T, Nf), and so is the capture),
            A.dflash.n_target_features u32 = Nf*E
            optional A.attention.sliding_window u32 + A.attention.sliding_window_pattern bool[n_layer]
            tokenizer.* (copied from the target; no tokenizer.ggml.mask_token_id)
    tensors dflash.fc.weight, dflash.hidden_norm.weight (fc_spelling="underscore":
            dflash_fc.weight, dflash_hidden_norm.weight); FFN input norm
            blk.i.post_attention_norm.weight (ffn_norm_name="ffn_norm": blk.i.ffn_norm.weight);
            the other names as in "llama".

Optional in both: target_name="..." writes dflash.target_name (lucebox: A.dflash.target_name), the
general.name of the target the draft belongs to (the engine refuses other targets). own_token_embd=True adds a random tied token_embd.weight [E, V] (drawn after
every other tensor, so the other weights do not change) so the draft loads standalone.

Broken drafts for mismatch tests (write_bad_draft; every other byte-producing step as for the
valid file of the same config):
    embd_mismatch         the whole draft uses E' = E + 32 (embedding_length, fc [Nf*E', E'], ...)
    capture_out_of_range  last capture index replaced by the target's n_layer (llama L = n_layer+1)
    fc_width              fc.weight ne0 = Nf*E + 32 (not Nf*E)
    missing_capture_key   no dflash.target_layers / A.dflash.target_layer_ids key
    mask_out_of_range     mask token id = target vocab size

CLI: python -m tools.tiny_dflash --target T.gguf --out D.gguf [--convention llama|lucebox]
     [--arch-name NAME] [--seed N] [--weight-type f32|f16|q8_0] [--n-layer N] [--block-size B]
     [--capture 0,1,2] [--mask-token-id M] [--sliding-window W [--swa-pattern 1,1,0]]
     [--own-token-embd] [--fc-spelling dot|underscore] [--ffn-norm-name NAME] [--bad KIND]
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

from tools.tiny_gguf import TinyConfig, _Writer, _byte_tokenizer, _encode, _random_makers, tokenizer_kvs

CONVENTIONS = ("llama", "lucebox")
LUCEBOX_ARCHS = ("dflash-draft", "qwen35-dflash-draft")
FC_SPELLINGS = ("dot", "underscore")
WEIGHT_TYPES = {
    "f32": (QT.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (QT.F16, gguf.LlamaFileType.MOSTLY_F16),
    "q8_0": (QT.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}
BAD_DRAFT_KINDS = ("embd_mismatch", "capture_out_of_range", "fc_width", "missing_capture_key",
                   "mask_out_of_range")


@dataclass
class TinyDraftConfig:
    convention: str = "llama"          # "llama" (arch dflash) or "lucebox" (dflash-draft family)
    arch_name: str | None = None       # lucebox: "dflash-draft" (default) / "qwen35-dflash-draft"
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16                 # key_length = value_length = rope.dimension_count
    n_ff: int = 128
    block_size: int = 8
    capture: tuple | None = None       # internal indices (i = output of target layer i); None -> default_capture
    mask_token_id: int | None = None   # None -> target n_vocab - 2
    sliding_window: int | None = None  # SWA window; None -> no SWA keys
    swa_pattern: tuple | None = None   # bool per layer (True = SWA); None -> all layers but the last
    weight_type: str = "f32"           # 2-D matrices: f32 / f16 / q8_0; norms stay f32
    seed: int = 0
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-6
    n_ctx_train: int = 2048
    own_token_embd: bool = False       # add a random tied token_embd.weight [E, V]
    rope_sections: tuple | None = None  # llama only: write dflash.rope.dimension_sections (e.g. (8, 0, 0, 0))
    fc_spelling: str = "dot"           # lucebox only: "dot" (dflash.fc.weight) / "underscore" (dflash_fc.weight)
    ffn_norm_name: str | None = None   # None -> llama "ffn_norm", lucebox "post_attention_norm"
    causal_key: bool | None = None     # attention.causal value; None -> lucebox False, llama key omitted
    write_tokenizer: bool = True       # copy the target's tokenizer.* keys
    capture_key: str = "ids"           # lucebox only: "ids" (dflash.target_layer_ids) / "n_target_layers"
    target_name: str | None = None     # write dflash.target_name / A.dflash.target_name (the target's general.name)

    def arch(self) -> str:
        if self.convention == "llama":
            return "dflash"
        return self.arch_name or LUCEBOX_ARCHS[0]

    def ffn_norm(self) -> str:
        if self.ffn_norm_name is not None:
            return self.ffn_norm_name
        return "ffn_norm" if self.convention == "llama" else "post_attention_norm"

    def swa_layers(self) -> list[bool]:
        if self.sliding_window is None:
            return [False] * self.n_layer
        if self.swa_pattern is not None:
            return [bool(x) for x in self.swa_pattern]
        return [i < self.n_layer - 1 for i in range(self.n_layer)]


@dataclass
class TargetInfo:
    """What a draft needs to know about its target."""
    arch: str
    n_embd: int
    n_vocab: int
    n_layer: int          # trunk layers (MTP/nextn blocks excluded)
    tokenizer_kvs: list   # (key, value, type, sub_type) of every tokenizer.* key




def target_info(target) -> TargetInfo:
    """TargetInfo from a TinyConfig or from the path of a target GGUF."""
    if isinstance(target, TinyConfig):
        if target.tokenizer_from:
            kvs, n_vocab = tokenizer_kvs(gguf.GGUFReader(target.tokenizer_from), target.tokenizer_from)
        else:  # same pre-tokenizer mapping as tiny_gguf._write
            n_vocab = target.n_vocab
            kvs = _byte_tokenizer(n_vocab, {"qwen3": "qwen2", "qwen35": "qwen35"}.get(target.arch, "smollm"))
        return TargetInfo(target.arch, target.n_embd, n_vocab, target.n_layer, list(kvs))
    path = os.fspath(target)
    reader = gguf.GGUFReader(path)

    def val(key, default=None):
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    arch = val("general.architecture")
    n_embd = int(val(f"{arch}.embedding_length"))
    n_layer = int(val(f"{arch}.block_count")) - int(val(f"{arch}.nextn_predict_layers", 0))
    kvs, n_vocab = tokenizer_kvs(reader, "target GGUF")
    del reader
    return TargetInfo(arch, n_embd, n_vocab, n_layer, list(kvs))


def default_capture(n_layer_target: int) -> tuple:
    """Up to 3 capture indices evenly spaced over the valid range 0..n_layer-2."""
    hi = n_layer_target - 2
    if hi < 0:
        raise ValueError(f"a target with n_layer={n_layer_target} has no capturable layer (need >= 2)")
    if hi + 1 <= 3:
        return tuple(range(hi + 1))
    return tuple(sorted({int(round(x)) for x in np.linspace(0, hi, 3)}))


def lucebox_capture(n_layer_target: int, n: int) -> tuple:
    """The target layers a Lucebox draft with only dflash.n_target_layers = n reads (output
    convention): 1 + k * ((T - 2) // (n - 1)), as Lucebox's loader derives them."""
    step = (n_layer_target - 2) // (n - 1) if n > 1 else 0
    return tuple(1 + k * step for k in range(n))


def _capture(cfg: TinyDraftConfig, t: TargetInfo) -> tuple:
    if cfg.capture_key == "n_target_layers":
        n = len(cfg.capture) if cfg.capture is not None else 3
        return lucebox_capture(t.n_layer, n)
    return tuple(int(i) for i in cfg.capture) if cfg.capture is not None else default_capture(t.n_layer)


def _mask_id(cfg: TinyDraftConfig, t: TargetInfo) -> int:
    return cfg.mask_token_id if cfg.mask_token_id is not None else t.n_vocab - 2


def check_config(cfg: TinyDraftConfig, t: TargetInfo) -> None:
    """Raise ValueError for a config that would not give a valid draft for target t."""
    if cfg.convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {cfg.convention!r}")
    if cfg.convention == "llama" and cfg.arch_name not in (None, "dflash"):
        raise ValueError("the llama convention has arch 'dflash'")
    if cfg.capture_key not in ("ids", "n_target_layers") or (cfg.capture_key != "ids" and cfg.convention != "lucebox"):
        raise ValueError("capture_key is 'ids', or 'n_target_layers' for the lucebox convention")
    if cfg.convention == "lucebox" and cfg.arch() not in LUCEBOX_ARCHS:
        raise ValueError(f"lucebox arch_name must be one of {LUCEBOX_ARCHS}, got {cfg.arch_name!r}")
    if cfg.weight_type not in WEIGHT_TYPES:
        raise ValueError(f"weight_type must be one of {tuple(WEIGHT_TYPES)}, got {cfg.weight_type!r}")
    if cfg.fc_spelling not in FC_SPELLINGS:
        raise ValueError(f"fc_spelling must be one of {FC_SPELLINGS}")
    ffn = cfg.ffn_norm()
    allowed = ("ffn_norm",) if cfg.convention == "llama" else ("ffn_norm", "post_attention_norm")
    if ffn not in allowed:  # llama: post_attention_norm is a different (Gemma-style) norm
        raise ValueError(f"ffn_norm_name for {cfg.convention} must be one of {allowed}, got {ffn!r}")
    if cfg.n_head % cfg.n_head_kv:
        raise ValueError("n_head must be a multiple of n_head_kv")
    if cfg.head_dim % 2:
        raise ValueError("head_dim must be even (rope)")
    if cfg.block_size < 2:
        raise ValueError("block_size must be >= 2")
    cap = _capture(cfg, t)
    if not cap:
        raise ValueError("capture must not be empty")
    if list(cap) != sorted(set(cap)):
        raise ValueError(f"capture {cap} must be strictly ascending")
    if cap[0] < 0 or cap[-1] > t.n_layer - 2:
        raise ValueError(f"capture {cap} out of range 0..{t.n_layer - 2} for a {t.n_layer}-layer target")
    if not 0 <= _mask_id(cfg, t) < t.n_vocab:
        raise ValueError(f"mask_token_id {_mask_id(cfg, t)} out of range for n_vocab={t.n_vocab}")
    if cfg.sliding_window is not None:
        if cfg.sliding_window < 1:
            raise ValueError("sliding_window must be >= 1")
        if len(cfg.swa_layers()) != cfg.n_layer:
            raise ValueError(f"swa_pattern needs {cfg.n_layer} entries")
    elif cfg.swa_pattern is not None:
        raise ValueError("swa_pattern needs sliding_window")
    if cfg.rope_sections is not None:
        if cfg.convention != "llama":
            raise ValueError("rope_sections is a llama-convention key")
        if len(cfg.rope_sections) != 4 or sum(cfg.rope_sections) != cfg.head_dim // 2:
            raise ValueError(f"rope_sections must be 4 ints summing to head_dim/2 = {cfg.head_dim // 2}")
    if cfg.weight_type == "q8_0":
        for name, n in (("n_embd", t.n_embd), ("n_head*head_dim", cfg.n_head * cfg.head_dim), ("n_ff", cfg.n_ff)):
            if n % 32:
                raise ValueError(f"{name}={n} must be a multiple of 32 for q8_0")


# ---------------------------------------------------------------- weights

def draft_weights(cfg: TinyDraftConfig, n_embd: int, n_vocab: int, n_capture: int,
                  fc_in: int | None = None) -> list[tuple[str, np.ndarray, bool]]:
    """(internal name, float32 array in numpy order = reversed ggml ne, is_matrix), in draw
    order. Internal names are the llama-convention names except `ffn_norm` = FFN input norm.
    Scales follow tools/tiny_gguf.py: projections std 1/sqrt(fan_in), attn_output/ffn_down
    also /sqrt(2*n_layer), norms 1 + 0.1*N(0,1); the optional token_embd (std 1/sqrt(E)) is
    drawn last so it leaves every other tensor unchanged."""
    rng = np.random.default_rng(cfg.seed)
    mat, norm = _random_makers(rng)
    E, F, D = n_embd, cfg.n_ff, cfg.head_dim
    q_dim, kv_dim = cfg.n_head * D, cfg.n_head_kv * D
    depth = 1.0 / np.sqrt(2 * cfg.n_layer)
    out = [
        ("fc.weight", mat(fc_in if fc_in is not None else n_capture * E, E), True),
        ("enc.output_norm.weight", norm(E), False),
    ]
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", norm(E), False),
            (p + "attn_q.weight", mat(E, q_dim), True),
            (p + "attn_k.weight", mat(E, kv_dim), True),
            (p + "attn_v.weight", mat(E, kv_dim), True),
            (p + "attn_output.weight", mat(q_dim, E, depth), True),
            (p + "attn_q_norm.weight", norm(D), False),
            (p + "attn_k_norm.weight", norm(D), False),
            (p + "ffn_norm.weight", norm(E), False),
            (p + "ffn_gate.weight", mat(E, F), True),
            (p + "ffn_up.weight", mat(E, F), True),
            (p + "ffn_down.weight", mat(F, E, depth), True),
        ]
    out.append(("output_norm.weight", norm(E), False))
    if cfg.own_token_embd:
        out.append(("token_embd.weight", mat(E, n_vocab), True))
    return out


def file_name(cfg: TinyDraftConfig, internal: str) -> str:
    """Tensor name in the file for an internal (llama-convention) name."""
    if cfg.convention == "llama":
        return internal
    if internal == "fc.weight":
        return "dflash.fc.weight" if cfg.fc_spelling == "dot" else "dflash_fc.weight"
    if internal == "enc.output_norm.weight":
        return "dflash.hidden_norm.weight" if cfg.fc_spelling == "dot" else "dflash_hidden_norm.weight"
    if internal.startswith("blk.") and internal.endswith(".ffn_norm.weight"):
        return internal.replace(".ffn_norm.weight", f".{cfg.ffn_norm()}.weight")
    return internal


def file_capture(cfg: TinyDraftConfig, capture) -> list[int]:
    """Capture indices as stored in the file: llama L = i + 1, lucebox id = i."""
    return [int(i) + 1 for i in capture] if cfg.convention == "llama" else [int(i) for i in capture]


def _kvs(cfg: TinyDraftConfig, t: TargetInfo, E: int, capture, mask_id: int, n_features: int) -> list:
    a = cfg.arch()
    _, ftype = WEIGHT_TYPES[cfg.weight_type]
    kvs = [
        ("general.name", f"tiny-{a}", VT.STRING),
        (f"{a}.context_length", cfg.n_ctx_train, VT.UINT32),
        (f"{a}.embedding_length", E, VT.UINT32),
        (f"{a}.block_count", cfg.n_layer, VT.UINT32),
        (f"{a}.feed_forward_length", cfg.n_ff, VT.UINT32),
        (f"{a}.attention.head_count", cfg.n_head, VT.UINT32),
        (f"{a}.attention.head_count_kv", cfg.n_head_kv, VT.UINT32),
        (f"{a}.attention.key_length", cfg.head_dim, VT.UINT32),
        (f"{a}.attention.value_length", cfg.head_dim, VT.UINT32),
        (f"{a}.rope.dimension_count", cfg.head_dim, VT.UINT32),
        (f"{a}.rope.freq_base", cfg.rope_freq_base, VT.FLOAT32),
        (f"{a}.attention.layer_norm_rms_epsilon", cfg.rms_eps, VT.FLOAT32),
        (f"{a}.vocab_size", t.n_vocab, VT.UINT32),
        ("general.file_type", int(ftype), VT.UINT32),
        ("general.quantization_version", gguf.GGML_QUANT_VERSION, VT.UINT32),
    ]
    causal = cfg.causal_key if cfg.causal_key is not None else (False if cfg.convention == "lucebox" else None)
    if causal is not None:
        kvs.append((f"{a}.attention.causal", bool(causal), VT.BOOL))
    if cfg.convention == "llama":
        kvs.append((f"{a}.block_size", cfg.block_size, VT.UINT32))
        if capture is not None:
            kvs.append((f"{a}.target_layers", file_capture(cfg, capture), VT.ARRAY, VT.INT32))
        if cfg.rope_sections is not None:
            kvs.append((f"{a}.rope.dimension_sections", [int(x) for x in cfg.rope_sections], VT.ARRAY, VT.INT32))
    else:
        kvs += [
            (f"{a}.dflash.block_size", cfg.block_size, VT.UINT32),
            (f"{a}.dflash.mask_token_id", mask_id, VT.UINT32),
        ]
        if capture is not None and cfg.capture_key == "n_target_layers":
            kvs.append((f"{a}.dflash.n_target_layers", len(capture), VT.UINT32))
        elif capture is not None:
            kvs.append((f"{a}.dflash.target_layer_ids", file_capture(cfg, capture), VT.ARRAY, VT.INT32))
        kvs.append((f"{a}.dflash.n_target_features", n_features, VT.UINT32))
    if cfg.target_name is not None:
        key = f"{a}.target_name" if cfg.convention == "llama" else f"{a}.dflash.target_name"
        kvs.append((key, cfg.target_name, VT.STRING))
    if cfg.sliding_window is not None:
        kvs += [
            (f"{a}.attention.sliding_window", cfg.sliding_window, VT.UINT32),
            (f"{a}.attention.sliding_window_pattern", cfg.swa_layers(), VT.ARRAY, VT.BOOL),
        ]
    return kvs


def _write(path, t: TargetInfo, cfg: TinyDraftConfig, *, n_embd: int | None = None, capture=None,
           skip_capture_key: bool = False, fc_extra: int = 0, mask_id: int | None = None) -> str:
    """Write without validation; the keyword hooks are the defects of write_bad_draft."""
    E = n_embd if n_embd is not None else t.n_embd
    cap = tuple(capture) if capture is not None else _capture(cfg, t)
    mask = mask_id if mask_id is not None else _mask_id(cfg, t)
    fc_in = len(cap) * E + fc_extra
    qtype, _ = WEIGHT_TYPES[cfg.weight_type]
    w = _Writer(str(path), cfg.arch())
    for key, val, vt, *sub in _kvs(cfg, t, E, None if skip_capture_key else cap, mask, len(cap) * E):
        w.add_key_value(key, val, vt, sub_type=sub[0] if sub else None)
    if cfg.write_tokenizer:
        for key, val, vt, sub in t.tokenizer_kvs:
            if not (cfg.convention == "llama" and key == "tokenizer.ggml.mask_token_id"):
                w.add_key_value(key, val, vt, sub_type=sub)
    if cfg.convention == "llama":
        w.add_key_value("tokenizer.ggml.mask_token_id", mask, VT.UINT32)
    for name, arr, is_matrix in draft_weights(cfg, E, t.n_vocab, len(cap), fc_in):
        if is_matrix and qtype != QT.F32:
            w.add_tensor(file_name(cfg, name), _encode(arr, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(file_name(cfg, name), arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def write_tiny_dflash(path, target, cfg: TinyDraftConfig | None = None) -> str:
    """Write a valid tiny DFlash draft for `target` (a TinyConfig, or the path of a target
    GGUF: E, vocabulary, n_layer and tokenizer are read from it). Returns str(path)."""
    cfg = cfg or TinyDraftConfig()
    t = target if isinstance(target, TargetInfo) else target_info(target)
    check_config(cfg, t)
    return _write(path, t, cfg)


BAD_DRAFT_DETAILS = {  # suggested substring of an engine's error message about the file
    "embd_mismatch": "embedding_length",
    "capture_out_of_range": "target",
    "fc_width": "fc",
    "missing_capture_key": "target",
    "mask_out_of_range": "mask",
}


def write_bad_draft(path, kind: str, target, cfg: TinyDraftConfig | None = None) -> str:
    """Write a deliberately inconsistent draft of the given kind (see module docstring and
    BAD_DRAFT_KINDS) for `target`; cfg (default TinyDraftConfig()) must be valid for it."""
    cfg = cfg or TinyDraftConfig()
    if kind not in BAD_DRAFT_KINDS:
        raise ValueError(f"kind must be one of {BAD_DRAFT_KINDS}, got {kind!r}")
    t = target if isinstance(target, TargetInfo) else target_info(target)
    check_config(cfg, t)
    cap = _capture(cfg, t)
    if kind == "embd_mismatch":
        return _write(path, t, cfg, n_embd=t.n_embd + 32)
    if kind == "capture_out_of_range":
        return _write(path, t, cfg, capture=cap[:-1] + (t.n_layer,))
    if kind == "fc_width":
        return _write(path, t, cfg, fc_extra=32)
    if kind == "missing_capture_key":
        return _write(path, t, cfg, skip_capture_key=True)
    return _write(path, t, cfg, mask_id=t.n_vocab)  # mask_out_of_range


def _ints(s: str | None):
    return None if s is None else tuple(int(x) for x in s.split(",") if x.strip())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.tiny_dflash", description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True, help="target GGUF (e.g. from python -m tools.tiny_gguf)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--convention", choices=CONVENTIONS, default="llama")
    ap.add_argument("--arch-name", default=None, help=f"lucebox: one of {LUCEBOX_ARCHS}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weight-type", choices=tuple(WEIGHT_TYPES), default="f32")
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--block-size", type=int, default=8)
    ap.add_argument("--capture", default=None, help="internal capture indices, e.g. 0,1,2")
    ap.add_argument("--mask-token-id", type=int, default=None)
    ap.add_argument("--sliding-window", type=int, default=None)
    ap.add_argument("--swa-pattern", default=None, help="one 0/1 per layer, e.g. 1,0")
    ap.add_argument("--own-token-embd", action="store_true", help="add a tied token_embd (standalone load)")
    ap.add_argument("--fc-spelling", choices=FC_SPELLINGS, default="dot")
    ap.add_argument("--ffn-norm-name", default=None)
    ap.add_argument("--bad", choices=BAD_DRAFT_KINDS, default=None, help="write a broken draft of this kind")
    a = ap.parse_args(argv)
    pattern = _ints(a.swa_pattern)
    cfg = TinyDraftConfig(
        convention=a.convention, arch_name=a.arch_name, seed=a.seed, weight_type=a.weight_type,
        n_layer=a.n_layer, block_size=a.block_size, capture=_ints(a.capture), mask_token_id=a.mask_token_id,
        sliding_window=a.sliding_window, swa_pattern=None if pattern is None else tuple(bool(x) for x in pattern),
        own_token_embd=a.own_token_embd, fc_spelling=a.fc_spelling, ffn_norm_name=a.ffn_norm_name)
    out = (write_bad_draft(a.out, a.bad, a.target, cfg) if a.bad
           else write_tiny_dflash(a.out, a.target, cfg))
    print(f"{out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
