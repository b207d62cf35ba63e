"""Parity with llama.cpp (llama-cpp-python) on the same GGUF files: logits, greedy continuations,
quantized KV caches. Runs on LUCE_TEST_DEVICE (cpu by default, cuda on the GPU machine)."""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import Engine, Model, UnsupportedModelError
from reference import (DEVICE, THREADS, our_greedy, reference_greedy, reference_llama, reference_logits,
                       smollm2_path, top2_margin)
from tools.tiny_gguf import Q4KM_QWEN35, TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

TINY_CONFIGS = {
    "llama": TinyConfig(arch="llama", n_vocab=512, n_embd=128, n_layer=3, n_head=4, n_head_kv=2, head_dim=32, n_ff=256, seed=1),
    "llama-tied": TinyConfig(arch="llama", n_vocab=384, n_embd=64, n_layer=2, n_head=4, n_head_kv=4, head_dim=16,
                             tied_output=True, seed=2),
    "qwen3": TinyConfig(arch="qwen3", n_vocab=512, n_embd=128, n_layer=3, n_head=4, n_head_kv=2, head_dim=64, n_ff=256,
                        rope_freq_base=1e6, seed=3),
    "qwen3-tied": TinyConfig(arch="qwen3", n_vocab=300, n_embd=64, n_layer=2, n_head=2, n_head_kv=1, head_dim=64,
                             tied_output=True, seed=4),
    # hybrid: DeltaNet + gated attention, partial IMROPE; an MTP block in the file is skipped
    "qwen35": TinyConfig(arch="qwen35", n_vocab=512, n_embd=64, n_layer=4, head_dim=32, seed=1, mtp=True),
    "qwen35-tied": TinyConfig(arch="qwen35", n_vocab=400, n_layer=6, full_attention_interval=3, n_head=2, n_head_kv=1,
                              head_dim=64, ssm_groups=1, ssm_heads=4, tied_output=True, write_recurrent_layers=False,
                              seed=2),
    # the user's format: Q4_K with Q6_K for ffn_down, attn_v / attn_qkv and the head
    "llama-q4km": TinyConfig(arch="llama", n_vocab=512, n_embd=256, n_layer=2, n_head=4, n_head_kv=2, head_dim=64,
                             n_ff=512, weight_type="q4_k_m", seed=5),
    "qwen35-q4km": TinyConfig(**Q4KM_QWEN35, n_vocab=512, seed=6),
    # BF16 weights, as the PFlash scorer Qwen3-0.6B-BF16 ships (tied head)
    "qwen3-bf16": TinyConfig(arch="qwen3", n_vocab=512, n_embd=128, n_layer=2, n_head=4, n_head_kv=2, head_dim=64,
                             n_ff=256, weight_type="bf16", tied_output=True, seed=7),
}


@pytest.fixture(scope="module", params=list(TINY_CONFIGS))
def tiny(request, tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("tiny") / f"{request.param}.gguf", TINY_CONFIGS[request.param])
    return request.param, path


def _prompt(n_vocab: int, n: int = 64, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, n_vocab, n)]


def test_tiny_logits_every_position(tiny):
    name, path = tiny
    model = Model(path, device=DEVICE, n_threads=THREADS)
    prompt = _prompt(model.n_vocab)
    ours = Engine(model, n_ctx=256)
    ours.prefill(prompt, logits_all=True)
    got = ours.all_logits()
    want = reference_logits(reference_llama(path, n_ctx=256), prompt)
    assert got.shape == want.shape == (64, model.n_vocab)
    err = np.abs(got - want).max()
    assert err <= 1e-3 * np.abs(want).max(), f"{name}: max |diff| {err} vs max |logit| {np.abs(want).max()}"


def test_tiny_greedy_64(tiny):
    name, path = tiny
    model = Model(path, device=DEVICE, n_threads=THREADS)
    prompt = _prompt(model.n_vocab, 16, seed=5)
    ours = our_greedy(Engine(model, n_ctx=256), prompt, 64)
    theirs = reference_greedy(reference_llama(path, n_ctx=256), prompt, 64)
    assert ours == theirs


@pytest.mark.parametrize("cache_type", ["q8_0", "q4_0"])
def test_tiny_quantized_cache_matches_llama_cpp(tiny, cache_type):
    """Same quantized cache (with llama.cpp's Hadamard rotation) → the same logits as llama.cpp."""
    name, path = tiny
    model = Model(path, device=DEVICE, n_threads=THREADS)
    prompt = _prompt(model.n_vocab, seed=7)
    if TINY_CONFIGS[name].head_dim % 32:
        # a quantization block would straddle two heads: llama.cpp refuses, and so do we, clearly
        with pytest.raises(UnsupportedModelError, match="head size"):
            Engine(model, n_ctx=256, cache_type_k=cache_type, cache_type_v=cache_type)
        return
    eng = Engine(model, n_ctx=256, cache_type_k=cache_type, cache_type_v=cache_type)
    eng.prefill(prompt, logits_all=True)
    got = eng.all_logits()
    want = reference_logits(reference_llama(path, n_ctx=256, cache_type=cache_type), prompt)
    err = np.abs(got - want).max()
    assert err <= 1e-3 * np.abs(want).max(), f"{name} {cache_type}: max |diff| {err}"


# ---- SmolLM2-135M-Instruct (real weights, Q4_1) --------------------------------------------------

SMOL_PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n<|im_start|>user\n"
    "Write a Python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "<|im_start|>user\nExplain photosynthesis in two sentences.<|im_end|>\n<|im_start|>assistant\n",
]

LONG_TEXT = (
    "The history of computing is a story of abstraction. Early machines were programmed by rewiring "
    "panels; then came stored programs, assemblers, and compilers that let people describe what they "
    "wanted instead of how the hardware should do it. Operating systems hid the details of devices, "
    "networks hid the distance between machines, and high-level languages hid memory management. "
    "Each layer made new applications possible, and each brought new kinds of bugs.\n\n"
    "def merge_sort(items):\n    if len(items) <= 1:\n        return items\n    mid = len(items) // 2\n"
    "    left = merge_sort(items[:mid])\n    right = merge_sort(items[mid:])\n    out = []\n"
    "    while left and right:\n        out.append(left.pop(0) if left[0] <= right[0] else right.pop(0))\n"
    "    return out + left + right\n\n"
    "Today, a single laptop holds more computing power than the machines that sent people to the moon, "
    "and language models run on consumer graphics cards. The questions have shifted from whether a "
    "computer can do something to whether it should, how quickly, and at what cost in energy.\n\n"
    "| year | milestone |\n|------|-----------|\n| 1945 | stored-program design |\n| 1957 | FORTRAN |\n"
    "| 1969 | ARPANET and UNIX |\n| 1981 | the IBM PC |\n| 1991 | the World Wide Web |\n"
)


@pytest.fixture(scope="module")
def smol():
    path = smollm2_path()
    model = Model(path, device=DEVICE, n_threads=THREADS)
    return path, model, reference_llama(path, n_ctx=1024)


def _tokenize(ref, text: str) -> list[int]:
    return ref.tokenize(text.encode(), add_bos=False, special=True)


@pytest.mark.parametrize("i", range(len(SMOL_PROMPTS)))
def test_smollm2_greedy_128_identical(smol, i):
    path, model, ref = smol
    prompt = _tokenize(ref, SMOL_PROMPTS[i])
    ours = our_greedy(Engine(model, n_ctx=512), prompt, 128)
    theirs = reference_greedy(ref, prompt, 128)
    assert ours == theirs, f"first divergence at {next(k for k in range(128) if ours[k] != theirs[k])}"


def test_smollm2_teacher_forced_top1(smol):
    path, model, ref = smol
    tokens = _tokenize(ref, LONG_TEXT)
    assert len(tokens) >= 257, len(tokens)
    tokens = tokens[:257]
    # On the CPU several micro-batches (chunking must not matter). On a GPU, batches of other sizes
    # run other kernels (MMQ tilings, flash-attention splits) whose rounding moves near-ties, so
    # there the prompt goes in llama.cpp's partition (one batch), which gives identical logits.
    eng = Engine(model, n_ctx=512, n_batch=64 if DEVICE == "cpu" else 512)
    eng.prefill(tokens, logits_all=True)
    ours = eng.all_logits()[:256]
    theirs = reference_logits(ref, tokens)[:256]
    agree = float((ours.argmax(1) == theirs.argmax(1)).mean())
    disagree = [(k, top2_margin(theirs[k])) for k in np.nonzero(ours.argmax(1) != theirs.argmax(1))[0]]
    assert agree >= 0.99, f"top-1 agreement {agree:.4f}; disagreements (pos, margin): {disagree}"


@pytest.mark.parametrize("cache_type", ["q8_0", "q4_0"])
def test_smollm2_quantized_cache_greedy(smol, cache_type):
    path, model, _ = smol
    ref = reference_llama(path, n_ctx=512, cache_type=cache_type)
    prompt = _tokenize(ref, SMOL_PROMPTS[1])
    ours = our_greedy(Engine(model, n_ctx=512, cache_type_k=cache_type, cache_type_v=cache_type), prompt, 64)
    theirs = reference_greedy(ref, prompt, 64)
    assert ours == theirs
