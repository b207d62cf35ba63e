"""Tests for tools/tiny_dflash.py (tiny DFlash draft GGUFs, both dialects) and the numpy draft
reference tests/dflash_reference.py, including parity with llama.cpp's own `dflash` graph."""
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gguf
import numpy as np
import pytest

import dflash_reference as R
from tools.tiny_dflash import (BAD_DRAFT_KINDS, TinyDraftConfig, default_capture, file_name, main,
                               target_info, write_bad_draft, write_tiny_dflash)
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

TARGET_CFG = TinyConfig(arch="qwen3", n_layer=4, head_dim=16, seed=3)
CAPTURE = (0, 1, 2)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("tgt") / "target.gguf", TARGET_CFG)


def _kv(path):
    r = gguf.GGUFReader(path)
    return r, {k: f.contents() for k, f in r.fields.items()}


def _tensors(reader):
    return {t.name: t for t in reader.tensors}


def _data(t):
    return np.asarray(t.data).copy()


def _feats(draft, c, seed=1):
    return np.random.default_rng(seed).standard_normal((c, draft.fc.shape[1]))


# ---------------------------------------------------------------- writer: layout

def test_deterministic_for_seed(tmp_path, target):
    for conv in ("llama", "lucebox"):
        a = write_tiny_dflash(tmp_path / f"{conv}a.gguf", target, TinyDraftConfig(convention=conv, seed=5))
        b = write_tiny_dflash(tmp_path / f"{conv}b.gguf", target, TinyDraftConfig(convention=conv, seed=5))
        c = write_tiny_dflash(tmp_path / f"{conv}c.gguf", target, TinyDraftConfig(convention=conv, seed=6))
        assert a == str(tmp_path / f"{conv}a.gguf")
        assert Path(a).read_bytes() == Path(b).read_bytes()
        assert Path(a).read_bytes() != Path(c).read_bytes()
        assert Path(a).stat().st_size == Path(c).stat().st_size


def test_target_config_or_path_same_file(tmp_path, target):
    cfg = TinyDraftConfig(capture=CAPTURE)
    a = write_tiny_dflash(tmp_path / "a.gguf", target, cfg)
    b = write_tiny_dflash(tmp_path / "b.gguf", TARGET_CFG, cfg)
    assert Path(a).read_bytes() == Path(b).read_bytes()
    t = target_info(target)
    assert (t.arch, t.n_embd, t.n_vocab, t.n_layer) == ("qwen3", 64, 256, 4)


def _expected_shapes(cfg, E, Nf, ffn_norm="ffn_norm", fc="fc.weight", hnorm="enc.output_norm.weight"):
    D, Hq, Hkv, F = cfg.head_dim, cfg.n_head, cfg.n_head_kv, cfg.n_ff
    exp = {fc: [Nf * E, E], hnorm: [E], "output_norm.weight": [E]}
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        exp.update({
            p + "attn_norm.weight": [E], p + "attn_q.weight": [E, Hq * D], p + "attn_k.weight": [E, Hkv * D],
            p + "attn_v.weight": [E, Hkv * D], p + "attn_output.weight": [Hq * D, E],
            p + "attn_q_norm.weight": [D], p + "attn_k_norm.weight": [D], p + f"{ffn_norm}.weight": [E],
            p + "ffn_gate.weight": [E, F], p + "ffn_up.weight": [E, F], p + "ffn_down.weight": [F, E],
        })
    return exp


def _common_keys(a, cfg, E, V):
    return {
        "general.architecture": a, f"{a}.context_length": cfg.n_ctx_train, f"{a}.embedding_length": E,
        f"{a}.block_count": cfg.n_layer, f"{a}.feed_forward_length": cfg.n_ff,
        f"{a}.attention.head_count": cfg.n_head, f"{a}.attention.head_count_kv": cfg.n_head_kv,
        f"{a}.attention.key_length": cfg.head_dim, f"{a}.attention.value_length": cfg.head_dim,
        f"{a}.rope.dimension_count": cfg.head_dim, f"{a}.vocab_size": V,
    }


@pytest.mark.parametrize("wt,qname", [("f32", "F32"), ("f16", "F16"), ("q8_0", "Q8_0")])
def test_llama_keys_and_shapes(tmp_path, target, wt, qname):
    cfg = TinyDraftConfig(capture=CAPTURE, weight_type=wt, block_size=16)
    r, kv = _kv(write_tiny_dflash(tmp_path / "d.gguf", target, cfg))
    E, V = 64, 256
    for k, v in _common_keys("dflash", cfg, E, V).items():
        assert kv[k] == v, k
    assert kv["dflash.block_size"] == 16
    assert kv["dflash.target_layers"] == [1, 2, 3]                 # L = i + 1
    assert r.fields["dflash.target_layers"].types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]
    assert kv["tokenizer.ggml.mask_token_id"] == V - 2
    assert r.fields["tokenizer.ggml.mask_token_id"].types == [gguf.GGUFValueType.UINT32]
    assert kv["dflash.rope.freq_base"] == pytest.approx(cfg.rope_freq_base)
    assert kv["dflash.attention.layer_norm_rms_epsilon"] == pytest.approx(cfg.rms_eps)
    assert kv["tokenizer.ggml.model"] == "gpt2" and len(kv["tokenizer.ggml.tokens"]) == V
    # nothing of the other dialect, no optional keys by default
    assert not [k for k in kv if ".dflash." in k or "sliding_window" in k or "causal" in k
                or "dimension_sections" in k]
    shapes = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    assert shapes == _expected_shapes(cfg, E, 3)
    assert "token_embd.weight" not in shapes and "output.weight" not in shapes
    for t in r.tensors:
        assert t.tensor_type.name == (qname if len(t.shape) == 2 else "F32"), t.name


@pytest.mark.parametrize("arch_name,spelling,ffn", [
    (None, "dot", None), ("qwen35-dflash-draft", "underscore", "ffn_norm"), ("dflash-draft", "underscore", None)])
def test_lucebox_keys_and_shapes(tmp_path, target, arch_name, spelling, ffn):
    cfg = TinyDraftConfig(convention="lucebox", arch_name=arch_name, fc_spelling=spelling, ffn_norm_name=ffn,
                          capture=CAPTURE, mask_token_id=7)
    r, kv = _kv(write_tiny_dflash(tmp_path / "d.gguf", target, cfg))
    a = arch_name or "dflash-draft"
    E, V = 64, 256
    for k, v in _common_keys(a, cfg, E, V).items():
        assert kv[k] == v, k
    assert kv[f"{a}.attention.causal"] is False
    assert kv[f"{a}.dflash.block_size"] == cfg.block_size
    assert kv[f"{a}.dflash.mask_token_id"] == 7
    assert kv[f"{a}.dflash.target_layer_ids"] == [0, 1, 2]         # id = i
    assert r.fields[f"{a}.dflash.target_layer_ids"].types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]
    assert kv[f"{a}.dflash.n_target_features"] == 3 * E
    assert "tokenizer.ggml.mask_token_id" not in kv and f"{a}.target_layers" not in kv
    fc, hn = (("dflash.fc.weight", "dflash.hidden_norm.weight") if spelling == "dot"
              else ("dflash_fc.weight", "dflash_hidden_norm.weight"))
    shapes = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    assert shapes == _expected_shapes(cfg, E, 3, ffn or "post_attention_norm", fc, hn)


def test_same_weights_in_both_conventions(tmp_path, target):
    kw = dict(capture=CAPTURE, seed=11, weight_type="q8_0")
    ra, _ = _kv(write_tiny_dflash(tmp_path / "a.gguf", target, TinyDraftConfig(**kw)))
    lcfg = TinyDraftConfig(convention="lucebox", fc_spelling="underscore", **kw)
    rb, _ = _kv(write_tiny_dflash(tmp_path / "b.gguf", target, lcfg))
    ta, tb = _tensors(ra), _tensors(rb)
    assert len(ta) == len(tb)
    for name, t in ta.items():
        u = tb[file_name(lcfg, name)]
        assert t.tensor_type == u.tensor_type and list(t.shape) == list(u.shape), name
        assert np.array_equal(_data(t), _data(u)), name
    # same order of tensors in the file as well
    assert [file_name(lcfg, t.name) for t in ra.tensors] == [t.name for t in rb.tensors]


def test_own_token_embd_and_swa(tmp_path, target):
    base = _tensors(gguf.GGUFReader(write_tiny_dflash(tmp_path / "a.gguf", target, TinyDraftConfig())))
    cfg = TinyDraftConfig(own_token_embd=True, sliding_window=5)
    r, kv = _kv(write_tiny_dflash(tmp_path / "b.gguf", target, cfg))
    t = _tensors(r)
    assert [int(x) for x in t["token_embd.weight"].shape] == [64, 256] and r.tensors[-1].name == "token_embd.weight"
    for name, u in base.items():  # drawn last: every other tensor is unchanged
        assert np.array_equal(_data(u), _data(t[name])), name
    assert kv["dflash.attention.sliding_window"] == 5
    assert kv["dflash.attention.sliding_window_pattern"] == [True, False]  # default: all but the last layer
    assert r.fields["dflash.attention.sliding_window_pattern"].types == [gguf.GGUFValueType.ARRAY,
                                                                         gguf.GGUFValueType.BOOL]
    _, kv = _kv(write_tiny_dflash(tmp_path / "c.gguf", target, TinyDraftConfig(
        convention="lucebox", n_layer=3, sliding_window=4, swa_pattern=(False, True, True))))
    assert kv["dflash-draft.attention.sliding_window"] == 4
    assert kv["dflash-draft.attention.sliding_window_pattern"] == [False, True, True]


def test_default_capture():
    assert default_capture(2) == (0,)
    assert default_capture(4) == (0, 1, 2)
    assert default_capture(36) == (0, 17, 34)
    with pytest.raises(ValueError):
        default_capture(1)


@pytest.mark.parametrize("bad", [
    dict(capture=(0, 3)), dict(capture=(-1, 0)), dict(capture=(1, 0)), dict(capture=()),
    dict(mask_token_id=256), dict(convention="gguf"), dict(convention="lucebox", arch_name="dflash"),
    dict(arch_name="dflash-draft"), dict(ffn_norm_name="post_attention_norm"), dict(n_head_kv=3),
    dict(weight_type="q4_0"), dict(swa_pattern=(True, False)), dict(sliding_window=4, swa_pattern=(True,)),
    dict(convention="lucebox", rope_sections=(8, 0, 0, 0)), dict(rope_sections=(4, 0, 0, 0)),
    dict(n_ff=100, weight_type="q8_0"),
])
def test_invalid_configs(tmp_path, target, bad):
    with pytest.raises(ValueError):
        write_tiny_dflash(tmp_path / "x.gguf", target, TinyDraftConfig(**bad))


@pytest.mark.parametrize("conv", ["llama", "lucebox"])
def test_bad_drafts(tmp_path, target, conv):
    cfg = TinyDraftConfig(convention=conv, capture=CAPTURE)
    a = "dflash" if conv == "llama" else "dflash-draft"
    cap_key = f"{a}.target_layers" if conv == "llama" else f"{a}.dflash.target_layer_ids"
    good_r, good = _kv(write_tiny_dflash(tmp_path / "good.gguf", target, cfg))
    fc = file_name(cfg, "fc.weight")
    for kind in BAD_DRAFT_KINDS:
        r, kv = _kv(write_bad_draft(tmp_path / f"{kind}.gguf", kind, target, cfg))
        t = _tensors(r)
        if kind == "embd_mismatch":
            assert kv[f"{a}.embedding_length"] == 96
            assert [int(x) for x in t[fc].shape] == [3 * 96, 96]
            assert [int(x) for x in t["output_norm.weight"].shape] == [96]
        elif kind == "capture_out_of_range":
            assert kv[cap_key] == (good[cap_key][:2] + [good[cap_key][2] + 2])  # i = n_layer = 4
        elif kind == "fc_width":
            assert [int(x) for x in t[fc].shape] == [3 * 64 + 32, 64]
            with pytest.raises(ValueError, match="fc input width"):
                R.load_draft(str(tmp_path / f"{kind}.gguf"))
        elif kind == "missing_capture_key":
            assert cap_key not in kv and set(good) - set(kv) == {cap_key}
        elif kind == "mask_out_of_range":
            mk = "tokenizer.ggml.mask_token_id" if conv == "llama" else f"{a}.dflash.mask_token_id"
            assert kv[mk] == 256
        if kind not in ("embd_mismatch", "fc_width"):
            assert {n: list(x.shape) for n, x in t.items()} == {x.name: list(x.shape) for x in good_r.tensors}
    with pytest.raises(ValueError):
        write_bad_draft(tmp_path / "x.gguf", "nope", target, cfg)


def test_cli(tmp_path, target, capsys):
    out = tmp_path / "cli.gguf"
    main(["--target", target, "--out", str(out), "--convention", "lucebox", "--capture", "0,2",
          "--sliding-window", "3", "--swa-pattern", "1,0", "--seed", "4"])
    assert "cli.gguf" in capsys.readouterr().out
    ref = write_tiny_dflash(tmp_path / "api.gguf", target, TinyDraftConfig(
        convention="lucebox", capture=(0, 2), sliding_window=3, swa_pattern=(True, False), seed=4))
    assert out.read_bytes() == Path(ref).read_bytes()
    main(["--target", target, "--out", str(tmp_path / "bad.gguf"), "--bad", "fc_width"])
    assert (tmp_path / "bad.gguf").exists()


# ---------------------------------------------------------------- reference

@pytest.fixture(scope="module")
def pair(tmp_path_factory, target):
    """The same weights in both dialects (lucebox with the underscore fc spelling)."""
    d = tmp_path_factory.mktemp("pair")
    kw = dict(capture=CAPTURE, seed=2, block_size=8, sliding_window=3, swa_pattern=(True, False))
    a = write_tiny_dflash(d / "llama.gguf", target, TinyDraftConfig(**kw))
    b = write_tiny_dflash(d / "lucebox.gguf", target, TinyDraftConfig(
        convention="lucebox", arch_name="qwen35-dflash-draft", fc_spelling="underscore", **kw))
    return R.load_draft(a), R.load_draft(b), R.load_target_head(target)


def test_reference_reads_both_dialects(pair):
    la, lb, _ = pair
    assert (la.convention, lb.convention) == ("llama", "lucebox")
    assert la.capture == lb.capture == CAPTURE
    assert la.capture_file == (1, 2, 3) and lb.capture_file == (0, 1, 2)
    assert la.mask_token_id == lb.mask_token_id == 254
    assert la.block_size == lb.block_size == 8
    assert [L.is_swa for L in la.layers] == [L.is_swa for L in lb.layers] == [True, False]
    assert la.sliding_window == lb.sliding_window == 3
    assert la.causal is None and lb.causal is False
    assert la.fc.dtype == np.float64 and la.fc.shape == (64, 192)


@pytest.mark.parametrize("c", [1, 12])
def test_reference_same_logits_both_dialects(pair, c):
    la, lb, th = pair
    F = _feats(la, c)
    toks = R.noise_block(65, la.mask_token_id, la.block_size)
    a, b = R.draft_logits(la, th, F, toks), R.draft_logits(lb, th, F, toks)
    assert a.shape == (8, 256)
    assert np.array_equal(a, b)


def test_reference_sane(pair):
    la, _, th = pair
    F = _feats(la, 10)
    toks = R.noise_block(65, la.mask_token_id, 8)
    lg = R.draft_logits(la, th, F, toks)
    assert np.isfinite(lg).all() and lg.std() > 0.3
    assert len(set(np.argmax(lg, axis=1).tolist())) >= 2
    hid = R.draft_logits(la, th, F, toks, return_hidden=True)
    assert hid.shape == (8, 64) and np.allclose(hid @ th.output.T, lg)
    kv = R.context_kv(la, F, np.arange(10))
    assert len(kv) == 2 and kv[0][0].shape == kv[0][1].shape == (10, 2, 16)
    with pytest.raises(ValueError):
        R.draft_logits(la, th, F[:, :-1], toks)
    # the features matter, and in list order
    assert not np.allclose(lg, R.draft_logits(la, th, F[:, np.r_[64:128, 0:64, 128:192]], toks))


def test_reference_position_shift_invariant(pair):
    la, _, th = pair
    F = _feats(la, 9)
    toks = R.noise_block(3, la.mask_token_id, 8)
    base = R.draft_logits(la, th, F, toks)
    for off in (1, 57, 1000):
        assert np.abs(R.draft_logits(la, th, F, toks, pos_offset=off) - base).max() < 1e-9


def test_reference_window_is_design_b(pair):
    # design (A) with a context window W equals design (B): window rows at positions 0..W-1
    la, _, th = pair
    F = _feats(la, 20)
    toks = R.noise_block(3, la.mask_token_id, 8)
    a = R.draft_logits(la, th, F, toks, ctx_window=6)
    b = R.draft_logits(la, th, F[-6:], toks)
    assert np.abs(a - b).max() < 1e-9
    assert np.array_equal(R.draft_logits(la, th, F, toks, ctx_window=20), R.draft_logits(la, th, F, toks))


def test_reference_non_causal_and_swa(pair, tmp_path, target):
    la, _, th = pair
    F = _feats(la, 10)
    toks = R.noise_block(3, la.mask_token_id, 8)
    other = list(toks)
    other[5] = 9
    a, b = R.draft_logits(la, th, F, toks), R.draft_logits(la, th, F, other)
    assert not np.allclose(a[0], b[0])                     # row 0 sees a later block token
    ca, cb = (R.draft_logits(la, th, F, t, causal=True) for t in (toks, other))
    assert np.array_equal(ca[:5], cb[:5]) and not np.allclose(ca[5], cb[5])
    # SWA layer 0 (window 3): context row 0 is out of every block query's window there,
    # but layer 1 (full attention) still sees it
    F2 = F.copy()
    F2[0] += 1.0
    assert not np.allclose(R.draft_logits(la, th, F2, toks), a)
    all_swa = R.load_draft(write_tiny_dflash(tmp_path / "s.gguf", target, TinyDraftConfig(
        capture=CAPTURE, seed=2, sliding_window=3, swa_pattern=(True, True))))
    assert np.array_equal(R.draft_logits(all_swa, th, F2, toks), R.draft_logits(all_swa, th, F, toks))
    F3 = F.copy()
    F3[-2] += 1.0   # position 8: within the window of block row 0 (position 10)
    assert not np.allclose(R.draft_logits(all_swa, th, F3, toks)[0], R.draft_logits(all_swa, th, F, toks)[0])


def test_reference_head_resolution(tmp_path, target):
    th = R.load_target_head(target)
    plain = R.load_draft(write_tiny_dflash(tmp_path / "a.gguf", target, TinyDraftConfig(capture=CAPTURE)))
    own = R.load_draft(write_tiny_dflash(tmp_path / "b.gguf", target, TinyDraftConfig(capture=CAPTURE,
                                                                                       own_token_embd=True)))
    emb, head = R.resolve_head(plain, th)
    assert emb is th.token_embd and head is th.output and not np.array_equal(th.output, th.token_embd)
    emb, head = R.resolve_head(own, th)
    assert emb is own.token_embd and head is own.token_embd
    with pytest.raises(ValueError):
        R.resolve_head(plain, None)


# ---------------------------------------------------------------- llama.cpp

_LLAMA_RUNNER = r'''
import ctypes, json, sys
import numpy as np
import llama_cpp as L

spec = json.loads(sys.argv[1])
L.llama_backend_init()
mp = L.llama_model_default_params()
mp.n_gpu_layers = 0
mp.vocab_only = False

def load(path):
    return L.llama_model_load_from_file(path.encode(), mp)

def ctx_params(other=None):
    p = L.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_threads, p.n_threads_batch = 256, 64, 64, 2, 2
    p.type_k = p.type_v = 0            # F32 KV cache
    p.flash_attn_type = 0              # off
    p.swa_full = True
    if other is not None:
        p.ctx_other = other
    return p

result = {}
if spec["mode"] == "load":
    for key, path in spec["paths"].items():
        m = load(path)
        if not m:
            result[key] = None
            continue
        v = L.llama_model_get_vocab(m)
        result[key] = dict(n_embd=L.llama_model_n_embd(m), n_layer=L.llama_model_n_layer(m),
                           n_vocab=L.llama_vocab_n_tokens(v))
        L.llama_model_free(m)
else:  # run: inject features, decode a noise block, save the block logits
    mt = load(spec["target"])
    ct = L.llama_init_from_model(mt, ctx_params())
    for case in spec["cases"]:
        md = load(case["draft"])
        cd = L.llama_init_from_model(md, ctx_params(ct))
        L.llama_set_causal_attn(cd, False)
        feats = np.load(case["feats"]).astype(np.float32)
        off = case["pos_offset"]
        b = L.llama_batch_ext_init(cd)
        rows = [np.ascontiguousarray(r) for r in feats]
        for p, row in enumerate(rows):
            idx = L.llama_batch_ext_add_embd(b, 0, L.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                                                1, row.shape[0]))
            assert idx >= 0, idx
            pos = (L.llama_pos * 4)(p + off, p + off, p + off, 0)   # M-RoPE drafts read 4 slots
            assert L.llama_batch_ext_set_pos(b, idx, pos)
        assert L.llama_process(cd, L.LLAMA_PROCESS_TYPE_DECODE, b) == 0
        L.llama_batch_ext_clear(b)
        c = len(rows)
        for j, t in enumerate(case["tokens"]):
            idx = L.llama_batch_ext_add_token(b, 0, t)
            pos = L.llama_pos(c + j + off)
            assert L.llama_batch_ext_set_pos(b, idx, ctypes.byref(pos))
            assert L.llama_batch_ext_set_output_logits(b, idx, True)
        assert L.llama_process(cd, L.LLAMA_PROCESS_TYPE_DECODE, b) == 0
        V = L.llama_vocab_n_tokens(L.llama_model_get_vocab(mt))
        out = np.array([np.ctypeslib.as_array(L.llama_get_logits_ith(cd, j), shape=(V,))
                        for j in range(len(case["tokens"]))])
        np.save(case["out"], out)
        L.llama_batch_ext_free(b)
        L.llama_free(cd)
        L.llama_model_free(md)
    result = "ok"
print("RESULT " + json.dumps(result))
'''


def _llama(spec, timeout=60):
    """Run llama.cpp in a subprocess (a crash fails the test instead of killing pytest)."""
    p = subprocess.run([sys.executable, "-c", _LLAMA_RUNNER, json.dumps(spec)], capture_output=True,
                       text=True, timeout=timeout)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    assert p.returncode == 0 and line, f"llama.cpp subprocess failed (rc {p.returncode}):\n{p.stderr[-3000:]}"
    return json.loads(line[0][len("RESULT "):])


def test_llama_cpp_loads_dflash(tmp_path, target):
    pytest.importorskip("llama_cpp")
    paths = {
        "own_embd": write_tiny_dflash(tmp_path / "a.gguf", target, TinyDraftConfig(own_token_embd=True)),
        "plain_swa_q8": write_tiny_dflash(tmp_path / "b.gguf", target, TinyDraftConfig(
            capture=CAPTURE, sliding_window=4, weight_type="q8_0", rope_sections=(8, 0, 0, 0))),
        "lucebox": write_tiny_dflash(tmp_path / "c.gguf", target, TinyDraftConfig(convention="lucebox",
                                                                                   own_token_embd=True)),
    }
    res = _llama({"mode": "load", "paths": paths})
    assert res["own_embd"] == {"n_embd": 64, "n_layer": 2, "n_vocab": 256}
    assert res["plain_swa_q8"] == {"n_embd": 64, "n_layer": 2, "n_vocab": 256}
    assert res["lucebox"] is None   # llama.cpp 0.3.36 knows no dflash-draft arch


def test_llama_cpp_parity(tmp_path, target):
    """llama.cpp's own dflash graph (KV injection + non-causal noise block, target head through
    ctx_other) against the numpy reference. F32 weights and F32 KV cache: agreement ~1e-6."""
    pytest.importorskip("llama_cpp")
    th = R.load_target_head(target)
    cases, refs = [], []
    variants = [
        ("plain", TinyDraftConfig(capture=CAPTURE), 0, 10),
        ("swa_shift", TinyDraftConfig(capture=CAPTURE, n_layer=3, sliding_window=3, seed=4,
                                      swa_pattern=(True, False, True), rope_sections=(8, 0, 0, 0)), 21, 12),
        ("one_capture_b16", TinyDraftConfig(capture=(2,), block_size=16, rope_freq_base=1e6, seed=9), 0, 1),
        ("own_embd", TinyDraftConfig(capture=(0, 2), own_token_embd=True, seed=5), 3, 5),
    ]
    for name, cfg, off, c in variants:
        path = write_tiny_dflash(tmp_path / f"{name}.gguf", target, cfg)
        dm = R.load_draft(path)
        F = _feats(dm, c, seed=len(cases))
        np.save(tmp_path / f"{name}.npy", F)
        toks = R.noise_block(65 + len(cases), dm.mask_token_id, dm.block_size)
        refs.append(R.draft_logits(dm, th, F, toks, pos_offset=off))
        cases.append(dict(draft=path, feats=str(tmp_path / f"{name}.npy"), tokens=toks, pos_offset=off,
                          out=str(tmp_path / f"{name}.out.npy")))
    assert _llama({"mode": "run", "target": target, "cases": cases}) == "ok"
    for (name, *_), case, ref in zip(variants, cases, refs):
        got = np.load(case["out"])
        assert got.shape == ref.shape, name
        err = np.abs(got - ref).max()
        assert err < 1e-4 * max(1.0, np.abs(ref).max()), (name, err)
