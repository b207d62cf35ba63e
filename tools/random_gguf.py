"""Random-weight GGUFs with the exact shapes and quantization mix of real models, for speed runs.

A dense model's speed does not depend on its weight values, so bench/gpu measures on these files
instead of carrying 15 GiB of real weights to a machine without network. The output text is
meaningless: count speed in tokens and generate with end-of-generation ignored.

    python -m tools.random_gguf --preset qwen35-27b --out /tmp/q27.gguf    # ~15.4 GiB
    python -m tools.random_gguf --preset dflash-27b --out /tmp/d27.gguf    # its DFlash draft
    python -m tools.random_gguf --preset qwen3-0.6b --out /tmp/s06.gguf    # the PFlash scorer's shape
    python -m tools.random_gguf --preset qwen35-27b --dry-run              # tensor count and bytes

Presets (the *-tiny ones have the same structure at test size):
    qwen35-27b  Qwen3.5/3.6-27B: 64 layers (every 4th full attention, the rest Gated DeltaNet),
                hidden 5120, FFN 17408, vocabulary 248320, in llama-quantize's Q4_K_M mix: Q4_K,
                with Q6_K for output.weight and, on the layers `more_bits` picks, for the one
                attn_v / attn_qkv tensor and ffn_down
    dflash-27b  the DFlash draft for it: 5 Qwen3-style layers (32 query / 8 KV heads of 128), Q8_0,
                capturing the target's layers 1, 16, 31, 46, 61 (llama.cpp's `dflash` arch); no
                token_embd / output of its own (it uses the target's)
    qwen3-0.6b  Qwen3-0.6B: 28 layers, hidden 1024, BF16 matrices, tied embeddings (a PFlash scorer)
    qwen3-0.6b-q4k  the same in Q4_K (a small K-quant model for CPU speed: ggml repacks Q4_K)

The files are the layouts of tools/tiny_gguf.py and tools/tiny_dflash.py (same metadata writers,
same tensor names; tests/test_random_gguf.py checks both). Fast on a bare machine with numpy: the
weights of one (type, input width, scale) are rows cut at random from one pool of rows quantized
once (tools/kquant.py for Q4_K / Q6_K, gguf's quantizer for Q8_0), so writing is bound by the disk.
Values: matrices ~ N(0, 1/fan_in) (attn_output, ssm_out and ffn_down also / sqrt(2 * layers), as in
tiny_gguf), norms 1, the DeltaNet's own tensors as tiny_gguf draws them: finite all the way through.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):   # run as a script: make `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import GGUFValueType as VT  # noqa: E402

from tools import kquant  # noqa: E402
from tools.tiny_dflash import TargetInfo, TinyDraftConfig, _kvs as draft_kvs  # noqa: E402
from tools.tiny_gguf import TinyConfig, _byte_tokenizer, model_kvs  # noqa: E402

# A ChatML template so chat front ends (llama-cli -st) have one; the byte tokenizer has no special
# tokens for it, so its markers are plain text, which is all a speed run needs.
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

QWEN35_27B = TinyConfig(arch="qwen35", n_vocab=248320, n_embd=5120, n_layer=64, n_head=24, n_head_kv=4,
                        head_dim=256, n_ff=17408, n_ctx_train=262144, rope_freq_base=1e7, rms_eps=1e-6,
                        ssm_state=128, ssm_groups=16, ssm_heads=48, ssm_conv=4, weight_type="q4_k_m")
QWEN35_TINY = TinyConfig(arch="qwen35", n_vocab=1024, n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64,
                         n_ff=512, n_ctx_train=262144, rope_freq_base=1e7, rms_eps=1e-6, ssm_state=64,
                         ssm_groups=2, ssm_heads=4, weight_type="q4_k_m")
QWEN3_06B = TinyConfig(arch="qwen3", n_vocab=151936, n_embd=1024, n_layer=28, n_head=16, n_head_kv=8, head_dim=128,
                       n_ff=3072, n_ctx_train=40960, rope_freq_base=1e6, rms_eps=1e-6, tied_output=True)
QWEN3_TINY = TinyConfig(arch="qwen3", n_vocab=1024, n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=128,
                        n_ff=768, n_ctx_train=40960, rope_freq_base=1e6, rms_eps=1e-6, tied_output=True)
DFLASH_27B = TinyDraftConfig(n_layer=5, n_head=32, n_head_kv=8, head_dim=128, n_ff=17408, block_size=16,
                             capture=(1, 16, 31, 46, 61), weight_type="q8_0", rope_freq_base=1e7,
                             n_ctx_train=262144, rope_sections=(64, 0, 0, 0))
DFLASH_TINY = TinyDraftConfig(n_layer=2, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, block_size=16,
                              capture=(0, 1, 2), weight_type="q8_0", rope_freq_base=1e7, n_ctx_train=262144,
                              rope_sections=(32, 0, 0, 0))


@dataclasses.dataclass(frozen=True)
class Preset:
    model: TinyConfig                      # the model itself, or the draft's target
    draft: TinyDraftConfig | None = None   # set: the file is this DFlash draft for `model`
    matrix_type: QT = QT.Q4_K              # the mix's base type (Q6_K where the Q4_K_M rule says)


PRESETS = {
    "qwen35-27b": Preset(QWEN35_27B),
    "qwen35-tiny": Preset(QWEN35_TINY),
    "dflash-27b": Preset(QWEN35_27B, DFLASH_27B, QT.Q8_0),
    "dflash-tiny": Preset(QWEN35_TINY, DFLASH_TINY, QT.Q8_0),
    "qwen3-0.6b": Preset(QWEN3_06B, matrix_type=QT.BF16),
    "qwen3-0.6b-q4k": Preset(QWEN3_06B, matrix_type=QT.Q4_K),
    "qwen3-tiny": Preset(QWEN3_TINY, matrix_type=QT.BF16),
}
FILE_TYPES = {QT.Q4_K: gguf.LlamaFileType.MOSTLY_Q4_K_M, QT.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
              QT.BF16: gguf.LlamaFileType.MOSTLY_BF16}


@dataclasses.dataclass(frozen=True)
class Spec:
    """One tensor: ggml shape (ne0 = input width first), type, and how its values are drawn."""
    name: str
    ne: tuple[int, ...]
    qtype: QT
    kind: str = "matrix"     # matrix | ones | ssm_a | ssm_dt | conv
    scale: float = 1.0       # matrices: std = scale / sqrt(ne0)

    @property
    def nbytes(self) -> int:
        block, size = gguf.GGML_QUANT_SIZES[self.qtype]
        return int(np.prod(self.ne)) // block * size


def more_bits(layer: int, n_layer: int) -> bool:
    """llama-quantize's Q4_K_M rule for the layers whose attn_v-like tensor and ffn_down get Q6_K:
    the first and last eighth, and every third layer in between."""
    eighth = n_layer // 8
    return layer < eighth or layer >= 7 * n_layer // 8 or (layer - eighth) % 3 == 2


def qwen35_specs(c: TinyConfig) -> list[Spec]:
    """The tensors of tools.tiny_gguf._tensors_qwen35 (no MTP block), in its order."""
    E, F, D, V = c.n_embd, c.n_ff, c.head_dim, c.n_vocab
    S, Hk, Hv, Kc = c.ssm_state, c.ssm_groups, c.ssm_heads, c.ssm_conv
    q, kv, Di, C = c.n_head * D, c.n_head_kv * D, Hv * S, 2 * Hk * S + Hv * S
    depth = 1.0 / np.sqrt(2 * c.n_layer)
    out = [Spec("token_embd.weight", (E, V), QT.Q4_K, scale=np.sqrt(E))]
    for i in range(c.n_layer):
        p, hi = f"blk.{i}.", QT.Q6_K if more_bits(i, c.n_layer) else QT.Q4_K
        out.append(Spec(p + "attn_norm.weight", (E,), QT.F32, "ones"))
        if c.is_recurrent(i):
            out += [Spec(p + "attn_qkv.weight", (E, C), hi), Spec(p + "attn_gate.weight", (E, Di), QT.Q4_K),
                    Spec(p + "ssm_beta.weight", (E, Hv), QT.Q4_K, scale=0.5),
                    Spec(p + "ssm_alpha.weight", (E, Hv), QT.Q4_K, scale=0.3),
                    Spec(p + "ssm_dt.bias", (Hv,), QT.F32, "ssm_dt"), Spec(p + "ssm_a", (Hv,), QT.F32, "ssm_a"),
                    Spec(p + "ssm_conv1d.weight", (Kc, C), QT.F32, "conv"),
                    Spec(p + "ssm_norm.weight", (S,), QT.F32, "ones"),
                    Spec(p + "ssm_out.weight", (Di, E), QT.Q4_K, scale=depth)]
        else:
            out += [Spec(p + "attn_q.weight", (E, 2 * q), QT.Q4_K), Spec(p + "attn_k.weight", (E, kv), QT.Q4_K),
                    Spec(p + "attn_v.weight", (E, kv), hi), Spec(p + "attn_output.weight", (q, E), QT.Q4_K, scale=depth),
                    Spec(p + "attn_q_norm.weight", (D,), QT.F32, "ones"),
                    Spec(p + "attn_k_norm.weight", (D,), QT.F32, "ones")]
        out += [Spec(p + "post_attention_norm.weight", (E,), QT.F32, "ones"),
                Spec(p + "ffn_gate.weight", (E, F), QT.Q4_K), Spec(p + "ffn_up.weight", (E, F), QT.Q4_K),
                Spec(p + "ffn_down.weight", (F, E), hi, scale=depth)]
    return out + [Spec("output_norm.weight", (E,), QT.F32, "ones"), Spec("output.weight", (E, V), QT.Q6_K)]


def qwen3_specs(c: TinyConfig, t: QT) -> list[Spec]:
    """The tensors of tools.tiny_gguf._tensors for qwen3 with tied embeddings, in its order."""
    E, F, D = c.n_embd, c.n_ff, c.head_dim
    q, kv = c.n_head * D, c.n_head_kv * D
    depth = 1.0 / np.sqrt(2 * c.n_layer)
    # tied: small embeddings, and output_norm x10 to keep the logits ~N(0, 1) (as tiny_gguf)
    out = [Spec("token_embd.weight", (E, c.n_vocab), t, scale=0.1)]
    for i in range(c.n_layer):
        p = f"blk.{i}."
        out += [Spec(p + "attn_norm.weight", (E,), QT.F32, "ones"), Spec(p + "attn_q.weight", (E, q), t),
                Spec(p + "attn_k.weight", (E, kv), t), Spec(p + "attn_v.weight", (E, kv), t),
                Spec(p + "attn_output.weight", (q, E), t, scale=depth),
                Spec(p + "attn_q_norm.weight", (D,), QT.F32, "ones"), Spec(p + "attn_k_norm.weight", (D,), QT.F32, "ones"),
                Spec(p + "ffn_norm.weight", (E,), QT.F32, "ones"), Spec(p + "ffn_gate.weight", (E, F), t),
                Spec(p + "ffn_up.weight", (E, F), t), Spec(p + "ffn_down.weight", (F, E), t, scale=depth)]
    return out + [Spec("output_norm.weight", (E,), QT.F32, "ones", scale=10.0)]


def dflash_specs(d: TinyDraftConfig, E: int) -> list[Spec]:
    """The tensors of tools.tiny_dflash.draft_weights (llama convention, no own embedding), in its order."""
    F, D, t = d.n_ff, d.head_dim, QT.Q8_0
    q, kv = d.n_head * D, d.n_head_kv * D
    depth = 1.0 / np.sqrt(2 * d.n_layer)
    out = [Spec("fc.weight", (len(d.capture) * E, E), t), Spec("enc.output_norm.weight", (E,), QT.F32, "ones")]
    for i in range(d.n_layer):
        p = f"blk.{i}."
        out += [Spec(p + "attn_norm.weight", (E,), QT.F32, "ones"), Spec(p + "attn_q.weight", (E, q), t),
                Spec(p + "attn_k.weight", (E, kv), t), Spec(p + "attn_v.weight", (E, kv), t),
                Spec(p + "attn_output.weight", (q, E), t, scale=depth),
                Spec(p + "attn_q_norm.weight", (D,), QT.F32, "ones"), Spec(p + "attn_k_norm.weight", (D,), QT.F32, "ones"),
                Spec(p + "ffn_norm.weight", (E,), QT.F32, "ones"), Spec(p + "ffn_gate.weight", (E, F), t),
                Spec(p + "ffn_up.weight", (E, F), t), Spec(p + "ffn_down.weight", (F, E), t, scale=depth)]
    return out + [Spec("output_norm.weight", (E,), QT.F32, "ones")]


def specs(preset: Preset) -> list[Spec]:
    if preset.draft is not None:
        return dflash_specs(preset.draft, preset.model.n_embd)
    if preset.model.arch == "qwen35":
        return qwen35_specs(preset.model)
    return qwen3_specs(preset.model, preset.matrix_type)


def metadata(preset: Preset, name: str) -> tuple[str, list[tuple]]:
    """(architecture, [(key, value, type, sub_type)]) through the tiny writers' own metadata code."""
    m = preset.model
    tokenizer = _byte_tokenizer(m.n_vocab, {"qwen3": "qwen2", "qwen35": "qwen35"}[m.arch])
    tokenizer.append(("tokenizer.chat_template", CHATML, VT.STRING, None))
    if preset.draft is not None:
        d = preset.draft
        info = TargetInfo(m.arch, m.n_embd, m.n_vocab, m.n_layer, tokenizer)
        mask = m.n_vocab - 2   # a padding token of the byte vocabulary, as tiny_dflash chooses
        kvs = draft_kvs(d, info, m.n_embd, d.capture, mask, len(d.capture) * m.n_embd) + tokenizer
        kvs.append(("tokenizer.ggml.mask_token_id", mask, VT.UINT32))
        arch = d.arch()
    else:
        kvs = model_kvs(m, m.arch, m.n_vocab, FILE_TYPES[preset.matrix_type]) + tokenizer
        arch = m.arch
    return arch, [(k, f"random-{name}" if k == "general.name" else v, vt, *sub) for k, v, vt, *sub in kvs]


# ---------------------------------------------------------------- values

POOL_BYTES = 8 << 20   # per pool of rows; enough rows that neighbouring rows rarely repeat


def _encode(rows: np.ndarray, qtype: QT) -> np.ndarray:
    """float32 [n, k] -> uint8 [n, row bytes] in the file's encoding."""
    if qtype == QT.Q4_K:
        return kquant.quantize_q4_k(rows)
    if qtype == QT.Q6_K:
        return kquant.quantize_q6_k(rows)
    if qtype == QT.BF16:   # round to nearest even, as ggml's fp32 -> bf16
        u = rows.astype(np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).view(np.uint8)
    return gguf.quants.quantize(rows, qtype)


class RowPools:
    """Quantized random rows per (type, width, std), made once and reused by every tensor."""

    def __init__(self, tensors: list[Spec], rng: np.random.Generator):
        self.rng, self.pools, self.need = rng, {}, {}
        # one output buffer for all tensors: filling fresh memory costs its page faults every time
        self.buf = np.empty(max((s.nbytes for s in tensors if s.qtype != QT.F32), default=0), np.uint8)
        for s in tensors:   # a pool never holds more rows than its tensors take (tiny models)
            if s.qtype != QT.F32:
                self.need[self._key(s)] = self.need.get(self._key(s), 0) + int(np.prod(s.ne[1:]))

    @staticmethod
    def _key(spec: Spec) -> tuple:
        return spec.qtype, spec.ne[0], float(spec.scale / np.sqrt(spec.ne[0]))

    def rows(self, spec: Spec) -> np.ndarray:
        key = self._key(spec)
        (_, k, std), n = key, int(np.prod(spec.ne[1:]))
        if key not in self.pools:
            row_bytes = spec.nbytes // n
            n_pool = min(max(64, POOL_BYTES // row_bytes), self.need[key])
            x = self.rng.standard_normal((n_pool, k), dtype=np.float32) * np.float32(std)
            self.pools[key] = _encode(x, spec.qtype)
        pool = self.pools[key]
        out = self.buf[:spec.nbytes].reshape(n, -1)
        return np.take(pool, self.rng.integers(0, len(pool), n), axis=0, out=out)   # valid until the next call


def vector(spec: Spec, rng: np.random.Generator) -> np.ndarray:
    """F32 tensors in numpy order (reversed ne), drawn as tools/tiny_gguf.py draws them."""
    shape = tuple(reversed(spec.ne))
    if spec.kind == "ones":
        return np.full(shape, spec.scale, np.float32)
    if spec.kind == "ssm_a":       # -A with A in [0.05, 0.6]: per-token decay well inside (0, 1)
        return -rng.uniform(0.05, 0.6, shape).astype(np.float32)
    if spec.kind == "ssm_dt":
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    if spec.kind == "conv":        # small taps, the current token's ~0.8: the conv keeps its input's scale
        conv = 0.2 / np.sqrt(spec.ne[0]) * rng.standard_normal(shape)
        conv[:, -1] += 0.8
        return conv.astype(np.float32)
    raise ValueError(spec.kind)


# ---------------------------------------------------------------- writing

def write_random_gguf(path, preset_name: str, *, seed: int = 0, progress=None) -> str:
    """Write the preset to path (via path + '.part', so a cut-off run leaves no half file). Returns str(path)."""
    if preset_name not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset_name!r}")
    preset = PRESETS[preset_name]
    arch, kvs = metadata(preset, preset_name)
    tensors = specs(preset)
    part = Path(str(path) + ".part")
    w = gguf.GGUFWriter(str(part), arch)
    for key, val, vt, *sub in kvs:
        w.add_key_value(key, val, vt, sub_type=sub[0] if sub else None)
    for s in tensors:
        if s.qtype == QT.F32:
            w.add_tensor_info(s.name, tuple(reversed(s.ne)), np.dtype(np.float32), s.nbytes)
        else:   # byte shape [rows, row bytes]: the writer derives ne from it
            n = int(np.prod(s.ne[1:]))
            w.add_tensor_info(s.name, (n, s.nbytes // n), np.dtype(np.uint8), s.nbytes, raw_dtype=s.qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    pools = RowPools(tensors, rng)
    done, total = 0, sum(s.nbytes for s in tensors)
    for s in tensors:
        w.write_tensor_data(vector(s, rng) if s.qtype == QT.F32 else pools.rows(s))
        done += s.nbytes
        if progress:
            progress(done, total)
    w.close()
    part.replace(path)
    return str(path)


def summary(preset_name: str) -> str:
    tensors = specs(PRESETS[preset_name])
    by_type: dict[str, list[int]] = {}
    for s in tensors:
        n, b = by_type.setdefault(s.qtype.name, [0, 0])
        by_type[s.qtype.name] = [n + 1, b + s.nbytes]
    total = sum(b for _, b in by_type.values())
    lines = [f"{preset_name}: {len(tensors)} tensors, {total / 2**30:.2f} GiB of tensor data"]
    lines += [f"  {t:5s} {n:4d} tensors {b / 2**30:8.3f} GiB" for t, (n, b) in sorted(by_type.items())]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.random_gguf", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=tuple(PRESETS), required=True)
    ap.add_argument("--out", help="output GGUF (not with --dry-run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the tensor count and bytes per type only")
    a = ap.parse_args(argv)
    print(summary(a.preset), flush=True)
    if a.dry_run:
        return 0
    if not a.out:
        ap.error("--out is required unless --dry-run")
    t0, last = time.perf_counter(), [0.0]

    def progress(done, total):
        now = time.perf_counter() - t0
        if now - last[0] > 10 or done == total:
            last[0] = now
            print(f"  {done / 2**30:6.2f} / {total / 2**30:.2f} GiB  {now:5.1f} s", flush=True)

    write_random_gguf(a.out, a.preset, seed=a.seed, progress=progress)
    size = Path(a.out).stat().st_size
    print(f"wrote {a.out}: {size / 2**30:.2f} GiB in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
