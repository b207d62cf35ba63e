"""Independent numpy (float64) reference of the DFlash draft forward, design (A) of docs/algorithms.md §1.4.

Reads a draft GGUF of either dialect (llama.cpp arch `dflash` or lucebox `dflash-draft` /
`qwen35-dflash-draft`, docs/algorithms.md §1.1 table) with the `gguf` package and computes, per
docs/gguf-formats.md §3.2:

  KV injection (context positions p, captured target features F_p [Nf*E]):
      g = rmsnorm(fc . F_p) * hidden_norm                     (llama: enc.output_norm)
      per draft layer: K = rope(rmsnorm(W_k g) * k_norm, p),  V = W_v g
  noise block (tokens [x0, M, ..., M] at positions c..c+B-1):
      h = token_embd[tokens]                                  (target's table unless the draft has one)
      per layer: hn = rmsnorm(h) * attn_norm
                 Q = rope(rmsnorm(W_q hn) * q_norm), K_b = rope(rmsnorm(W_k hn) * k_norm), V_b = W_v hn
                 attention of the block queries over context K/V + block K/V, NON-causal,
                 scale 1/sqrt(D), GQA: q head h uses kv head h // (Hq/Hkv);
                 SWA layers: key p_k visible to query p_q iff p_q - p_k < window
                 h += W_o attn
                 h += W_down (silu(W_gate hf) * W_up hf),  hf = rmsnorm(h) * ffn_norm
      logits = output . (rmsnorm(h) * output_norm)            (target's LM head unless the draft has one)

All norms are plain `rmsnorm(x) * w` (no +1), rope is NEOX over the whole head (rope sections of
a degenerate M-RoPE draft are equivalent for 1-D positions). Capture indices are returned in the
internal convention (i = output of target layer i): llama L -> i = L - 1, lucebox id -> i = id.

Checked against llama.cpp's own dflash graph (llama-cpp-python 0.3.36, F32 weights and KV,
target context as ctx_other) in tests/test_tiny_dflash.py::test_llama_cpp_parity: max |diff|
~1e-6, including SWA layers (llama.cpp's per-query rule p_q - p_k < window, bidirectional inside
the block), position offsets, a draft-owned tied token_embd and degenerate M-RoPE sections.

Typical use:
    d, t = load_draft(draft_path), load_target_head(target_path)
    logits = draft_logits(d, t, F, noise_block(x0, d.mask_token_id, d.block_size))  # [B, V]
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import gguf

LUCEBOX_ARCHS = ("dflash-draft", "qwen35-dflash-draft")


# ---------------------------------------------------------------- reading

def _tensor_f64(t) -> np.ndarray:
    """A GGUF tensor as float64 in numpy order (reversed ggml ne): matrices [out, in]."""
    qt = gguf.GGMLQuantizationType(int(t.tensor_type))
    if qt in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        a = np.asarray(t.data, dtype=np.float64)
    else:
        a = gguf.quants.dequantize(np.asarray(t.data), qt).astype(np.float64)
    return a.reshape([int(x) for x in reversed(t.shape)])


def _fields(reader) -> dict:
    return {k: f.contents() for k, f in reader.fields.items()}


@dataclass
class DraftLayer:
    attn_norm: np.ndarray
    wq: np.ndarray        # [Hq*D, E]
    wk: np.ndarray        # [Hkv*D, E]
    wv: np.ndarray        # [Hkv*D, E]
    wo: np.ndarray        # [E, Hq*D]
    q_norm: np.ndarray    # [D]
    k_norm: np.ndarray    # [D]
    ffn_norm: np.ndarray  # FFN input norm (HF post_attention_layernorm)
    gate: np.ndarray      # [F, E]
    up: np.ndarray        # [F, E]
    down: np.ndarray      # [E, F]
    post_attn_norm: np.ndarray | None = None  # llama dialect only: Gemma-style norm of the attention output
    is_swa: bool = False


@dataclass
class DraftModel:
    arch: str
    convention: str       # "llama" or "lucebox"
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    eps: float
    rope_base: float
    block_size: int | None
    mask_token_id: int | None
    capture: tuple        # internal indices (i = output of target layer i)
    capture_file: tuple   # as stored in the file
    sliding_window: int | None
    causal: bool | None   # attention.causal key if present (the reference is always non-causal by default)
    fc: np.ndarray        # [E, Nf*E]
    hidden_norm: np.ndarray
    output_norm: np.ndarray
    layers: list = field(default_factory=list)
    token_embd: np.ndarray | None = None   # [V, E] if the draft ships one
    output: np.ndarray | None = None       # [V, E] if the draft ships one
    kv: dict = field(default_factory=dict)  # every metadata key

    @property
    def n_capture(self) -> int:
        return len(self.capture)


def load_draft(path) -> DraftModel:
    """Read a DFlash draft GGUF of either dialect into float64 arrays."""
    r = gguf.GGUFReader(path)
    kv = _fields(r)
    T = {t.name: _tensor_f64(t) for t in r.tensors}
    arch = kv["general.architecture"]
    if arch == "dflash":
        conv = "llama"
        cap_file = tuple(int(x) for x in kv[f"{arch}.target_layers"])
        capture = tuple(L - 1 for L in cap_file)
        block = kv.get(f"{arch}.block_size")
        mask = kv.get("tokenizer.ggml.mask_token_id")
        fc, hnorm = T["fc.weight"], T["enc.output_norm.weight"]
    elif arch in LUCEBOX_ARCHS:
        conv = "lucebox"
        cap_file = tuple(int(x) for x in kv[f"{arch}.dflash.target_layer_ids"])
        capture = cap_file
        block = kv.get(f"{arch}.dflash.block_size")
        mask = kv.get(f"{arch}.dflash.mask_token_id")
        fc = T.get("dflash.fc.weight", T.get("dflash_fc.weight"))
        hnorm = T.get("dflash.hidden_norm.weight", T.get("dflash_hidden_norm.weight"))
        if fc is None or hnorm is None:
            raise ValueError("lucebox draft without dflash.fc/dflash_fc or hidden_norm tensors")
    else:
        raise ValueError(f"not a DFlash draft: arch {arch!r}")

    n_layer = int(kv[f"{arch}.block_count"])
    E = int(kv[f"{arch}.embedding_length"])
    Hq = int(kv[f"{arch}.attention.head_count"])
    Hkv = int(kv.get(f"{arch}.attention.head_count_kv", Hq))
    D = int(kv.get(f"{arch}.attention.key_length", E // Hq))
    window = kv.get(f"{arch}.attention.sliding_window")
    pattern = kv.get(f"{arch}.attention.sliding_window_pattern")
    if window is not None and pattern is None:
        if conv == "llama":  # llama.cpp refuses such a file ("array key not found")
            raise ValueError(f"{arch}.attention.sliding_window without {arch}.attention.sliding_window_pattern")
        pattern = [False] * n_layer  # lucebox's GGUF loader: no pattern -> no SWA layer
    if fc.shape[1] != len(capture) * E:
        raise ValueError(f"fc input width {fc.shape[1]} != {len(capture)} captures * E={E}")

    layers = []
    for i in range(n_layer):
        p = f"blk.{i}."
        if conv == "llama":
            ffn_norm, post = T[p + "ffn_norm.weight"], T.get(p + "post_attention_norm.weight")
        else:  # lucebox: post_attention_norm IS the FFN input norm (either name)
            ffn_norm = T.get(p + "ffn_norm.weight", T.get(p + "post_attention_norm.weight"))
            post = None
        layers.append(DraftLayer(
            attn_norm=T[p + "attn_norm.weight"], wq=T[p + "attn_q.weight"], wk=T[p + "attn_k.weight"],
            wv=T[p + "attn_v.weight"], wo=T[p + "attn_output.weight"], q_norm=T[p + "attn_q_norm.weight"],
            k_norm=T[p + "attn_k_norm.weight"], ffn_norm=ffn_norm, gate=T[p + "ffn_gate.weight"],
            up=T[p + "ffn_up.weight"], down=T[p + "ffn_down.weight"], post_attn_norm=post,
            is_swa=bool(pattern[i]) if window is not None else False))
    causal = kv.get(f"{arch}.attention.causal")
    return DraftModel(
        arch=arch, convention=conv, n_embd=E, n_head=Hq, n_head_kv=Hkv, head_dim=D,
        eps=float(kv[f"{arch}.attention.layer_norm_rms_epsilon"]),
        rope_base=float(kv.get(f"{arch}.rope.freq_base", 10000.0)),
        block_size=None if block is None else int(block), mask_token_id=None if mask is None else int(mask),
        capture=capture, capture_file=cap_file, sliding_window=None if window is None else int(window),
        causal=None if causal is None else bool(causal), fc=fc, hidden_norm=hnorm,
        output_norm=T["output_norm.weight"], layers=layers, token_embd=T.get("token_embd.weight"),
        output=T.get("output.weight"), kv=kv)


@dataclass
class TargetHead:
    token_embd: np.ndarray  # [V, E]
    output: np.ndarray      # [V, E] (= token_embd when the target is tied)
    output_norm: np.ndarray  # [E] (NOT used by the draft; provided for completeness)


def load_target_head(path) -> TargetHead:
    r = gguf.GGUFReader(path)
    T = {t.name: t for t in r.tensors if t.name in ("token_embd.weight", "output.weight", "output_norm.weight")}
    emb = _tensor_f64(T["token_embd.weight"])
    out = _tensor_f64(T["output.weight"]) if "output.weight" in T else emb
    return TargetHead(emb, out, _tensor_f64(T["output_norm.weight"]))


def resolve_head(draft: DraftModel, target: TargetHead | None) -> tuple[np.ndarray, np.ndarray]:
    """(embedding table, LM head) the draft runs with (docs/gguf-formats.md §1.5): the draft's own
    token_embd if present (and its output, else the same tied table), else the target's."""
    if draft.token_embd is not None:
        return draft.token_embd, draft.output if draft.output is not None else draft.token_embd
    if target is None:
        raise ValueError("draft has no token_embd: pass the target's head")
    return target.token_embd, draft.output if draft.output is not None else target.output


# ---------------------------------------------------------------- math

def rmsnorm(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def rope_neox(x: np.ndarray, pos: np.ndarray, base: float) -> np.ndarray:
    """x [n, H, D], pos [n]: pairs (i, i + D/2), theta_i = p * base^(-2i/D)."""
    D = x.shape[-1]
    half = D // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / D)
    th = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def fuse_features(draft: DraftModel, feats: np.ndarray) -> np.ndarray:
    """g = rmsnorm(fc . F) * hidden_norm for feature rows F [n, Nf*E] -> [n, E]."""
    feats = np.asarray(feats, dtype=np.float64)
    if feats.ndim != 2 or feats.shape[1] != draft.fc.shape[1]:
        raise ValueError(f"features must be [n, {draft.fc.shape[1]}], got {feats.shape}")
    return rmsnorm(feats @ draft.fc.T, draft.hidden_norm, draft.eps)


def context_kv(draft: DraftModel, feats: np.ndarray, positions) -> list[tuple[np.ndarray, np.ndarray]]:
    """KV injection: per draft layer (K [n, Hkv, D] roped, V [n, Hkv, D]) of the context rows."""
    g = fuse_features(draft, feats)
    n, Hkv, D = g.shape[0], draft.n_head_kv, draft.head_dim
    pos = np.asarray(positions)
    out = []
    for L in draft.layers:
        k = rmsnorm((g @ L.wk.T).reshape(n, Hkv, D), L.k_norm, draft.eps)
        out.append((rope_neox(k, pos, draft.rope_base), (g @ L.wv.T).reshape(n, Hkv, D)))
    return out


def _silu(x):
    return x / (1.0 + np.exp(-x))


def block_forward(draft: DraftModel, head: tuple[np.ndarray, np.ndarray], ctx_kv, ctx_pos, tokens, block_pos,
                  *, causal: bool = False, return_hidden: bool = False) -> np.ndarray:
    """Noise-block pass given the injected context (ctx_kv from context_kv at ctx_pos).
    Returns logits [B, V] (or the final normed hidden [B, E] with return_hidden)."""
    emb, lm_head = head
    tokens = np.asarray(tokens, dtype=np.int64)
    bpos = np.asarray(block_pos, dtype=np.int64)
    cpos = np.asarray(ctx_pos, dtype=np.int64)
    B, Hq, Hkv, D, eps = len(tokens), draft.n_head, draft.n_head_kv, draft.head_dim, draft.eps
    if len(bpos) != B:
        raise ValueError("one position per block token")
    kpos = np.concatenate([cpos, bpos])
    rel = bpos[:, None] - kpos[None, :]                # p_q - p_k, [B, n_ctx + B]
    h = emb[tokens].astype(np.float64)
    for L, (kc, vc) in zip(draft.layers, ctx_kv):
        hn = rmsnorm(h, L.attn_norm, eps)
        q = rope_neox(rmsnorm((hn @ L.wq.T).reshape(B, Hq, D), L.q_norm, eps), bpos, draft.rope_base)
        kb = rope_neox(rmsnorm((hn @ L.wk.T).reshape(B, Hkv, D), L.k_norm, eps), bpos, draft.rope_base)
        vb = (hn @ L.wv.T).reshape(B, Hkv, D)
        k = np.concatenate([kc, kb])                   # [n_kv, Hkv, D]
        v = np.concatenate([vc, vb])
        visible = np.ones(rel.shape, dtype=bool)
        if causal:
            visible &= rel >= 0
        if L.is_swa:
            visible &= rel < draft.sliding_window
        g = Hq // Hkv
        kh, vh = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # q head h -> kv head h // g
        s = np.einsum("qhd,khd->hqk", q, kh) / np.sqrt(D)
        s = np.where(visible[None], s, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        a = s / s.sum(axis=-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", a, vh).reshape(B, Hq * D) @ L.wo.T
        if L.post_attn_norm is not None:
            o = rmsnorm(o, L.post_attn_norm, eps)
        h = h + o
        hf = rmsnorm(h, L.ffn_norm, eps)
        h = h + (_silu(hf @ L.gate.T) * (hf @ L.up.T)) @ L.down.T
    y = rmsnorm(h, draft.output_norm, eps)
    return y if return_hidden else y @ lm_head.T


def noise_block(x0: int, mask_token_id: int, block_size: int) -> list[int]:
    """[x0, M, ..., M] of length block_size (docs/gguf-formats.md §3.3)."""
    return [int(x0)] + [int(mask_token_id)] * (block_size - 1)


def draft_logits(draft: DraftModel, target: TargetHead | None, feats: np.ndarray, tokens,
                 *, pos_offset: int = 0, ctx_window: int | None = None, causal: bool = False,
                 return_hidden: bool = False) -> np.ndarray:
    """Draft logits [B, V] for the noise block `tokens` at positions c..c+B-1 (c = len(feats)),
    given the captured target features F [c, Nf*E] of positions 0..c-1. pos_offset shifts every
    position; ctx_window (W_d) keeps only the last ctx_window context rows (design (B)
    keeps window-relative positions, which give the same logits). causal=True is the
    `attention.causal = true` variant (not used by the DFlash drivers)."""
    feats = np.asarray(feats, dtype=np.float64)
    c = feats.shape[0]
    ctx_pos = np.arange(c) + pos_offset
    if ctx_window is not None and c > ctx_window:
        feats, ctx_pos = feats[c - ctx_window:], ctx_pos[c - ctx_window:]
    block_pos = np.arange(c, c + len(tokens)) + pos_offset
    kv = context_kv(draft, feats, ctx_pos)
    return block_forward(draft, resolve_head(draft, target), kv, ctx_pos, tokens, block_pos,
                         causal=causal, return_hidden=return_hidden)
