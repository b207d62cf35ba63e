"""The DFlash draft in PyTorch: the forward of tests/dflash_reference.py (ALGORITHMS.md §1.1, §1.4),
batched over many blocks of one sequence for training.

    g = rmsnorm(fc · F_p) · hidden_norm                              context feature of position p
    per layer: context K = rope_neox(rmsnorm(W_k g) · k_norm, p), V = W_v g (no attn_norm on g)
    block [x0, M, ..., M] at positions a..a+B-1, h = target token_embd rows:
        hn = rmsnorm(h) · attn_norm; Q, K_b, V_b from hn (q/k norms, NEOX rope)
        attention over the context positions < a and the whole block (non-causal), GQA
        h += W_o · attn;  h += W_down(silu(W_gate hf) · W_up hf), hf = rmsnorm(h) · ffn_norm
    logits = target output · (rmsnorm(h) · output_norm); row k predicts the token at a + k

The target's embedding and LM head are passed in (shared, frozen); the draft owns everything else.
Parameter names are the GGUF tensor names of llama.cpp's `dflash` arch with '.' -> '_'.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tools.dflash_train.target import rms_norm


@dataclass
class DraftConfig:
    n_embd: int = 576            # = the target's hidden size
    n_layer: int = 4
    n_head: int = 9
    n_head_kv: int = 3
    head_dim: int = 64
    n_ff: int = 1536
    block_size: int = 16
    capture: tuple = (1, 8, 14, 20, 27)   # internal convention: output of target layer i
    mask_token_id: int = 16      # SmolLM2 '<empty_output>', a special token chat never uses
    rope_base: float = 100000.0
    eps: float = 1e-5


def rope_neox(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """x [n, H, T, D], pos [n, T]: pairs (i, i + D/2), theta_i = p * base^(-2i/D) (ggml NEOX)."""
    D = x.shape[-1]
    half = D // 2
    inv = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) * 2.0 / D)
    th = pos.to(torch.float32)[:, None, :, None] * inv             # [n, 1, T, D/2]
    c, s = torch.cos(th), torch.sin(th)
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)


class DraftLayer(torch.nn.Module):
    def __init__(self, c: DraftConfig, std: float, out_std: float):
        super().__init__()
        E, D = c.n_embd, c.head_dim
        P = lambda *shape, s=std: torch.nn.Parameter(torch.randn(*shape) * s)
        ones = lambda n: torch.nn.Parameter(torch.ones(n))
        self.attn_norm, self.ffn_norm = ones(E), ones(E)
        self.attn_q_norm, self.attn_k_norm = ones(D), ones(D)
        self.attn_q = P(c.n_head * D, E)
        self.attn_k = P(c.n_head_kv * D, E)
        self.attn_v = P(c.n_head_kv * D, E)
        self.attn_output = P(E, c.n_head * D, s=out_std)
        self.ffn_gate = P(c.n_ff, E)
        self.ffn_up = P(c.n_ff, E)
        self.ffn_down = P(E, c.n_ff, s=out_std)


class DFlashDraft(torch.nn.Module):
    def __init__(self, c: DraftConfig, seed: int = 0):
        super().__init__()
        self.cfg = c
        g = torch.random.fork_rng(devices=[])
        with g:
            torch.manual_seed(seed)
            std = 0.02
            out_std = std / math.sqrt(2 * c.n_layer)
            self.fc = torch.nn.Parameter(torch.randn(c.n_embd, len(c.capture) * c.n_embd) * std)
            self.enc_output_norm = torch.nn.Parameter(torch.ones(c.n_embd))      # hidden_norm
            self.layers = torch.nn.ModuleList(DraftLayer(c, std, out_std) for _ in range(c.n_layer))
            self.output_norm = torch.nn.Parameter(torch.ones(c.n_embd))

    def context(self, feats: torch.Tensor) -> torch.Tensor:
        """Fused context features g [n, T, E] from captured target features [n, T, Nf*E]."""
        return rms_norm(feats @ self.fc.T, self.enc_output_norm, self.cfg.eps)

    def forward(self, embd: torch.Tensor, feats: torch.Tensor, tokens: torch.Tensor, anchors: torch.Tensor,
                ctx_len: torch.Tensor | None = None) -> torch.Tensor:
        """Final normed hidden states [n, NA, B, E] of NA blocks per sequence.

        embd: target token_embd [V, E]; feats [n, T, Nf*E] of positions 0..T-1; tokens [n, T];
        anchors [n, NA] (block j = [tokens[a_j], M, ...] at a_j..a_j+B-1, context = positions < a_j).
        """
        c = self.cfg
        n, T, _ = feats.shape
        NA, B = anchors.shape[1], c.block_size
        Hq, Hkv, D = c.n_head, c.n_head_kv, c.head_dim
        dev = feats.device
        g = self.context(feats)                                              # [n, T, E]
        ctx_pos = torch.arange(T, device=dev).expand(n, T)
        x0 = torch.gather(tokens, 1, anchors)                                # [n, NA]
        blk = torch.full((n, NA, B), c.mask_token_id, dtype=torch.long, device=dev)
        blk[:, :, 0] = x0
        bpos = (anchors[:, :, None] + torch.arange(B, device=dev)).reshape(n, NA * B)
        h = F.embedding(blk.reshape(n, NA * B), embd).to(g.dtype)            # [n, NA*B, E]
        # keys: T context positions then NA*B block rows; a block row sees context p < a_j and its own block
        q_block = torch.arange(NA, device=dev).repeat_interleave(B)          # [NA*B]
        vis_ctx = torch.arange(T, device=dev)[None, None, :] < anchors.repeat_interleave(B, dim=1)[:, :, None]
        vis_blk = (q_block[:, None] == q_block[None, :]).expand(n, -1, -1)
        mask = torch.cat([vis_ctx, vis_blk], dim=2)[:, None]                 # [n, 1, NA*B, T+NA*B]
        for L in self.layers:
            kc = rms_norm((g @ L.attn_k.T).view(n, T, Hkv, D), L.attn_k_norm, c.eps).transpose(1, 2)
            kc = rope_neox(kc, ctx_pos, c.rope_base)
            vc = (g @ L.attn_v.T).view(n, T, Hkv, D).transpose(1, 2)
            hn = rms_norm(h, L.attn_norm, c.eps)
            q = rms_norm((hn @ L.attn_q.T).view(n, NA * B, Hq, D), L.attn_q_norm, c.eps).transpose(1, 2)
            q = rope_neox(q, bpos, c.rope_base)
            kb = rms_norm((hn @ L.attn_k.T).view(n, NA * B, Hkv, D), L.attn_k_norm, c.eps).transpose(1, 2)
            kb = rope_neox(kb, bpos, c.rope_base)
            vb = (hn @ L.attn_v.T).view(n, NA * B, Hkv, D).transpose(1, 2)
            k = torch.cat([kc, kb], dim=2).repeat_interleave(Hq // Hkv, dim=1)
            v = torch.cat([vc, vb], dim=2).repeat_interleave(Hq // Hkv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(D))
            h = h + a.transpose(1, 2).reshape(n, NA * B, Hq * D) @ L.attn_output.T
            hf = rms_norm(h, L.ffn_norm, c.eps)
            h = h + (F.silu(hf @ L.ffn_gate.T) * (hf @ L.ffn_up.T)) @ L.ffn_down.T
        return rms_norm(h, self.output_norm, c.eps).view(n, NA, B, -1)

    def gguf_tensors(self) -> list[tuple[str, "torch.Tensor"]]:
        """(llama.cpp dflash tensor name, float32 CPU tensor in numpy order [out, in])."""
        out = [("fc.weight", self.fc), ("enc.output_norm.weight", self.enc_output_norm)]
        for i, L in enumerate(self.layers):
            for name in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
                         "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"):
                out.append((f"blk.{i}.{name}.weight", getattr(L, name)))
        out.append(("output_norm.weight", self.output_norm))
        return [(n, t.detach().float().cpu()) for n, t in out]

    @torch.no_grad()
    def load_gguf(self, path: str) -> None:
        """Weights from a draft GGUF of this shape (dequantized: Q8_0 rounding is kept)."""
        import gguf
        from tools.dflash_train.target import _tensor_f32

        r = gguf.GGUFReader(path)
        have = {t.name: t for t in r.tensors}
        for name, _ in self.gguf_tensors():
            attr = self._param(name)
            attr.copy_(torch.from_numpy(_tensor_f32(have[name]).copy()).reshape(attr.shape))

    def _param(self, gguf_name: str) -> torch.nn.Parameter:
        if gguf_name == "fc.weight":
            return self.fc
        if gguf_name == "enc.output_norm.weight":
            return self.enc_output_norm
        if gguf_name == "output_norm.weight":
            return self.output_norm
        _, i, name, _ = gguf_name.split(".")
        return getattr(self.layers[int(i)], name)
