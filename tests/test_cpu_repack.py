"""ggml's CPU repacking of matmul weights (luce_model_params.repack_weights, engine/native/src/models/
cpu_repack.h): which weights move, that the results stay those of the same model, and that they are
llama.cpp's own when it repacks too (its default, use_extra_bufts)."""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import Engine, Model
from reference import THREADS, cpu_has_amx, our_greedy, reference_greedy, reference_logits
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

llama_cpp = pytest.importorskip("llama_cpp")

CONFIGS = {
    # Q4_K (repacked on x86 with AVX2) with Q6_K for ffn_down / attn_v / the head (not repacked)
    "llama-q4km": TinyConfig(arch="llama", n_vocab=512, n_embd=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64,
                             n_ff=512, weight_type="q4_k_m", seed=5),
    # Q4_0 with a tied head: the LM head's matmul reads a repacked copy of token_embd
    "qwen3-q4_0-tied": TinyConfig(arch="qwen3", n_vocab=512, n_embd=128, n_layer=2, n_head=4, n_head_kv=2, head_dim=32,
                                  n_ff=256, weight_type="q4_0", tied_output=True, seed=8),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def tiny(request, tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("repack") / f"{request.param}.gguf", CONFIGS[request.param])
    return request.param, path


def repacked_model(path):
    model = Model(path, device="cpu", n_threads=THREADS, repack_weights=True)
    if model.n_repacked == 0:
        pytest.skip("ggml has no repacking kernels for these types on this CPU")
    return model


def prompt(n_vocab: int, n: int = 48) -> list[int]:
    return [int(t) for t in np.random.default_rng(0).integers(0, n_vocab, n)]


def test_the_matmul_weights_move_and_nothing_else(tiny):
    name, path = tiny
    model = repacked_model(path)
    # llama-q4km: 2 layers x (q, k, gate, up) in Q4_K (o, v, down and the head are Q6_K in this mix);
    # qwen3 tied: 2 layers x 7 projections + the head's copy of token_embd
    assert model.n_repacked == {"llama-q4km": 8, "qwen3-q4_0-tied": 15}[name]
    plain = Model(path, device="cpu", n_threads=THREADS, repack_weights=False)
    assert plain.n_repacked == 0
    head_copy = name.endswith("tied")
    assert model.weight_bytes > plain.weight_bytes if head_copy else model.weight_bytes == plain.weight_bytes


def test_same_model_within_rounding(tiny):
    """Repacked and mapped weights give the same model: the kernels sum in another order, which these
    tiny random models amplify to ~1e-2 of the largest logit (llama.cpp's two modes differ alike)."""
    _, path = tiny
    logits = []
    for repack in (True, False):
        model = repacked_model(path) if repack else Model(path, device="cpu", n_threads=THREADS, repack_weights=False)
        eng = Engine(model, n_ctx=256)
        eng.prefill(prompt(model.n_vocab), logits_all=True)
        logits.append(eng.all_logits())
    err = np.abs(logits[0] - logits[1]).max()
    assert 0 < err <= 3e-2 * np.abs(logits[1]).max()


@pytest.mark.skipif(cpu_has_amx(), reason="llama.cpp would put these weights in its AMX buffer type first")
def test_identical_to_llama_cpp_with_its_repacking(tiny):
    """llama.cpp with its default repacking on the same file: the same logits bit for bit, the same
    greedy continuation."""
    _, path = tiny
    model = repacked_model(path)
    ref = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_batch=512, n_ubatch=512, logits_all=True, verbose=False,
                          flash_attn=True, n_threads=THREADS, n_threads_batch=THREADS, n_gpu_layers=0, seed=0)
    p = prompt(model.n_vocab)
    eng = Engine(model, n_ctx=256)
    eng.prefill(p, logits_all=True)
    assert np.array_equal(eng.all_logits(), reference_logits(ref, p))
    assert our_greedy(Engine(model, n_ctx=256), p[:16], 32) == reference_greedy(ref, p[:16], 32)
