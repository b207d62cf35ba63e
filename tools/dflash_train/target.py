"""The target (SmolLM2-135M-Instruct, GGUF arch `llama`) as a PyTorch module, read from the GGUF itself.

Weights are dequantized with the `gguf` package (Q4_1 / Q8_0 -> float32) and kept exactly as
stored: llama.cpp's converter permutes the Q/K rows of a llama model for its interleaved rope
(LLAMA_ROPE_TYPE_NORM: pairs (2i, 2i+1)), so this forward uses that rope on the stored weights,
which is what the engine and llama.cpp compute (up to their activation rounding).

    tgt = Target.from_gguf(path, device="cuda")
    logits, feats = tgt(tokens, capture=(1, 8, 14, 20, 27))   # feats [n, T, Nf*E]
    out = tgt.generate_greedy(prompts, max_new=256, stop_ids={2})

Capture indices are the engine's internal convention (ALGORITHMS.md §1.2): index i = the
residual stream after target layer i (its FFN residual add).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


@dataclass
class TargetConfig:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    rope_base: float
    eps: float

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def _tensor_f32(t) -> np.ndarray:
    import gguf

    qt = gguf.GGMLQuantizationType(int(t.tensor_type))
    if qt in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        a = np.asarray(t.data, dtype=np.float32)
    else:
        a = gguf.quants.dequantize(np.asarray(t.data), qt).astype(np.float32)
    return a.reshape([int(x) for x in reversed(t.shape)])   # numpy order: matrices [out, in]


def read_gguf(path: str) -> tuple[TargetConfig, dict[str, np.ndarray]]:
    import gguf

    r = gguf.GGUFReader(path)
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
    a = kv["general.architecture"]
    if a != "llama":
        raise ValueError(f"{path}: this trainer reads llama-architecture targets, not {a!r}")
    tensors = {t.name: _tensor_f32(t) for t in r.tensors}
    cfg = TargetConfig(
        n_layer=int(kv[f"{a}.block_count"]), n_embd=int(kv[f"{a}.embedding_length"]),
        n_head=int(kv[f"{a}.attention.head_count"]), n_head_kv=int(kv[f"{a}.attention.head_count_kv"]),
        n_ff=int(kv[f"{a}.feed_forward_length"]), n_vocab=tensors["token_embd.weight"].shape[0],
        rope_base=float(kv.get(f"{a}.rope.freq_base", 10000.0)),
        eps=float(kv[f"{a}.attention.layer_norm_rms_epsilon"]))
    return cfg, tensors


def rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def rope_interleaved(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """x [..., T, H, D], pos [..., T]: llama.cpp's NORM rope, pairs (2i, 2i+1), theta_i = p*base^(-2i/D)."""
    D = x.shape[-1]
    inv = base ** (-torch.arange(0, D, 2, device=x.device, dtype=torch.float32) / D)
    th = pos.to(torch.float32)[..., None] * inv                    # [..., T, D/2]
    c, s = torch.cos(th)[..., None, :], torch.sin(th)[..., None, :]   # broadcast over heads
    x2 = x.float().unflatten(-1, (D // 2, 2))
    a, b = x2[..., 0], x2[..., 1]
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2).to(x.dtype)


def q8_round(x: torch.Tensor) -> torch.Tensor:
    """ggml's activation rounding in front of a quantized matmul: blocks of 32 along the row
    to int8 with scale amax/127 (q8_0 / q8_1, what CPU and CUDA kernels multiply the Q4_1 and
    Q8_0 weights with). Dequantized again, so a float matmul then matches those kernels up to
    summation order."""
    shape = x.shape
    b = x.float().reshape(*shape[:-1], shape[-1] // 32, 32)
    d = b.abs().amax(-1, keepdim=True) / 127.0
    q = torch.round(b / torch.where(d == 0, torch.ones_like(d), d))
    return (q * d).reshape(shape).to(x.dtype)


class Target(torch.nn.Module):
    """Frozen llama-architecture target: causal forward with optional KV cache and feature capture."""

    def __init__(self, cfg: TargetConfig, tensors: dict[str, np.ndarray], act_quant: bool = True):
        super().__init__()
        self.cfg = cfg
        self.act_quant = act_quant   # round matmul inputs as ggml does (see q8_round)
        P = torch.nn.Parameter
        t = lambda name: P(torch.from_numpy(np.array(tensors[name])), requires_grad=False)
        self.token_embd = t("token_embd.weight")                      # [V, E]
        self.output = t("output.weight") if "output.weight" in tensors else self.token_embd
        self.output_norm = t("output_norm.weight")
        self.layers = torch.nn.ModuleList()
        for i in range(cfg.n_layer):
            m = torch.nn.Module()
            for short, name in (("attn_norm", "attn_norm"), ("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v"),
                                ("wo", "attn_output"), ("ffn_norm", "ffn_norm"), ("gate", "ffn_gate"),
                                ("up", "ffn_up"), ("down", "ffn_down")):
                setattr(m, short, t(f"blk.{i}.{name}.weight"))
            self.layers.append(m)

    @classmethod
    def from_gguf(cls, path: str, device="cpu", act_quant: bool = True) -> "Target":
        cfg, tensors = read_gguf(path)
        return cls(cfg, tensors, act_quant).to(device).eval()

    def _mm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (q8_round(x) if self.act_quant else x) @ w.T

    def forward(self, tokens: torch.Tensor, *, pos: torch.Tensor | None = None, capture=(),
                key_mask: torch.Tensor | None = None, cache: list | None = None, logits: bool = True):
        """tokens [n, T] at positions pos [n, T] (default 0..T-1). key_mask [n, T_kv] (True = real key)
        covers cached + new keys. cache: list of per-layer (K, V) that is extended in place.
        Returns (logits [n, T, V] or None, features [n, T, Nf*E] or None)."""
        c = self.cfg
        n, T = tokens.shape
        D, Hq, Hkv = c.head_dim, c.n_head, c.n_head_kv
        past = 0 if not cache else cache[0][0].shape[2]
        if pos is None:
            pos = torch.arange(past, past + T, device=tokens.device).expand(n, T)
        causal = torch.ones(T, past + T, dtype=torch.bool, device=tokens.device).tril(past)
        mask = causal[None, None]
        if key_mask is not None:
            mask = mask & key_mask[:, None, None, :]
        x = F.embedding(tokens, self.token_embd)
        feats = []
        for il, L in enumerate(self.layers):
            h = rms_norm(x, L.attn_norm, c.eps)
            q = rope_interleaved(self._mm(h, L.wq).view(n, T, Hq, D), pos, c.rope_base).transpose(1, 2)
            k = rope_interleaved(self._mm(h, L.wk).view(n, T, Hkv, D), pos, c.rope_base).transpose(1, 2)
            v = self._mm(h, L.wv).view(n, T, Hkv, D).transpose(1, 2)
            if self.act_quant:   # the engine's default f16 KV cache
                k, v = k.half().to(x.dtype), v.half().to(x.dtype)
            if cache is not None:
                if len(cache) <= il:
                    cache.append((k, v))
                else:
                    k = torch.cat([cache[il][0], k], dim=2)
                    v = torch.cat([cache[il][1], v], dim=2)
                    cache[il] = (k, v)
            k = k.repeat_interleave(Hq // Hkv, dim=1)
            v = v.repeat_interleave(Hq // Hkv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(D))
            x = x + self._mm(a.transpose(1, 2).reshape(n, T, Hq * D), L.wo)
            hf = rms_norm(x, L.ffn_norm, c.eps)
            hq = q8_round(hf) if self.act_quant else hf
            x = x + self._mm(F.silu(hq @ L.gate.T) * (hq @ L.up.T), L.down)
            if il in capture:
                feats.append(x)
            if not logits and capture and il >= max(capture):
                break
        f = torch.cat([feats[list(sorted(capture)).index(i)] for i in capture], dim=-1) if capture else None
        if not logits:
            return None, f
        return self._mm(rms_norm(x, self.output_norm, c.eps), self.output), f

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], *, max_new: int, stop_ids, greedy_from: list[int] | None = None,
                 temperature: float = 0.7, generator: torch.Generator | None = None) -> list[list[int]]:
        """Continuations of a batch of prompts (left-padded; each row keeps its own positions).
        Row r samples at `temperature` for its first greedy_from[r] new tokens, then decodes
        greedily (greedy_from None: all greedy). A row stops after emitting a stop id (kept)."""
        dev = self.token_embd.device
        n = len(prompts)
        P = max(len(p) for p in prompts)
        toks = torch.zeros(n, P, dtype=torch.long, device=dev)
        keym = torch.zeros(n, P, dtype=torch.bool, device=dev)
        pos = torch.zeros(n, P, dtype=torch.long, device=dev)
        for r, p in enumerate(prompts):
            toks[r, P - len(p):] = torch.tensor(p, device=dev)
            keym[r, P - len(p):] = True
            pos[r, P - len(p):] = torch.arange(len(p), device=dev)
        lens = torch.tensor([len(p) for p in prompts], device=dev)
        gfrom = torch.tensor(greedy_from or [0] * n, device=dev)
        stop = torch.tensor(sorted(stop_ids), device=dev)
        cache: list = []
        logits, _ = self(toks, pos=pos, key_mask=keym, cache=cache)
        last = logits[:, -1]
        out = torch.full((n, max_new), -1, dtype=torch.long, device=dev)
        done = torch.zeros(n, dtype=torch.bool, device=dev)
        for step in range(max_new):
            nxt = last.argmax(-1)
            sample = step < gfrom
            if bool(sample.any()):
                probs = torch.softmax(last.float() / temperature, -1)
                drawn = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                nxt = torch.where(sample, drawn, nxt)
            nxt = torch.where(done, torch.full_like(nxt, -1), nxt)
            out[:, step] = nxt
            done = done | torch.isin(nxt, stop)
            if bool(done.all()):
                break
            keym = torch.cat([keym, torch.ones(n, 1, dtype=torch.bool, device=dev)], dim=1)   # finished rows: discarded
            logits, _ = self(nxt.clamp_min(0)[:, None], pos=(lens + step)[:, None], key_mask=keym, cache=cache)
            last = logits[:, -1]
        res = []
        for r in range(n):
            row = out[r].tolist()
            res.append([t for t in row if t >= 0])
        return res
