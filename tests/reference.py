"""Shared helpers of the engine tests: the device under test, model files, and llama.cpp as reference.

LUCE_TEST_DEVICE selects our device (default "cpu"); on a GPU the llama.cpp reference offloads
every layer to the same GPU so both sides run the same ggml kernels.
"""
from __future__ import annotations

import contextlib
import os
import numpy as np

DEVICE = os.environ.get("LUCE_TEST_DEVICE", "cpu")
ON_GPU = DEVICE != "cpu"
THREADS = int(os.environ.get("LUCE_TEST_THREADS", "2"))
# Weight type of the tiny models in exactness tests. CUDA runs batched F32 matmuls through cuBLAS in
# TF32 (~1e-3 relative), so a 16-row verify and a 1-row decode part at margins far above the 1e-4
# near-tie bound; quantized weights go through integer dot products (MMVQ/MMQ) on every batch shape.
TINY_WEIGHTS = os.environ.get("LUCE_TEST_TINY_WEIGHTS", "q8_0" if ON_GPU else "f32")
# Heads of the exactness tests' tiny models: ggml's CUDA flash attention takes sizes 40..256 only, and a
# head of 32 would run its attention on the CPU even on a GPU (in a split of its own, never captured).
# They keep 32 on a GPU too, attention on the CPU: with 64 (LUCE_TEST_TINY_HEAD_DIM=64) the H100 run of
# 2026-12-06 put CUDA's one-token (vector) and batch (MMA) attention kernels ~1e-2 apart on these
# flat random models, past the tolerances below (same-shape tree rows 2-5e-4 apart, seeded samples
# parting at tokens 1-13); the SmolLM2 tests cover CUDA attention (check_greedy_divergence).
TINY_HEAD_DIM = int(os.environ.get("LUCE_TEST_TINY_HEAD_DIM", "32"))
# The widest tree (nodes) a test may ask to equal plain decoding token for token on a GPU: up to 8
# rows a verify of the tiny Q8_0 models runs ggml's MMVQ, as a one-token step does, one column at a
# time (the chain tests of 8 rows pass there); from 9 rows ggml's MMQ rounds the flat random logits
# apart (the H100 runs of 2026-12-06: seeded samples and a deep rank-0 tree of 17 nodes parted from
# plain at the same tokens in two runs). Wider trees are checked up to near-ties instead.
EXACT_TREE_NODES = 17 if DEVICE == "cpu" else 8
# Bound on |ours - float64 reference| / max|reference| for F32 draft weights: TF32 on CUDA.
DRAFT_REF_TOL = 5e-3 if ON_GPU else 1e-4

# llama.cpp's ggml_type ids for the cache types we compare
GGML_TYPE_IDS = {"f16": 1, "q4_0": 2, "q8_0": 8}


def smollm2_path() -> str:
    from luce_engine import ModelFileError, default_model_path

    try:
        return default_model_path()
    except ModelFileError:
        if not ON_GPU:
            raise   # a normal install always has it
        import pytest

        pytest.skip("SmolLM2 GGUF not installed on this GPU machine (it cannot be carried there)")


def cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return "amx_tile" in f.read()
    except OSError:
        return False


# Our CPU engine repacks matmul weights as llama.cpp does by default (ggml's CPU_REPACK buffer type),
# so the reference is llama.cpp's default: bit-identical where the types repack. On CPUs with AMX,
# llama.cpp would take its AMX buffer type first (which crashes on the tiny models, see
# llama_plain_kernels), so there both sides run without repacking: conftest.py turns ours off.
REFERENCE_REPACKS = not cpu_has_amx()


def llama_reference(**kwargs):
    """llama_cpp.Llama with the weight layout our tests' engines use (REFERENCE_REPACKS)."""
    import llama_cpp

    return llama_cpp.Llama(**kwargs) if REFERENCE_REPACKS else llama_plain_kernels(**kwargs)


def llama_plain_kernels(**kwargs):
    """llama_cpp.Llama(**kwargs) on ggml's plain CPU kernels.

    llama.cpp repacks weights for its CPU kernels ("extra buffer types": the K-quant repacking, and
    AMX tiles on CPUs that have them), which sum in another order; ggml's plain kernels, which we
    run, then differ by ~1e-3. Without repacking the two are bit-identical. It also keeps the
    reference off llama.cpp's AMX matmul, which crashes on the tiny models' q8_0 shapes (seen on a
    Xeon with AMX, llama-cpp-python 0.3.36)."""
    import llama_cpp

    with llama_without_extra_buffers():
        return llama_cpp.Llama(**kwargs)


@contextlib.contextmanager
def llama_without_extra_buffers():
    """llama-cpp-python's models loaded meanwhile take no extra buffer types (use_extra_bufts off):
    it has no argument for it, so its model defaults are wrapped."""
    import llama_cpp.llama as llama_module

    defaults = llama_module.llama_cpp.llama_model_default_params

    def without_repacking():
        params = defaults()
        params.use_extra_bufts = False
        return params

    llama_module.llama_cpp.llama_model_default_params = without_repacking
    try:
        yield
    finally:
        llama_module.llama_cpp.llama_model_default_params = defaults


def reference_llama(path: str, *, n_ctx: int = 512, cache_type: str = "f16", logits_all: bool = True):
    """llama-cpp-python on the same file, flash attention on (our attention path), same threads."""
    return llama_reference(
        model_path=str(path), n_ctx=n_ctx, n_batch=512, n_ubatch=512, logits_all=logits_all, verbose=False,
        flash_attn=True, n_threads=THREADS, n_threads_batch=THREADS, n_gpu_layers=-1 if ON_GPU else 0,
        type_k=GGML_TYPE_IDS[cache_type], type_v=GGML_TYPE_IDS[cache_type], seed=0,
    )


def reference_logits(ref, tokens) -> np.ndarray:
    """Logits at every position of `tokens` from a fresh llama.cpp context."""
    ref.reset()
    ref.eval(list(tokens))
    return np.array(ref.scores[: len(tokens)], dtype=np.float32)


def reference_greedy(ref, prompt, n: int) -> list[int]:
    """Plain greedy continuation by llama.cpp (argmax of its logits, no sampler chain)."""
    ref.reset()
    ref.eval(list(prompt))
    out = []
    for _ in range(n):
        tok = int(np.argmax(ref.scores[ref.n_tokens - 1]))
        out.append(tok)
        ref.eval([tok])
    return out


def our_greedy(engine, prompt, n: int) -> list[int]:
    engine.truncate(0)
    engine.prefill(prompt)
    return [engine.step().tokens[0] for _ in range(n)]


# On a GPU, K-quant matmuls quantize activations to int8 with kernels that differ by batch size
# (ggml's MMVQ/MMQ, luce's small-batch GEMM): a rounding difference can move an activation across a
# rounding boundary, 1/127 of its block's scale, and a deep random model amplifies it. This bounds
# how far logits of the same tokens in differently shaped batches may differ there, relative to the
# largest (on the CPU every batch shape rounds alike).
KQUANT_GPU_BATCH_SHAPE_RTOL = 3e-2
# A quantized KV cache on a GPU does the same to attention: a one-token step's flash-attention
# kernel quantizes the query to int8 for the dot products with q8_0 / q4_0 keys, a batch's kernel
# dequantizes the keys instead. Bounds per cache type, as for a fresh engine fed the whole context.
QUANT_KV_GPU_BATCH_SHAPE_RTOL = {"f16": 3e-3, "q8_0": 1e-2, "q4_0": 5e-2}


def top2_margin(logits: np.ndarray) -> float:
    """Relative gap between the two largest logits (small = a near-tie that rounding can flip)."""
    a, b = np.sort(logits)[-2:][::-1]
    return float((a - b) / max(abs(a), 1e-6))


def first_divergence(got: list[int], plain: list[int]) -> int | None:
    """The first position where got and plain differ (the shorter length when one is a prefix of
    the other), or None when they are equal."""
    if got == plain:
        return None
    n = min(len(got), len(plain))
    return next((i for i in range(n) if got[i] != plain[i]), n)


def plain_margin(model, prompt: list[int], plain: list[int], k: int, *, cache: str = "f16", n_ctx: int = 512) -> float:
    """Plain decoding's top-2 margin at its token k: a fresh engine's logits after prompt + plain[:k]."""
    from luce_engine import Engine

    eng = Engine(model, n_ctx=n_ctx, cache_type_k=cache, cache_type_v=cache)
    eng.prefill(prompt + plain[:k])
    return top2_margin(eng.logits())


def batch_choices(model, context: list[int], rows: int = 16, n_ctx: int = 512) -> set[int]:
    """The target's greedy choices for the position after `context` when that position is computed
    inside a verify batch of `rows` tokens, at each of its offsets in the batch (what speculation
    computes). A speculative divergence that one of them reproduces was decided by the target's own
    batch computation, not by the speculator; on the CPU every shape gives plain decoding's choice."""
    from luce_engine import Engine

    choices = set()
    for r in range(min(rows, len(context))):
        eng = Engine(model, n_ctx=n_ctx, n_verify_max=rows)
        eng.prefill(context[:len(context) - 1 - r])
        batch = context[len(context) - 1 - r:]
        batch += [batch[-1]] * (rows - len(batch))   # rows after offset r cannot change row r
        choices.add(int(np.argmax(eng.verify(batch, logits=True)[r])))
    return choices


def tree_replay_choices(model, prompt: list[int], steps, capture_layers=(), n_ctx: int = 512,
                        n_verify_max: int = 16) -> dict[int, int]:
    """The target's greedy choice for each position of a tree speculator's output that a step's
    verify chose, from a fresh engine that repeats the speculator's target work: the same capture
    on, the prompt's prefill, then each step's verify_tree and commit_path of its accepted path. The
    cache it reads is the speculator's, row for row, computed apart from its walk: a divergence it
    reproduces was decided by the tree batches' own rounding. steps are (start, tree, path) per step,
    the step's tokens got[start:start + len(path)] (its root first); got[j] is chosen at the node
    whose root path ends at got[j - 1]."""
    from luce_engine import Engine

    eng = Engine(model, n_ctx=n_ctx, n_verify_max=n_verify_max)
    if capture_layers:
        eng.set_capture(list(capture_layers), output=True, ring_size=4096)
    eng.prefill(prompt)
    out = {}
    for start, tree, path in steps:
        choices = eng.verify_tree(list(tree.tokens), list(tree.parents), logits=False, keep_pre_logits=False)
        for k, node in enumerate(path):
            out[start + k + 1] = int(choices[node])
        eng.commit_path(list(path))
    return out


# A greedy divergence on a GPU is accepted where batch_choices reproduces it and plain decoding's
# top-2 margin there is below this (loose: SmolLM2's Q4_1 verify rows differ from one-token steps
# by up to 14% of the largest logit on the H100 / H200, and flips were seen at margins up to 4.4e-2).
GPU_FLIP_MARGIN_MAX = 0.1
# A tree's rows see their ancestors at scattered cache rows, which no chain batch lays out alike: a
# tree's divergence no chain batch reproduces is accepted at a margin below this (the H100 saw one
# at 1.9e-3; the chain's, each reproduced, reached 4.0e-2), or where the same tree verified by a
# replay of the speculator's own batches chooses it (tree_replay_choices; the H100 saw one at 3.2e-2
# that no chain batch made).
GPU_TREE_NEAR_TIE = 1e-2


def check_greedy_divergence(model, prompt: list[int], got: list[int], plain: list[int], rows: int = 16,
                            n_ctx: int = 512, tree: bool = False, replay=None) -> tuple[int, float] | None:
    """None when got == plain; else (position, plain's top-2 margin there) of the first divergence,
    asserting it is a near-tie that the target's batch computation flips (see batch_choices; for a
    tree's output, tree=True, a margin below GPU_TREE_NEAR_TIE also does, and so does replay(j) ==
    got[j]: the speculator's own batches, repeated apart from it, choosing it (tree_replay_choices)).
    On the CPU a divergence fails unless within 1e-4 (every batch shape rounds alike there)."""
    j = first_divergence(got, plain)
    if j is None:
        return None
    assert j < min(len(got), len(plain)), f"one output is a prefix of the other ({len(got)} vs {len(plain)} tokens)"
    margin = plain_margin(model, prompt, plain, j, n_ctx=n_ctx)
    if DEVICE == "cpu":
        assert margin <= 1e-4, f"diverged at token {j} with a clear margin {margin:.3g}"
    else:
        assert margin <= GPU_FLIP_MARGIN_MAX, f"diverged at token {j} with a clear margin {margin:.3g}"
        if tree and margin <= GPU_TREE_NEAR_TIE:
            return j, margin
        if tree and replay is not None and replay(j) == got[j]:
            return j, margin
        choices = batch_choices(model, prompt + plain[:j], rows, n_ctx)
        assert got[j] in choices, (f"diverged at token {j} (margin {margin:.3g}) to {got[j]}, which no verify batch "
                                   f"of {rows} chooses there ({sorted(choices)}): the speculator, not rounding")
    return j, margin
