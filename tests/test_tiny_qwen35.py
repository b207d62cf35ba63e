"""Tests for the qwen35 (Gated DeltaNet + gated attention hybrid) models of tools/tiny_gguf.py:
GGUF keys/tensors per docs/gguf-formats.md §1.2, determinism, and llama.cpp (CPU) loading them."""
import os
import sys
from pathlib import Path

import pytest

llama_cpp = pytest.importorskip("llama_cpp")  # import llama_cpp before gguf / tools.tiny_gguf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gguf  # noqa: E402
import numpy as np  # noqa: E402

from reference import llama_reference  # noqa: E402
from tools.tiny_gguf import TinyConfig, write_bad_gguf, write_tiny_gguf  # noqa: E402

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

A = "qwen35"
# A: Hv/Hk = 2, 4 layers (DeltaNet x3 + attention), untied, MTP block, recurrent_layers key
# B: Hv/Hk = 4, 6 layers with interval 3 (attention at 2, 5), tied, no MTP, interval key only
# C: Hv/Hk = 1, 5 layers, S = 32, explicit n_rot / sections, MTP without recurrent_layers key
CONFIGS = {
    "A": dict(n_layer=4, head_dim=32, ssm_groups=2, ssm_heads=4, mtp=True),
    "B": dict(n_layer=6, head_dim=64, n_head=2, n_head_kv=1, ssm_groups=1, ssm_heads=4,
              full_attention_interval=3, tied_output=True, write_recurrent_layers=False),
    "C": dict(n_layer=5, head_dim=32, ssm_groups=2, ssm_heads=2, ssm_state=32, n_rot=16,
              rope_sections=(3, 3, 2, 0), mtp=True, write_recurrent_layers=False),
}
F32_NAMES = ("norm.weight", "ssm_a", "ssm_dt.bias", "ssm_conv1d.weight")  # never quantized


def _cfg(name, **kw):
    return TinyConfig(arch=A, **{**CONFIGS[name], **kw})


def _fields(path):
    r = gguf.GGUFReader(path)
    return r, {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.t")}


def _expected_shapes(cfg):
    E, F, D, V = cfg.n_embd, cfg.n_ff, cfg.head_dim, cfg.n_vocab
    S, Hk, Hv, Kc = cfg.ssm_state, cfg.ssm_groups, cfg.ssm_heads, cfg.ssm_conv
    out = {"token_embd.weight": [E, V], "output_norm.weight": [E]}
    if not cfg.tied_output:
        out["output.weight"] = [E, V]
    for i in range(cfg.n_layer + cfg.mtp):
        p = f"blk.{i}."
        out.update({p + "attn_norm.weight": [E], p + "post_attention_norm.weight": [E],
                    p + "ffn_gate.weight": [E, F], p + "ffn_up.weight": [E, F], p + "ffn_down.weight": [F, E]})
        if cfg.is_recurrent(i):
            out.update({p + "attn_qkv.weight": [E, 2 * Hk * S + Hv * S], p + "attn_gate.weight": [E, Hv * S],
                        p + "ssm_beta.weight": [E, Hv], p + "ssm_alpha.weight": [E, Hv],
                        p + "ssm_dt.bias": [Hv], p + "ssm_a": [Hv], p + "ssm_conv1d.weight": [Kc, 2 * Hk * S + Hv * S],
                        p + "ssm_norm.weight": [S], p + "ssm_out.weight": [Hv * S, E]})
        else:
            out.update({p + "attn_q.weight": [E, 2 * cfg.n_head * D], p + "attn_k.weight": [E, cfg.n_head_kv * D],
                        p + "attn_v.weight": [E, cfg.n_head_kv * D], p + "attn_output.weight": [cfg.n_head * D, E],
                        p + "attn_q_norm.weight": [D], p + "attn_k_norm.weight": [D]})
        if i == cfg.n_layer:  # MTP block
            out.update({p + "nextn.eh_proj.weight": [2 * E, E], p + "nextn.enorm.weight": [E],
                        p + "nextn.hnorm.weight": [E], p + "nextn.shared_head_norm.weight": [E]})
    return out


# ---------------------------------------------------------------- layout

@pytest.mark.parametrize("name", CONFIGS)
def test_keys_and_tensors(tmp_path, name):
    cfg = _cfg(name, weight_type="q8_0")
    r, kv = _fields(write_tiny_gguf(tmp_path / "m.gguf", cfg))
    n_all = cfg.n_layer + cfg.mtp
    S, Hv = cfg.ssm_state, cfg.ssm_heads
    expect = {
        "general.architecture": A, f"{A}.block_count": n_all, f"{A}.embedding_length": cfg.n_embd,
        f"{A}.attention.key_length": cfg.head_dim, f"{A}.attention.value_length": cfg.head_dim,
        f"{A}.rope.dimension_count": cfg.n_rot or cfg.head_dim // 4,
        f"{A}.ssm.conv_kernel": cfg.ssm_conv, f"{A}.ssm.inner_size": Hv * S, f"{A}.ssm.state_size": S,
        f"{A}.ssm.time_step_rank": Hv, f"{A}.ssm.group_count": cfg.ssm_groups,
        f"{A}.full_attention_interval": cfg.full_attention_interval,
        "tokenizer.ggml.pre": "qwen35",
    }
    for k, v in expect.items():
        assert kv[k] == v, k
    assert kv[f"{A}.attention.layer_norm_rms_epsilon"] == pytest.approx(cfg.rms_eps)
    sec = kv[f"{A}.rope.dimension_sections"]
    assert r.fields[f"{A}.rope.dimension_sections"].types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]
    assert len(sec) == 4 and sum(sec) == kv[f"{A}.rope.dimension_count"] // 2
    if name == "C":
        assert sec == [3, 3, 2, 0]
    assert (f"{A}.nextn_predict_layers" in kv) == cfg.mtp and kv.get(f"{A}.nextn_predict_layers", 1) == 1
    if cfg.write_recurrent_layers:
        rec = kv[f"{A}.attention.recurrent_layers"]
        assert rec == [(i + 1) % cfg.full_attention_interval != 0 for i in range(cfg.n_layer)] + [False] * cfg.mtp
    else:
        assert f"{A}.attention.recurrent_layers" not in kv

    tensors = {t.name: t for t in r.tensors}
    assert {n: [int(x) for x in t.shape] for n, t in tensors.items()} == _expected_shapes(cfg)
    for n, t in tensors.items():
        assert t.tensor_type.name == ("F32" if n.endswith(F32_NAMES) else "Q8_0"), n
    # norms ~1 ("+1" baked in; tied output_norm is x10), ssm_a = -exp(A_log) < 0 with sane decay
    assert 0.5 < tensors["blk.0.attn_norm.weight"].data.mean() < 1.5
    a = tensors["blk.0.ssm_a"].data
    assert (a < 0).all() and (np.exp(a * np.log(2)) > 0.5).all()  # decay at softplus(0) = ln 2


def test_deterministic_for_seed(tmp_path):
    paths = [write_tiny_gguf(tmp_path / f"{i}.gguf", _cfg("A", seed=s, weight_type="q8_0"))
             for i, s in enumerate((5, 5, 6))]
    a, b, c = (Path(p).read_bytes() for p in paths)
    assert a == b and a != c and len(a) == len(c)
    # mtp=True only appends the MTP block: every other tensor is the same
    with_mtp, without = (gguf.GGUFReader(write_tiny_gguf(tmp_path / f"m{m}.gguf", _cfg("A", mtp=m)))
                         for m in (True, False))
    trunk = {t.name: t.data for t in without.tensors}
    extra = {t.name for t in with_mtp.tensors} - set(trunk)
    assert extra and all(n.startswith("blk.4.") for n in extra)
    assert all(np.array_equal(t.data, trunk[t.name]) for t in with_mtp.tensors if t.name in trunk)


def test_config_errors(tmp_path):
    with pytest.raises(ValueError, match="full-attention"):  # llama.cpp would abort on it
        write_tiny_gguf(tmp_path / "x.gguf", TinyConfig(arch=A, n_layer=3))
    with pytest.raises(ValueError, match="multiple"):
        write_tiny_gguf(tmp_path / "x.gguf", _cfg("A", ssm_groups=3))
    with pytest.raises(ValueError, match="sections"):
        write_tiny_gguf(tmp_path / "x.gguf", _cfg("A", rope_sections=(1, 1, 1, 0)))
    with pytest.raises(ValueError, match="attn_k"):  # layer 0 is DeltaNet: no attn_k to break
        write_bad_gguf(tmp_path / "x.gguf", "wrong_shape", _cfg("A"))


# ---------------------------------------------------------------- llama.cpp (CPU)

def _load(path, **kw):
    return llama_reference(model_path=path, n_ctx=256, logits_all=True, verbose=False, flash_attn=True, **kw)


@pytest.mark.parametrize("name,wt", [("A", "f32"), ("A", "q8_0"), ("B", "f32"), ("B", "q8_0"),
                                     ("C", "q8_0"), ("A", "f16"), ("B", "q4_0")])
def test_llama_cpp_runs(tmp_path, name, wt):
    cfg = _cfg(name, weight_type=wt)
    m = _load(write_tiny_gguf(tmp_path / "m.gguf", cfg))
    toks = m.tokenize(b"Hello world, this is a test.", add_bos=False)
    m.eval(toks)
    logits = np.array(m.scores[: m.n_tokens])
    assert logits.shape == (len(toks), cfg.n_vocab)
    assert np.isfinite(logits).all()
    assert logits.std() > 0.1                       # spread out
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert np.median((top2[:, 1] - top2[:, 0]) / np.abs(top2[:, 1])) > 1e-3  # clear argmax
    m.reset()
    gen = []
    for t in m.generate(toks, temp=0.0, top_k=1):
        gen.append(t)
        if len(gen) == 32:
            break
    assert len(set(gen)) >= 3 and len(set(gen[-8:])) > 1, gen  # no single-token collapse


def test_llama_cpp_long_context_and_state(tmp_path):
    """220 tokens stay finite (the recurrence does not blow up) and a batched prefill matches
    token-by-token decoding through the recurrent state."""
    path = write_tiny_gguf(tmp_path / "m.gguf", _cfg("B"))
    toks = np.random.default_rng(0).integers(0, 255, 220).tolist()
    m = _load(path)
    m.eval(toks)
    full = np.array(m.scores[: m.n_tokens])
    assert np.isfinite(full).all() and 0.5 < full[-20:].std() < 3 and np.abs(full).max() < 20
    one = _load(path, n_batch=1, n_ubatch=1)
    one.eval(toks[:24])
    # token-by-token vs one batch: on a GPU other kernels run per batch size (cuBLAS with TF32)
    tol = 1e-2 if os.environ.get("LUCE_TEST_DEVICE", "cpu") == "cpu" else 5e-2
    assert np.abs(np.array(one.scores[:24]) - full[:24]).max() < tol


def test_llama_cpp_loads_mtp_block(tmp_path):
    path = write_tiny_gguf(tmp_path / "m.gguf", _cfg("C", weight_type="q8_0"))
    params = llama_cpp.llama_model_default_params()
    params.load_mtp = True  # else llama.cpp skips the blk.{n_layer}.* tensors
    model = llama_cpp.llama_model_load_from_file(path.encode(), params)
    assert model
    try:
        assert llama_cpp.llama_model_n_layer(model) == 5  # trunk only
    finally:
        llama_cpp.llama_model_free(model)


def test_llama_cpp_rejects_missing_tensor(tmp_path):
    bad = write_bad_gguf(tmp_path / "bad.gguf", "missing_tensor", _cfg("A"))
    with pytest.raises(ValueError):
        llama_cpp.Llama(model_path=bad, n_ctx=256, verbose=False)


@pytest.mark.parametrize("weight_type", ["f32", "q8_0"])
def test_fused_projections_compute_what_separate_ones_do(tmp_path, weight_type):
    """Weights copied into a buffer (use_mmap=False, as on every GPU) fuse [qkv|gate|beta|alpha]
    and [ffn_gate|ffn_up] into one matmul each (weight_fusion.h); mmap'd CPU weights stay separate.
    On a CPU both give the same logits bit for bit: prefill, a verify batch and greedy decoding."""
    from luce_engine import Engine, Model, Sampling

    path = write_tiny_gguf(tmp_path / "f.gguf", TinyConfig(arch="qwen35", n_vocab=256, n_layer=4, head_dim=32,
                                                           seed=3, weight_type=weight_type))
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, 256, 40)]
    runs = []
    for mmap in (True, False):
        model = Model(path, device="cpu", use_mmap=mmap, n_threads=2)   # a CPU property
        assert model._core.info["n_fused"] == (0 if mmap else 7)   # ffn in 4 layers, ssm_in in the 3 DeltaNet ones
        eng = Engine(model, n_ctx=256)
        eng.prefill(prompt)
        first = eng.logits().copy()
        eng.verify([5, 6, 7, 8])
        rows = np.stack([eng.logits(i) for i in range(4)])
        eng.commit(2)
        toks = [eng.step(Sampling()).tokens[0] for _ in range(24)]
        runs.append((first, rows, toks))
    assert np.array_equal(runs[0][0], runs[1][0])
    assert np.array_equal(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2]
