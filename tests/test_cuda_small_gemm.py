"""luce's CUDA small-batch GEMM (engine/native/cuda/small_batch_gemm.cu) against a float64 reference.

The weights are random Q4_K / Q6_K / Q8_0 / Q4_1 blocks (every scale and minimum bit pattern occurs), dequantized
by the gguf package; the activations are quantized to int8 per 32 values exactly as the kernel
does (the kernels take them times their scale in f16, and f16 sums), so only float rounding is left. Shapes cover a partial last row tile, a
superblock count that does not divide among the block's warps, every column-tile count, and Q8_0
and Q4_1 rows whose last 256-value step is partial.
Runs with LUCE_TEST_DEVICE=cuda:N on a luce built with its CUDA kernels.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import quants

from luce_engine import _core

DEVICE = os.environ.get("LUCE_TEST_DEVICE", "")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not DEVICE.startswith("cuda"), reason="needs LUCE_TEST_DEVICE=cuda:N")]
BLOCK_BYTES = {QT.Q4_K: 144, QT.Q6_K: 210, QT.Q8_0: 34, QT.Q4_1: 20}
BLOCK_VALUES = {QT.Q4_K: 256, QT.Q6_K: 256, QT.Q8_0: 32, QT.Q4_1: 32}
TYPES = [QT.Q4_K, QT.Q6_K, QT.Q8_0, QT.Q4_1]
TYPE_IDS = ["q4_K", "q6_K", "q8_0", "q4_1"]
# where a block's values start (what precedes them: d, and dmin or m) for the types with an offset term
VALUES_AT = {QT.Q4_K: 16, QT.Q4_1: 4}


def random_blocks(rng: np.random.Generator, qtype: QT, nrows: int, k: int) -> np.ndarray:
    raw = rng.integers(0, 256, size=(nrows, k // BLOCK_VALUES[qtype], BLOCK_BYTES[qtype]), dtype=np.uint8)
    d = rng.uniform(1e-3, 1e-2, size=raw.shape[:2]).astype(np.float16).view(np.uint8).reshape(*raw.shape[:2], 2)
    if qtype == QT.Q8_0:   # d leads the block
        raw[..., 0:2] = d
    elif qtype in (QT.Q4_K, QT.Q4_1):   # d, then dmin (Q4_K) or m (Q4_1, either sign) lead the block
        raw[..., 0:2] = d
        low = 0 if qtype == QT.Q4_K else -1e-1
        raw[..., 2:4] = rng.uniform(low, 1e-1 if low else 1e-2, size=raw.shape[:2]).astype(np.float16).view(np.uint8).reshape(d.shape)
    else:                  # d ends it
        raw[..., 208:210] = d
    return raw.reshape(nrows, -1)


def quantized_activations(x: np.ndarray) -> np.ndarray:
    """x [n, k] after int8 quantization per 32 values (scale amax/127, round to nearest even)."""
    n, k = x.shape
    blocks = x.reshape(n, k // 32, 32)
    d = (np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
    q = np.where(d > 0, np.rint(blocks / np.where(d > 0, d, 1)), 0).astype(np.float32)
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(n, k)


def reference(qtype: QT, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """y [n, nrows] as the kernel computes it, in float64: the weights' quantized values meet the
    int8 activations times their scale rounded to f16; the offset term of Q4_K (-dmin * m per 32
    values) and Q4_1 (m per 32 values) meets the sums of each 32 values of x rounded to f16."""
    weights = quants.dequantize(w, qtype).astype(np.float64)
    x16 = quantized_activations(x).astype(np.float16).astype(np.float64)
    if qtype not in VALUES_AT:
        return x16 @ weights.T
    no_values = w.reshape(w.shape[0], -1, BLOCK_BYTES[qtype]).copy()
    no_values[..., VALUES_AT[qtype]:] = 0        # q = 0 leaves the offset alone
    minimums = quants.dequantize(no_values.reshape(w.shape), qtype).astype(np.float64)
    sums16 = x.reshape(x.shape[0], -1, 32).sum(axis=-1, dtype=np.float32).astype(np.float16).astype(np.float64)
    return x16 @ (weights - minimums).T + sums16 @ minimums[:, ::32].T


def device_index() -> int:
    return int(DEVICE.split(":")[1]) if ":" in DEVICE else 0


def assert_matches_reference(qtype: QT, nrows: int, k: int, n: int, seed: int, geometry=(0, 0, 0)) -> None:
    """Random blocks times n random columns on the kernel: within 2e-4 of the largest output."""
    rng = np.random.default_rng(seed)
    w = random_blocks(rng, qtype, nrows, k)
    x = rng.standard_normal((n, k)).astype(np.float32)
    y = _core.cuda_small_gemm(device_index(), int(qtype), w.tobytes(), nrows, k, x, geometry)
    ref = reference(qtype, w, x)
    assert y.shape == (n, nrows)
    assert np.isfinite(y).all(), "an output was left unwritten (NaN poison)"
    err = np.abs(y - ref).max() / np.abs(ref).max()
    assert err < 2e-4, f"max error {err:.2e} of the largest output"


@pytest.mark.parametrize("qtype", TYPES, ids=TYPE_IDS)
@pytest.mark.parametrize("n", [1, 2, 5, 8, 9, 16, 24, 32])
def test_matches_reference(qtype, n):
    # partial last row tiles of 16 and 32; 11 superblocks over 8 warps
    assert_matches_reference(qtype, nrows=72, k=256 * 11, n=n, seed=100 + n)


@pytest.mark.parametrize("qtype", TYPES, ids=TYPE_IDS)
def test_tall_matrix(qtype):
    """A matrix of 532 row tiles (more blocks than an H200 holds at once)."""
    assert_matches_reference(qtype, nrows=8500, k=256 * 3, n=16, seed=11)


@pytest.mark.parametrize("qtype", TYPES, ids=TYPE_IDS)
@pytest.mark.parametrize("geometry", [(1, 1, 2), (2, 1, 2), (4, 3, 2), (8, 2, 3), (1, 4, 3), (2, 5, 4), (1, 11, 4)],
                         ids=lambda g: "x".join(map(str, g)))
@pytest.mark.parametrize("n", [1, 9])
def test_every_launch_geometry(qtype, geometry, n):
    """Row tiles of 16..128 (the last partial), K splits that meet in the scratch (an uneven cut of 11
    superblocks, down to one each), two to four blocks an SM: each against the reference, computed
    twice on one scratch as the engine reuses it."""
    assert_matches_reference(qtype, nrows=200, k=256 * 11, n=n, seed=7 * n + geometry[1], geometry=geometry)


@pytest.mark.parametrize("qtype", TYPES, ids=TYPE_IDS)
def test_a_column_does_not_depend_on_the_call_width(qtype):
    """With the engine's geometry a token's outputs are the same bits whether it is multiplied alone
    (a decode step) or among 5 or 16 (a verification)."""
    rng = np.random.default_rng(3)
    nrows, k = 9000, 256 * 20   # two row tiles a block for Q4_K
    w = random_blocks(rng, qtype, nrows, k).tobytes()
    x = rng.standard_normal((16, k)).astype(np.float32)
    y16 = _core.cuda_small_gemm(device_index(), int(qtype), w, nrows, k, x)
    y5 = _core.cuda_small_gemm(device_index(), int(qtype), w, nrows, k, x[:5])
    y1 = _core.cuda_small_gemm(device_index(), int(qtype), w, nrows, k, x[:1])
    assert np.array_equal(y1[0], y16[0])
    assert np.array_equal(y5, y16[:5])


@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.Q4_1], ids=["q8_0", "q4_1"])
@pytest.mark.parametrize("k", [64, 192, 576, 2880])
@pytest.mark.parametrize("n", [1, 8, 9, 16])
def test_rows_of_partial_steps(qtype, k, n):
    """Q8_0 and Q4_1 rows of a multiple of 64 values but not of 256 (SmolLM2 and its draft: 576,
    2880): the last 256-value step has 2, 4 or 6 of its 8 blocks; the rest must add nothing and
    never be read past the row (the next row's blocks, or past the tensor's end for the last row)."""
    assert_matches_reference(qtype, nrows=72, k=k, n=n, seed=k + n)


@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.Q4_1], ids=["q8_0", "q4_1"])
@pytest.mark.parametrize("geometry", [(1, 3, 2), (2, 12, 3), (4, 2, 4)], ids=lambda g: "x".join(map(str, g)))
def test_partial_step_in_every_k_split(qtype, geometry):
    """The partial step is the last of the last K split, whatever the split count."""
    assert_matches_reference(qtype, nrows=200, k=2880, n=9, seed=sum(geometry), geometry=geometry)


def test_q8_0_partial_steps_do_not_depend_on_the_call_width():
    """SmolLM2's output matrix (49,152 rows of 576): a token's logits are the same bits alone and
    among 16, as the engine relies on for decode steps against verifies."""
    rng = np.random.default_rng(5)
    nrows, k = 49152, 576
    w = random_blocks(rng, QT.Q8_0, nrows, k).tobytes()
    x = rng.standard_normal((16, k)).astype(np.float32)
    y16 = _core.cuda_small_gemm(device_index(), int(QT.Q8_0), w, nrows, k, x)
    y1 = _core.cuda_small_gemm(device_index(), int(QT.Q8_0), w, nrows, k, x[:1])
    assert np.array_equal(y1[0], y16[0])


def test_rejects_what_it_cannot_run():
    w = random_blocks(np.random.default_rng(0), QT.Q4_K, 16, 256)
    with pytest.raises(Exception, match="multiple of 256"):
        _core.cuda_small_gemm(device_index(), int(QT.Q4_K), w.tobytes(), 16, 255, np.zeros((2, 255), np.float32))
    with pytest.raises(Exception, match="multiple of 256"):   # Q4_K takes whole superblocks only
        _core.cuda_small_gemm(device_index(), int(QT.Q4_K), w.tobytes(), 2, 576, np.zeros((2, 576), np.float32))
    q8 = random_blocks(np.random.default_rng(0), QT.Q8_0, 16, 96)
    with pytest.raises(Exception, match="multiple of 64"):   # an odd block count: rows only 2-byte aligned
        _core.cuda_small_gemm(device_index(), int(QT.Q8_0), q8.tobytes(), 16, 96, np.zeros((2, 96), np.float32))
    with pytest.raises(Exception, match="Q4_K, Q6_K, Q8_0 and Q4_1"):
        _core.cuda_small_gemm(device_index(), int(QT.Q5_K), w.tobytes(), 16, 256, np.zeros((2, 256), np.float32))
