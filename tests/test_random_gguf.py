"""tools/random_gguf.py: the random-weight files of bench/gpu have the tiny writers' layout (names,
shapes, metadata), the Q4_K_M mix and sizes of the real 27B model, and load in our engine and in
llama.cpp. The tiny presets stand in for the large ones, which share their code."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from luce_engine import DraftModel, Engine, Model, Sampling, Scorer
from reference import DEVICE, THREADS, llama_reference
from tools import random_gguf as R
from tools.tiny_dflash import draft_weights, write_tiny_dflash
from tools.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("random")
    return {p: R.write_random_gguf(d / f"{p}.gguf", p, seed=1) for p in ("qwen35-tiny", "dflash-tiny", "qwen3-tiny")}


def _layout(path):
    r = gguf.GGUFReader(path)
    tensors = [(t.name, tuple(int(x) for x in t.shape)) for t in r.tensors]
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    return r, tensors, meta


def _same_metadata(a: dict, b: dict):
    skip = ("general.name", "general.file_type", "tokenizer.chat_template")
    assert {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in b.items() if k not in skip}


def test_target_and_scorer_have_the_tiny_writer_layout(tmp_path, files):
    for preset in ("qwen35-tiny", "qwen3-tiny"):
        ref = write_tiny_gguf(tmp_path / f"{preset}.gguf", R.PRESETS[preset].model)
        _, got, got_meta = _layout(files[preset])
        _, want, want_meta = _layout(ref)
        assert got == want, preset
        _same_metadata(got_meta, want_meta)


def test_draft_has_the_tiny_dflash_layout(tmp_path, files):
    p = R.PRESETS["dflash-tiny"]
    target = write_tiny_gguf(tmp_path / "t.gguf", p.model)
    ref = write_tiny_dflash(tmp_path / "d.gguf", target, p.draft)
    _, got, got_meta = _layout(files["dflash-tiny"])
    _, want, want_meta = _layout(ref)
    assert got == want
    _same_metadata(got_meta, want_meta)
    names = [n for n, _, _ in draft_weights(p.draft, p.model.n_embd, p.model.n_vocab, len(p.draft.capture))]
    assert [n for n, _ in got] == names


def test_q4_k_m_mix_and_real_sizes():
    specs = {s.name: s for s in R.specs(R.PRESETS["qwen35-27b"])}
    q6 = [i for i in range(64) if specs[f"blk.{i}.ffn_down.weight"].qtype == QT.Q6_K]
    assert q6 == [i for i in range(64) if i < 8 or i >= 56 or (i - 8) % 3 == 2]
    for i in range(64):   # the one attn_v-like tensor of a layer follows ffn_down
        v = specs.get(f"blk.{i}.attn_v.weight") or specs[f"blk.{i}.attn_qkv.weight"]
        assert v.qtype == specs[f"blk.{i}.ffn_down.weight"].qtype
    assert specs["output.weight"].qtype == QT.Q6_K and specs["token_embd.weight"].qtype == QT.Q4_K
    gib = {p: sum(s.nbytes for s in R.specs(R.PRESETS[p])) / 2**30 for p in ("qwen35-27b", "dflash-27b", "qwen3-0.6b")}
    assert gib["qwen35-27b"] == pytest.approx(15.40, abs=0.01)   # Qwen3.6-27B-Q4_K_M.gguf's tensor data
    assert gib["dflash-27b"] == pytest.approx(1.71, abs=0.01)
    assert gib["qwen3-0.6b"] == pytest.approx(1.11, abs=0.01)    # Qwen3-0.6B-BF16.gguf's
    _, meta = R.metadata(R.PRESETS["dflash-27b"], "dflash-27b")
    layers = next(v for k, v, *_ in meta if k == "dflash.target_layers")
    assert layers == [2, 17, 32, 47, 62]   # HF target_layer_ids 1, 16, 31, 46, 61, stored + 1


def test_weights_are_finite_and_deterministic(tmp_path, files):
    again = R.write_random_gguf(tmp_path / "again.gguf", "qwen35-tiny", seed=1)
    assert open(again, "rb").read() == open(files["qwen35-tiny"], "rb").read()
    r = gguf.GGUFReader(files["qwen35-tiny"])
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        assert np.isfinite(w).all(), t.name
        if t.name.endswith("ffn_gate.weight"):   # std 1 / sqrt(fan_in) through the quantizer
            assert np.std(w) * np.sqrt(t.shape[0]) == pytest.approx(1.0, rel=0.15)


def test_files_load_and_run_in_our_engine(files):
    model = Model(files["qwen35-tiny"], device=DEVICE, n_threads=THREADS)
    eng = Engine(model, n_ctx=256, n_verify_max=16)
    out = [t for r in eng.generate(list(range(300, 320)), max_tokens=8, stop_token_ids=(), sampling=Sampling())
           for t in r.tokens]
    assert len(out) == 8 and np.isfinite(eng.logits()).all()
    draft = DraftModel(files["dflash-tiny"], model)
    assert tuple(draft.capture_layers) == (0, 1, 2) and draft.block_size == 16
    scores = Scorer(Model(files["qwen3-tiny"], device=DEVICE, n_threads=THREADS)).score(list(range(100, 400)))
    assert len(scores) == 300 and np.isfinite(scores).all()


def test_llama_cpp_loads_the_target(files):
    llm = llama_reference(model_path=files["qwen35-tiny"], n_ctx=128, n_threads=THREADS, verbose=False, logits_all=True,
                              n_gpu_layers=-1 if DEVICE != "cpu" else 0)
    llm.eval([300, 301, 302])
    assert np.isfinite(np.asarray(llm.scores[2])).all()
