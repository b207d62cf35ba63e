"""Float64 numpy reference of the PFlash scorer (docs/algorithms.md §4.3, §4.7) for llama / qwen3 GGUFs.

Written from the definitions, independently of the engine's graphs: a plain per-token forward
(RMSNorm, GQA attention with RoPE, SwiGLU) that records every layer's queries and keys, then

    score[j] = mean_t max_{layer, head} softmax(Q_t · K_jᵀ / √d)   (tail rows t causal among themselves)

with Q/K taken before RoPE (after the q/k norms) when pre_rope. The optional block-sparse rule is
the engine's documented one: for an input longer than `threshold`, a body query in the micro-batch
[q0, q1) sees keys [0, sink) and [q0 - window, itself] once q0 - window > sink; tail queries see all.
"""
from __future__ import annotations

import dataclasses

import gguf
import numpy as np


@dataclasses.dataclass
class DenseModel:
    arch: str
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rope_base: float
    eps: float
    t: dict   # tensor name -> float64 array in numpy order (ggml ne reversed)


def load(path) -> DenseModel:
    r = gguf.GGUFReader(str(path))
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")

    def kv(key):
        f = r.fields[f"{arch}.{key}"]
        return f.parts[f.data[0]].tolist()[0]

    tensors = {}
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        tensors[t.name] = np.asarray(data, dtype=np.float64).reshape([int(x) for x in reversed(t.shape)])
    n_head = kv("attention.head_count")
    return DenseModel(arch, kv("block_count"), n_head, kv("attention.head_count_kv"),
                      kv("attention.key_length"), float(kv("rope.freq_base")),
                      float(kv("attention.layer_norm_rms_epsilon")), tensors)


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, base, neox):
    """x [n, H, D] at positions pos [n]: llama rotates adjacent pairs, NEOX the two halves."""
    n, H, D = x.shape
    inv = base ** (-np.arange(0, D, 2, dtype=np.float64) / D)        # [D/2]
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]   # [n, D/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if neox:
        a, b = x[..., : D // 2], x[..., D // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def visible_keys(i: int, n_total: int, n_tail: int, n_batch: int, threshold: int, sink: int, window: int):
    """Key indices that query i attends in the forward (the engine's sparse rule)."""
    n_body = n_total - n_tail
    if i >= n_body or threshold <= 0 or n_total <= threshold:
        return np.arange(i + 1)
    q0 = (i // n_batch) * n_batch
    lo = q0 - window
    if lo <= sink:
        return np.arange(i + 1)
    return np.concatenate([np.arange(sink), np.arange(lo, i + 1)])


def scores(m: DenseModel, tokens, *, n_tail: int = 8, pre_rope: bool = True, n_batch: int = 512,
           threshold: int = 0, sink: int = 256, window: int = 2048) -> np.ndarray:
    t = m.t
    S, H, Hkv, D = len(tokens), m.n_head, m.n_head_kv, m.head_dim
    group = H // Hkv
    neox = m.arch == "qwen3"
    pos = np.arange(S)
    x = t["token_embd.weight"][np.asarray(tokens)]                       # [S, E]
    best = np.zeros((n_tail, S))
    first = S - n_tail
    causal_tail = np.arange(S)[None, :] <= (first + np.arange(n_tail))[:, None]   # [n_tail, S]
    visible = [visible_keys(i, S, n_tail, n_batch, threshold, sink, window) for i in range(S)]
    for il in range(m.n_layer):
        p = f"blk.{il}."
        h = rmsnorm(x, t[p + "attn_norm.weight"], m.eps)
        q = (h @ t[p + "attn_q.weight"].T).reshape(S, H, D)
        k = (h @ t[p + "attn_k.weight"].T).reshape(S, Hkv, D)
        v = (h @ t[p + "attn_v.weight"].T).reshape(S, Hkv, D)
        if neox:
            q = rmsnorm(q, t[p + "attn_q_norm.weight"], m.eps)
            k = rmsnorm(k, t[p + "attn_k_norm.weight"], m.eps)
        qr, kr = rope(q, pos, m.rope_base, neox), rope(k, pos, m.rope_base, neox)

        # tail scores of this layer: [n_tail, H, S]
        qs, ks = (q, k) if pre_rope else (qr, kr)
        logits = np.einsum("thd,shd->ths", qs[first:], np.repeat(ks, group, axis=1)) / np.sqrt(D)
        logits = np.where(causal_tail[:, None, :], logits, -np.inf)
        logits -= logits.max(axis=-1, keepdims=True)
        prob = np.exp(logits)
        prob /= prob.sum(axis=-1, keepdims=True)
        best = np.maximum(best, prob.max(axis=1))

        # attention output of every token (post-RoPE), then the rest of the layer
        out = np.empty((S, H, D))
        for i in range(S):
            keys = visible[i]
            kk = np.repeat(kr[keys], group, axis=1)                       # [n, H, D]
            vv = np.repeat(v[keys], group, axis=1)
            a = np.einsum("hd,nhd->hn", qr[i], kk) / np.sqrt(D)
            a = np.exp(a - a.max(axis=-1, keepdims=True))
            a /= a.sum(axis=-1, keepdims=True)
            out[i] = np.einsum("hn,nhd->hd", a, vv)
        x = x + out.reshape(S, H * D) @ t[p + "attn_output.weight"].T
        f = rmsnorm(x, t[p + "ffn_norm.weight"], m.eps)
        g, u = f @ t[p + "ffn_gate.weight"].T, f @ t[p + "ffn_up.weight"].T
        x = x + ((g / (1.0 + np.exp(-g))) * u) @ t[p + "ffn_down.weight"].T
    return best.mean(axis=0)
