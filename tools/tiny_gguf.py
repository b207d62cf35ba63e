"""Tiny random-weight GGUF models (llama / qwen3 / qwen35) for tests.

The files use the real GGUF layout of docs/gguf-formats.md §1.1/§1.3/§1.4/§5, so llama.cpp
(llama-cpp-python) loads them, but weights are random and small (defaults: 60-530 KB;
with a 49k-token tokenizer_from vocab a few MB).

    write_tiny_gguf(path, TinyConfig(arch="qwen3", head_dim=32, weight_type="q8_0"))
    write_tiny_gguf(path, TinyConfig(arch="qwen35", n_layer=4, head_dim=32, mtp=True))

qwen35 is the Qwen3.5/3.6 hybrid of docs/gguf-formats.md §1.2: Gated DeltaNet layers and gated
full-attention layers (layer i is full attention iff (i+1) % full_attention_interval == 0),
partial IMROPE rotary (n_rot, default head_dim // 4), optional MTP block appended.
It needs n_layer >= full_attention_interval (default 4): llama.cpp aborts on a qwen35 model
without any full-attention layer.
    write_bad_gguf(path, "missing_tensor")

Broken files written by write_bad_gguf (BAD_DETAILS[kind] is a substring that an error
message about the file should contain):

    truncated        valid file cut in the middle of the data of blk.0.ffn_down.weight
                     (every later tensor is missing too)               -> "blk.0.ffn_down.weight"
    wrong_magic      first 4 bytes "GGUF" replaced by "FUGG"          -> "magic"
    unknown_arch     general.architecture = "mamba9000", every {arch}.* key uses that
                     prefix, otherwise valid                           -> "mamba9000"
    missing_tensor   blk.1.ffn_down.weight omitted (tensor count one less)
                                                                       -> "blk.1.ffn_down.weight"
    wrong_shape      blk.0.attn_k.weight has ne1 = Hkv*D + 1 (one extra output row)
                                                                       -> "blk.0.attn_k.weight"
    text_file        a few lines of plain prose, not GGUF at all      -> "magic"
    missing_key      {arch}.embedding_length omitted                   -> "embedding_length"
    bad_tensor_type  blk.0.ffn_up.weight stored as I32 (same shape)   -> "blk.0.ffn_up.weight"
    scale_companion  an extra F32 tensor blk.0.ffn_up.scale [n_ff] beside the weight, as NVFP4
                     conversions write                                 -> "blk.0.ffn_up.scale"
    fused_qkv        blk.0's attn_q/k/v weights as one blk.0.attn_qkv.weight (Q, K, V rows
                     concatenated), as llama.cpp's convert_hf_to_gguf.py --fuse-qkv writes
                     (llama / qwen3 only)                              -> "--fuse-qkv"

CLI: python -m tools.tiny_gguf --arch qwen3 --out /tmp/x.gguf [--seed N]
     [--weight-type q8_0] [--tokenizer-from PATH] [--tied] [--bad KIND]
     (qwen35: [--n-layer 4] [--head-dim 32] [--mtp])
"""
from __future__ import annotations

import argparse
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import gguf

try:
    from tools import kquant
except ImportError:   # run as a script from tools/
    import kquant
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

ARCHS = ("llama", "qwen3", "qwen35")
BAD_KINDS = ("truncated", "wrong_magic", "unknown_arch", "missing_tensor", "wrong_shape",
             "text_file", "missing_key", "bad_tensor_type", "scale_companion", "fused_qkv")
BAD_DETAILS = {
    "truncated": "blk.0.ffn_down.weight",
    "wrong_magic": "magic",
    "unknown_arch": "mamba9000",
    "missing_tensor": "blk.1.ffn_down.weight",
    "wrong_shape": "blk.0.attn_k.weight",
    "text_file": "magic",
    "missing_key": "embedding_length",
    "bad_tensor_type": "blk.0.ffn_up.weight",
    "scale_companion": "blk.0.ffn_up.scale",
    "fused_qkv": "--fuse-qkv",
}

# weight_type -> (ggml tensor type, general.file_type)
WEIGHT_TYPES = {
    "f32": (QT.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (QT.F16, gguf.LlamaFileType.MOSTLY_F16),
    "q8_0": (QT.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (QT.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
    "bf16": (QT.BF16, gguf.LlamaFileType.MOSTLY_BF16),   # as the PFlash scorer Qwen3-0.6B-BF16 ships
    # the user's format: Q4_K, with Q6_K for ffn_down, attn_v / attn_qkv and the output head
    "q4_k_m": (QT.Q4_K, gguf.LlamaFileType.MOSTLY_Q4_K_M),
}
Q6K_IN_Q4KM = ("ffn_down.weight", "attn_v.weight", "attn_qkv.weight", "output.weight")
# a tiny qwen35 in the user's format: every matmul input 256 or 512 wide (whole K-quant blocks);
# TinyConfig(**Q4KM_QWEN35, n_vocab=..., seed=...)
Q4KM_QWEN35 = dict(arch="qwen35", n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                   ssm_state=64, ssm_heads=4, ssm_groups=2, weight_type="q4_k_m")


@dataclass
class TinyConfig:
    arch: str = "llama"            # "llama", "qwen3" or "qwen35"
    n_vocab: int = 256             # ignored when tokenizer_from is given
    n_embd: int = 64
    n_layer: int = 2               # trunk layers (qwen35: the MTP block comes on top)
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16             # key_length = value_length (and rope.dimension_count, not for qwen35)
    n_ff: int = 128
    n_ctx_train: int = 2048
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-5
    tied_output: bool = False      # no output.weight when True
    weight_type: str = "f32"       # f32 / f16 / q8_0 / q4_0 / q4_k_m for 2-D matrices; norms stay f32
    seed: int = 0
    tokenizer_from: str | None = None  # copy tokenizer.* keys from this GGUF
    # ---- qwen35 only (ignored by llama / qwen3) ----
    ssm_state: int = 16            # S = head_k_dim = head_v_dim of the DeltaNet layers
    ssm_groups: int = 2            # Hk, DeltaNet key heads
    ssm_heads: int = 4             # Hv, DeltaNet value heads (multiple of Hk)
    ssm_conv: int = 4              # Kc, causal conv kernel
    full_attention_interval: int = 4   # layer i is full attention iff (i+1) % interval == 0
    n_rot: int | None = None       # rotary dims; None -> head_dim // 4 (partial rotary 0.25)
    rope_sections: tuple | None = None  # IMROPE sections (4 ints, sum n_rot/2); None -> 11:11:10:0 scaled
    mtp: bool = False              # append one MTP (nextn) block as layer n_layer
    write_recurrent_layers: bool = True  # write {arch}.attention.recurrent_layers (else the interval decides)

    # derived qwen35 values (docs/gguf-formats.md §1.2)
    def rot(self) -> int:
        return self.n_rot if self.n_rot is not None else self.head_dim // 4

    def sections(self) -> tuple:
        if self.rope_sections is not None:
            return tuple(self.rope_sections)
        half = self.rot() // 2  # converter default [11, 11, 10, 0] (sum 32) scaled to half
        a = round(half * 11 / 32)
        return (a, a, half - 2 * a, 0)

    def is_recurrent(self, i: int) -> bool:  # MTP layers (i >= n_layer) are never recurrent
        return i < self.n_layer and (i + 1) % self.full_attention_interval != 0


class _Writer(gguf.GGUFWriter):
    """GGUFWriter that can also write an empty array: a 256-token byte vocab has no
    merges, yet llama.cpp refuses a gpt2 vocab whose tokenizer.ggml.merges key is absent."""

    def _pack_val(self, val, vtype, add_vtype, sub_type=None):
        if vtype == VT.ARRAY and len(val) == 0:
            head = self._pack("I", vtype) if add_vtype else b""
            return head + self._pack("I", sub_type or VT.STRING) + self._pack("Q", 0)
        return super()._pack_val(val, vtype, add_vtype, sub_type)


# ---------------------------------------------------------------- tokenizer

def _byte_chars() -> list[str]:
    """GPT-2 byte-level alphabet indexed by byte value: printable bytes map to
    themselves, the other 68 bytes to U+0100.. in byte order (so b' ' -> 'Ġ')."""
    printable = set(range(33, 127)) | set(range(161, 173)) | set(range(174, 256))
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


# Merge alphabet: space marker then letters by English frequency, then some punctuation.
_MERGE_ALPHABET = ["Ġ"] + list("etaoinshrdlcumwfgypbvkjxqz") + list("ETAOINSHRDLCUMWFGYPBVKJXQZ") + list(".,!?'-:;\"()")


def _byte_tokenizer(n_vocab: int, pre: str) -> list[tuple[str, object, VT, VT | None]]:
    """Minimal gpt2 tokenizer: token id == byte value for ids 0..255, then 2-char merged
    tokens (each with its merge), [PAD{i}] (UNUSED) if the merge list runs out, and a
    final CONTROL <|endoftext|> used as bos/eos. With exactly 256 tokens bos = eos = 255
    (byte 0xFF, which never occurs in UTF-8 text)."""
    if n_vocab < 256:
        raise ValueError(f"n_vocab must be >= 256 for the byte tokenizer, got {n_vocab}")
    tokens, types, merges = _byte_chars(), [1] * 256, []
    pairs = ((a, b) for a in _MERGE_ALPHABET for b in _MERGE_ALPHABET if b != "Ġ")
    while len(tokens) < n_vocab - 1:
        pair = next(pairs, None)
        if pair is None:
            tokens.append(f"[PAD{len(tokens)}]")
            types.append(5)
        else:
            tokens.append(pair[0] + pair[1])
            types.append(1)
            merges.append(f"{pair[0]} {pair[1]}")
    if n_vocab > 256:
        tokens.append("<|endoftext|>")
        types.append(3)
    eos = n_vocab - 1
    return [
        ("tokenizer.ggml.model", "gpt2", VT.STRING, None),
        ("tokenizer.ggml.pre", pre, VT.STRING, None),
        ("tokenizer.ggml.tokens", tokens, VT.ARRAY, VT.STRING),
        ("tokenizer.ggml.token_type", types, VT.ARRAY, VT.INT32),
        ("tokenizer.ggml.merges", merges, VT.ARRAY, VT.STRING),
        ("tokenizer.ggml.bos_token_id", eos, VT.UINT32, None),
        ("tokenizer.ggml.eos_token_id", eos, VT.UINT32, None),
        ("tokenizer.ggml.add_bos_token", False, VT.BOOL, None),
        ("tokenizer.ggml.add_space_prefix", False, VT.BOOL, None),
    ]


def tokenizer_kvs(reader: gguf.GGUFReader, source: str) -> tuple[list, int]:
    """Every tokenizer.* key of a GGUF with its value type; strings stay raw bytes so they are
    copied verbatim. Empty arrays (a byte vocabulary has no merges) keep their element type,
    which sits in parts[3]."""
    kvs, n_vocab = [], None
    for key, f in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        main = VT(f.types[0])
        if main == VT.ARRAY:
            if not f.data:
                kvs.append((key, [], main, VT(int(f.parts[3][0]))))
                continue
            sub = VT(f.types[-1])
            if sub == VT.ARRAY:
                raise ValueError(f"nested array {key} not supported")
            if sub == VT.STRING:
                val = [bytes(f.parts[i]) for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            kvs.append((key, val, main, sub))
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(val)
        elif main == VT.STRING:
            kvs.append((key, bytes(f.parts[f.data[0]]), main, None))
        else:
            kvs.append((key, f.parts[f.data[0]].tolist()[0], main, None))
    if n_vocab is None:
        raise ValueError(f"{source}: no tokenizer.ggml.tokens")
    return kvs, n_vocab


@functools.lru_cache(maxsize=4)
def _read_tokenizer(path: str, _mtime: float) -> tuple[list, int]:
    """tokenizer_kvs of a file, cached: SmolLM2's 49k tokens take a while to parse."""
    return tokenizer_kvs(gguf.GGUFReader(path), path)


# ---------------------------------------------------------------- weights

def _random_makers(rng):
    """mat(n_in, n_out, scale): a ggml ne [n_in, n_out] matrix ~ N(0, scale²/n_in);
    norm(n): norm weights around 1. Both draw from rng in call order (files stay deterministic)."""
    def mat(n_in, n_out, scale=1.0):
        return (rng.standard_normal((n_out, n_in)) * (scale / np.sqrt(n_in))).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    return mat, norm


def _tensors(cfg: TinyConfig, n_vocab: int) -> list[tuple[str, np.ndarray, bool]]:
    """(name, float32 array in numpy order = reversed ggml ne, is_matrix) in file order.
    Scales (tuned with llama.cpp greedy runs over several seeds):
    * projections std 1/sqrt(fan_in), attn_output/ffn_down also /sqrt(2*n_layer): every
      residual update is O(1) however deep the model is;
    * norm weights 1 + 0.1*N(0,1); lm head std 1/sqrt(E) -> logits ~N(0,1) over the vocab;
    * untied: embeddings N(0,1); the residual then carries the current token strongly,
      which gives varied greedy continuations; the lm head rows get -0.3 * unit(embedding)
      so a token does not predict itself (else ~4% of seeds loop on one token forever);
    * tied: a large embedding used as lm head scores the current token itself (e.e >> e.e'),
      so greedy decoding repeats the input token forever. Embeddings are made small
      (std 0.1/sqrt(E)) and output_norm is scaled x10 to keep the logits ~N(0,1); ~4% of
      seeds still end in a one-token loop (context-driven), seed 0 does not."""
    rng = np.random.default_rng(cfg.seed)
    E, F, D = cfg.n_embd, cfg.n_ff, cfg.head_dim
    q_dim, kv_dim = cfg.n_head * D, cfg.n_head_kv * D
    depth = 1.0 / np.sqrt(2 * cfg.n_layer)
    emb = 0.1 if cfg.tied_output else np.sqrt(E)

    mat, norm = _random_makers(rng)

    out = [("token_embd.weight", mat(E, n_vocab, emb), True)]
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", norm(E), False),
            (p + "attn_q.weight", mat(E, q_dim), True),
            (p + "attn_k.weight", mat(E, kv_dim), True),
            (p + "attn_v.weight", mat(E, kv_dim), True),
            (p + "attn_output.weight", mat(q_dim, E, depth), True),
        ]
        if cfg.arch == "qwen3":
            out += [(p + "attn_q_norm.weight", norm(D), False),
                    (p + "attn_k_norm.weight", norm(D), False)]
        out += [
            (p + "ffn_norm.weight", norm(E), False),
            (p + "ffn_gate.weight", mat(E, F), True),
            (p + "ffn_up.weight", mat(E, F), True),
            (p + "ffn_down.weight", mat(F, E, depth), True),
        ]
    out.append(("output_norm.weight", norm(E) * (1.0 / emb if cfg.tied_output else 1.0), False))
    if not cfg.tied_output:
        tok = out[0][1]
        head = mat(E, n_vocab) - 0.3 * tok / np.linalg.norm(tok, axis=1, keepdims=True)
        out.append(("output.weight", head.astype(np.float32), True))
    return out


def _tensors_qwen35(cfg: TinyConfig, n_vocab: int) -> list[tuple[str, np.ndarray, bool]]:
    """qwen35 tensors (docs/gguf-formats.md §1.2), same conventions and scales as _tensors, plus:
    * every *norm.weight is ~1 (the converter's "+1" is baked in, §1.1.4); ssm_norm has no
      +1 but HF initialises it to ones, so it is ~1 as well;
    * DeltaNet: conv taps small except the current-token tap (~0.8) so the conv keeps its
      input scale; ssm_a = -A with A in [0.05, 0.6] and softplus(alpha + dt_bias) ~ 0.7, so
      the per-token decay exp(g) lies in ~(0.6, 0.97); beta = sigmoid(~N(0, 0.5)) ~ 0.5.
      The delta rule with L2-normalised keys and beta < 1 keeps the state bounded;
    * attn_q rows are [q_h | gate_h] per head (2*Hq*D outputs); with random weights the
      split is only a matter of naming, and so is the tiled V-head order of the DeltaNet;
    * the MTP block is drawn last and appended after output.weight, so mtp=True adds tensors
      but leaves every other tensor of the same seed unchanged."""
    rng = np.random.default_rng(cfg.seed)
    E, F, D = cfg.n_embd, cfg.n_ff, cfg.head_dim
    S, Hk, Hv, Kc = cfg.ssm_state, cfg.ssm_groups, cfg.ssm_heads, cfg.ssm_conv
    q_dim, kv_dim = cfg.n_head * D, cfg.n_head_kv * D
    Di, C = Hv * S, 2 * Hk * S + Hv * S
    depth = 1.0 / np.sqrt(2 * cfg.n_layer)
    emb = 0.1 if cfg.tied_output else np.sqrt(E)

    mat, norm = _random_makers(rng)

    def attention(p):  # gated full attention (trunk layer or MTP block)
        return [
            (p + "attn_q.weight", mat(E, 2 * q_dim), True),
            (p + "attn_k.weight", mat(E, kv_dim), True),
            (p + "attn_v.weight", mat(E, kv_dim), True),
            (p + "attn_output.weight", mat(q_dim, E, depth), True),
            (p + "attn_q_norm.weight", norm(D), False),
            (p + "attn_k_norm.weight", norm(D), False),
        ]

    def deltanet(p):
        conv = 0.2 / np.sqrt(Kc) * rng.standard_normal((C, Kc))  # numpy (C, Kc) = ne [Kc, C]
        conv[:, -1] += 0.8                                        # tap Kc-1 = current token
        a = rng.uniform(0.05, 0.6, Hv)                            # A = exp(A_log)
        return [
            (p + "attn_qkv.weight", mat(E, C), True),
            (p + "attn_gate.weight", mat(E, Di), True),
            (p + "ssm_beta.weight", mat(E, Hv, 0.5), True),
            (p + "ssm_alpha.weight", mat(E, Hv, 0.3), True),
            (p + "ssm_dt.bias", (0.1 * rng.standard_normal(Hv)).astype(np.float32), False),
            (p + "ssm_a", (-a).astype(np.float32), False),        # stored as -exp(A_log)
            (p + "ssm_conv1d.weight", conv.astype(np.float32), False),
            (p + "ssm_norm.weight", norm(S), False),
            (p + "ssm_out.weight", mat(Di, E, depth), True),
        ]

    def ffn(p):
        return [
            (p + "ffn_gate.weight", mat(E, F), True),
            (p + "ffn_up.weight", mat(E, F), True),
            (p + "ffn_down.weight", mat(F, E, depth), True),
        ]

    out = [("token_embd.weight", mat(E, n_vocab, emb), True)]
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        out.append((p + "attn_norm.weight", norm(E), False))
        out += deltanet(p) if cfg.is_recurrent(i) else attention(p)
        out.append((p + "post_attention_norm.weight", norm(E), False))  # pre-FFN norm
        out += ffn(p)
    head_norm = 1.0 / emb if cfg.tied_output else 1.0  # see _tensors (tied: x10)
    out.append(("output_norm.weight", norm(E) * head_norm, False))
    if not cfg.tied_output:
        tok = out[0][1]
        head = mat(E, n_vocab) - 0.3 * tok / np.linalg.norm(tok, axis=1, keepdims=True)
        out.append(("output.weight", head.astype(np.float32), True))
    if cfg.mtp:  # MTP block = full-attention layer + nextn.* (embed_tokens/shared_head_head omitted)
        p = f"blk.{cfg.n_layer}."
        out.append((p + "attn_norm.weight", norm(E), False))
        out += attention(p)
        out.append((p + "post_attention_norm.weight", norm(E), False))
        out += ffn(p)
        out += [
            (p + "nextn.eh_proj.weight", mat(2 * E, E), True),   # input [embedding ; hidden]
            (p + "nextn.enorm.weight", norm(E), False),
            (p + "nextn.hnorm.weight", norm(E), False),
            (p + "nextn.shared_head_norm.weight", norm(E) * head_norm, False),
        ]
    return out


def _encode(arr: np.ndarray, qtype: QT) -> np.ndarray:
    if qtype == QT.F32:
        return arr
    if qtype == QT.F16:
        return arr.astype(np.float16)
    if qtype == QT.BF16:   # round to nearest even, as gguf-py and llama.cpp's converter do
        return gguf.quants.quantize(arr.astype(np.float32), QT.BF16)
    if qtype == QT.Q4_K:
        return kquant.quantize_q4_k(arr)
    if qtype == QT.Q6_K:
        return kquant.quantize_q6_k(arr)
    return gguf.quants.quantize(arr, qtype)  # uint8 blocks; writer recovers ne from raw_dtype


def _matrix_type(cfg: "TinyConfig", name: str, qtype: QT) -> QT:
    if cfg.weight_type == "q4_k_m" and name.endswith(Q6K_IN_Q4KM):
        return QT.Q6_K
    return qtype


def _check(cfg: TinyConfig) -> None:
    if cfg.arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {cfg.arch!r}")
    if cfg.weight_type not in WEIGHT_TYPES:
        raise ValueError(f"weight_type must be one of {tuple(WEIGHT_TYPES)}, got {cfg.weight_type!r}")
    if cfg.n_head % cfg.n_head_kv:
        raise ValueError("n_head must be a multiple of n_head_kv")
    fan_ins = [("n_embd", cfg.n_embd), ("n_head*head_dim", cfg.n_head * cfg.head_dim), ("n_ff", cfg.n_ff)]
    if cfg.arch == "qwen35":
        if cfg.ssm_heads % cfg.ssm_groups:
            raise ValueError("ssm_heads (Hv) must be a multiple of ssm_groups (Hk)")
        rot, sec = cfg.rot(), cfg.sections()
        if rot % 2 or not 0 < rot <= cfg.head_dim:
            raise ValueError(f"n_rot={rot} must be even and in (0, head_dim]")
        if len(sec) != 4 or sum(sec) != rot // 2:
            raise ValueError(f"rope_sections {sec} must be 4 ints summing to n_rot/2 = {rot // 2}")
        if all(cfg.is_recurrent(i) for i in range(cfg.n_layer)):
            # llama.cpp then builds a KV cache without layers and aborts in the first decode
            # (GGML_ASSERT(buffer) in ggml-backend.cpp), so refuse rather than crash a test
            raise ValueError(f"qwen35 needs a full-attention layer: n_layer={cfg.n_layer} < "
                             f"full_attention_interval={cfg.full_attention_interval}")
        fan_ins.append(("ssm_heads*ssm_state", cfg.ssm_heads * cfg.ssm_state))
    if cfg.weight_type in ("q8_0", "q4_0", "q4_k_m"):
        # quantized rows are blocks along ne0 (= fan_in of every matrix): 32 values, 256 for K-quants
        block = 256 if cfg.weight_type == "q4_k_m" else 32
        for name, n in fan_ins:
            if n % block:
                raise ValueError(f"{name}={n} must be a multiple of {block} for {cfg.weight_type}")


def model_kvs(cfg: TinyConfig, arch: str, n_vocab: int, ftype: int) -> list[tuple]:
    """The model's metadata (all but general.architecture and tokenizer.*) as (key, value, type[, sub_type])."""
    qwen35 = cfg.arch == "qwen35"
    n_layer_all = cfg.n_layer + (1 if qwen35 and cfg.mtp else 0)
    kvs = [
        ("general.name", f"tiny-{cfg.arch}", VT.STRING),
        (f"{arch}.context_length", cfg.n_ctx_train, VT.UINT32),
        (f"{arch}.embedding_length", cfg.n_embd, VT.UINT32),
        (f"{arch}.block_count", n_layer_all, VT.UINT32),
        (f"{arch}.feed_forward_length", cfg.n_ff, VT.UINT32),
        (f"{arch}.attention.head_count", cfg.n_head, VT.UINT32),
        (f"{arch}.attention.head_count_kv", cfg.n_head_kv, VT.UINT32),
        (f"{arch}.attention.key_length", cfg.head_dim, VT.UINT32),
        (f"{arch}.attention.value_length", cfg.head_dim, VT.UINT32),
        (f"{arch}.rope.dimension_count", cfg.rot() if qwen35 else cfg.head_dim, VT.UINT32),
        (f"{arch}.rope.freq_base", cfg.rope_freq_base, VT.FLOAT32),
        (f"{arch}.attention.layer_norm_rms_epsilon", cfg.rms_eps, VT.FLOAT32),
        (f"{arch}.vocab_size", n_vocab, VT.UINT32),
        ("general.file_type", int(ftype), VT.UINT32),
        ("general.quantization_version", gguf.GGML_QUANT_VERSION, VT.UINT32),
    ]
    if qwen35:  # docs/gguf-formats.md §1.2 (all but recurrent_layers / interval / nextn are required)
        S, Hv = cfg.ssm_state, cfg.ssm_heads
        kvs += [
            (f"{arch}.rope.dimension_sections", list(cfg.sections()), VT.ARRAY, VT.INT32),
            (f"{arch}.ssm.conv_kernel", cfg.ssm_conv, VT.UINT32),
            (f"{arch}.ssm.inner_size", Hv * S, VT.UINT32),
            (f"{arch}.ssm.state_size", S, VT.UINT32),
            (f"{arch}.ssm.time_step_rank", Hv, VT.UINT32),
            (f"{arch}.ssm.group_count", cfg.ssm_groups, VT.UINT32),
            (f"{arch}.full_attention_interval", cfg.full_attention_interval, VT.UINT32),
        ]
        if cfg.write_recurrent_layers:  # false for the MTP layer too, as the converter writes it
            kvs.append((f"{arch}.attention.recurrent_layers",
                        [cfg.is_recurrent(i) for i in range(n_layer_all)], VT.ARRAY, VT.BOOL))
        if cfg.mtp:
            kvs.append((f"{arch}.nextn_predict_layers", 1, VT.UINT32))
    return kvs


def _write(path, cfg: TinyConfig, *, arch_name: str | None = None, skip_key: str | None = None,
           skip_tensor: str | None = None, bad_shape: str | None = None, int_tensor: str | None = None,
           extra_tensor: str | None = None, fuse_qkv_layer: int | None = None) -> str:
    """Write the model; the keyword hooks inject exactly one defect for write_bad_gguf
    while every other byte-producing step (rng draws included) stays the same."""
    _check(cfg)
    arch = arch_name or cfg.arch
    if cfg.tokenizer_from:
        tok_kvs, n_vocab = _read_tokenizer(os.path.realpath(cfg.tokenizer_from),
                                           os.path.getmtime(cfg.tokenizer_from))
    else:
        n_vocab = cfg.n_vocab
        tok_kvs = _byte_tokenizer(n_vocab, {"qwen3": "qwen2", "qwen35": "qwen35"}.get(cfg.arch, "smollm"))
    qtype, ftype = WEIGHT_TYPES[cfg.weight_type]

    w = _Writer(str(path), arch)
    qwen35 = cfg.arch == "qwen35"
    kvs = model_kvs(cfg, arch, n_vocab, ftype)
    for key, val, vt, *sub in kvs:
        if key != skip_key:
            w.add_key_value(key, val, vt, sub_type=sub[0] if sub else None)
    for key, val, vt, sub in tok_kvs:
        w.add_key_value(key, val, vt, sub_type=sub)

    tensors = (_tensors_qwen35 if qwen35 else _tensors)(cfg, n_vocab)
    names = {t[0] for t in tensors}
    for hook in (skip_tensor, bad_shape, int_tensor):  # a defect must not silently miss
        if hook is not None and hook not in names:
            raise ValueError(f"{hook} is not a tensor of this config")
    if fuse_qkv_layer is not None:   # Q, K, V rows in one matrix, where attn_q stood
        p = f"blk.{fuse_qkv_layer}."
        parts = {t[0]: t for t in tensors if t[0] in (p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight")}
        fused = (p + "attn_qkv.weight", np.concatenate([parts[p + s][1] for s in ("attn_q.weight", "attn_k.weight",
                                                                                  "attn_v.weight")]), True)
        tensors = [fused if t[0] == p + "attn_q.weight" else t for t in tensors if t[0] not in parts or
                   t[0] == p + "attn_q.weight"]
    if extra_tensor is not None:   # a companion vector beside the weight it names
        base = next(t for t in tensors if t[0] == extra_tensor.rsplit(".", 1)[0] + ".weight")
        tensors = tensors + [(extra_tensor, np.ones(base[1].shape[0], dtype=np.float32), False)]
    for name, arr, is_matrix in tensors:
        if name == skip_tensor:
            continue
        if name == bad_shape:  # one extra output row -> ne1 off by one
            arr = np.concatenate([arr, arr[:1]])
        if name == int_tensor:
            w.add_tensor(name, np.round(arr * 1000).astype(np.int32))
        elif is_matrix and qtype != QT.F32:
            t = _matrix_type(cfg, name, qtype)
            w.add_tensor(name, _encode(arr, t), raw_dtype=t)
        else:
            w.add_tensor(name, arr)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def write_tiny_gguf(path, cfg: TinyConfig) -> str:
    """Write a valid tiny model for cfg to path; returns str(path)."""
    return _write(path, cfg)


_PROSE = """This is not a model file.
It is a short note that someone saved with the wrong extension,
a few lines of ordinary prose that a loader must reject cleanly
instead of crashing or reading garbage as tensor data.
"""


def write_bad_gguf(path, kind: str, base_cfg: TinyConfig | None = None) -> str:
    """Write a deliberately broken file of the given kind (see module docstring and
    BAD_DETAILS); base_cfg (default TinyConfig()) is the valid model it starts from."""
    cfg = base_cfg or TinyConfig()
    if kind not in BAD_KINDS:
        raise ValueError(f"kind must be one of {BAD_KINDS}, got {kind!r}")
    if kind in ("missing_tensor",) and cfg.n_layer < 2:
        raise ValueError("missing_tensor needs n_layer >= 2 (it drops blk.1.ffn_down.weight)")
    p = Path(path)
    if kind == "text_file":
        p.write_text(_PROSE)
    elif kind == "unknown_arch":
        _write(p, cfg, arch_name="mamba9000")
    elif kind == "missing_tensor":
        _write(p, cfg, skip_tensor=BAD_DETAILS[kind])
    elif kind == "wrong_shape":
        _write(p, cfg, bad_shape=BAD_DETAILS[kind])
    elif kind == "missing_key":
        _write(p, cfg, skip_key=f"{cfg.arch}.embedding_length")
    elif kind == "bad_tensor_type":
        _write(p, cfg, int_tensor=BAD_DETAILS[kind])
    elif kind == "scale_companion":
        _write(p, cfg, extra_tensor=BAD_DETAILS[kind])
    elif kind == "fused_qkv":
        if cfg.arch == "qwen35":
            raise ValueError("fused_qkv: qwen35's recurrent layers have an attn_qkv of their own; use llama or qwen3")
        _write(p, cfg, fuse_qkv_layer=0)
    elif kind == "wrong_magic":
        _write(p, cfg)
        data = bytearray(p.read_bytes())
        data[:4] = b"FUGG"
        p.write_bytes(bytes(data))
    elif kind == "truncated":
        _write(p, cfg)
        reader = gguf.GGUFReader(p)
        t = next(t for t in reader.tensors if t.name == BAD_DETAILS[kind])
        cut = int(t.data_offset) + int(t.n_bytes) // 2
        del reader, t  # drop the memmap before shrinking the file under it
        os.truncate(p, cut)
    return str(p)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.tiny_gguf", description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=ARCHS, default="llama")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weight-type", choices=tuple(WEIGHT_TYPES), default="f32")
    ap.add_argument("--tokenizer-from", default=None)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--n-layer", type=int, default=None)
    ap.add_argument("--head-dim", type=int, default=None)
    ap.add_argument("--mtp", action="store_true", help="qwen35: append an MTP block")
    ap.add_argument("--bad", choices=BAD_KINDS, default=None, help="write a broken file of this kind")
    a = ap.parse_args(argv)
    if a.arch == "qwen35" and a.n_layer is None:
        a.n_layer = 4  # 3 DeltaNet layers + 1 full-attention layer
    extra = {k: v for k, v in (("n_layer", a.n_layer), ("head_dim", a.head_dim)) if v is not None}
    cfg = TinyConfig(arch=a.arch, seed=a.seed, weight_type=a.weight_type,
                     tokenizer_from=a.tokenizer_from, tied_output=a.tied, mtp=a.mtp, **extra)
    out = write_bad_gguf(a.out, a.bad, cfg) if a.bad else write_tiny_gguf(a.out, cfg)
    print(f"{out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
