"""luce's CUDA small-batch GEMM (engine/native/cuda/small_batch_gemm.cu) against a float64 reference.

The weights are random Q4_K / Q6_K blocks (every scale and minimum bit pattern occurs), dequantized
by the gguf package; the activations are quantized to int8 per 32 values exactly as the kernel
does (Q4_K's minimums meet the float activations, as in ggml; the f16 kernels:
those in f16, and f16 sums), so only float rounding is left. Shapes cover a partial last row tile, a
superblock count that does not divide among the block's warps, and every column-tile count.
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
BLOCK_BYTES = {QT.Q4_K: 144, QT.Q6_K: 210}
HALF_VARIANTS = {QT.Q4_K: (7, 8, 9, 10, 12), QT.Q6_K: (10, 12)}   # on the f16 kernels (small_batch_gemm.h)


def random_blocks(rng: np.random.Generator, qtype: QT, nrows: int, k: int) -> np.ndarray:
    raw = rng.integers(0, 256, size=(nrows, k // 256, BLOCK_BYTES[qtype]), dtype=np.uint8)
    d = rng.uniform(1e-3, 1e-2, size=raw.shape[:2]).astype(np.float16).view(np.uint8).reshape(*raw.shape[:2], 2)
    if qtype == QT.Q4_K:   # d, dmin lead the block
        raw[..., 0:2] = d
        raw[..., 2:4] = rng.uniform(0, 1e-2, size=raw.shape[:2]).astype(np.float16).view(np.uint8).reshape(d.shape)
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


def reference(qtype: QT, w: np.ndarray, x: np.ndarray, half: bool = False) -> np.ndarray:
    """y [n, nrows] as the kernel computes it, in float64. The int8 kernels: the weights' quantized
    values meet the int8 activations; Q4_K's minimum term (dmin * m per 32 values) meets the float
    x, as in ggml. The f16 kernels (half): they meet the int8 activations times their scale rounded
    to f16; Q4_K's minimums meet the sums of each 32 values of x rounded to f16."""
    weights = quants.dequantize(w, qtype).astype(np.float64)
    if qtype == QT.Q6_K:
        xq = quantized_activations(x)
        return (xq.astype(np.float16).astype(np.float64) if half else xq) @ weights.T
    no_values = w.reshape(w.shape[0], -1, BLOCK_BYTES[qtype]).copy()
    no_values[..., 16:] = 0                      # q = 0 leaves -dmin * m
    minimums = quants.dequantize(no_values.reshape(w.shape), qtype).astype(np.float64)
    if half:
        x16 = quantized_activations(x).astype(np.float16).astype(np.float64)
        sums16 = x.reshape(x.shape[0], -1, 32).sum(axis=-1, dtype=np.float32).astype(np.float16).astype(np.float64)
        return x16 @ (weights - minimums).T + sums16 @ minimums[:, ::32].T
    return quantized_activations(x) @ (weights - minimums).T + x.astype(np.float64) @ minimums.T


def device_index() -> int:
    return int(DEVICE.split(":")[1]) if ":" in DEVICE else 0


def assert_matches_reference(qtype: QT, variant: int, nrows: int, k: int, n: int, seed: int) -> None:
    """Random blocks times n random columns on the kernel: within 2e-4 of the largest output."""
    rng = np.random.default_rng(seed)
    w = random_blocks(rng, qtype, nrows, k)
    x = rng.standard_normal((n, k)).astype(np.float32)
    y = _core.cuda_small_gemm(device_index(), int(qtype), w.tobytes(), nrows, k, x, variant)
    ref = reference(qtype, w, x, half=variant in HALF_VARIANTS[qtype])
    assert y.shape == (n, nrows)
    err = np.abs(y - ref).max() / np.abs(ref).max()
    assert err < 2e-4, f"max error {err:.2e} of the largest output"


@pytest.mark.parametrize("variant", list(range(1, 13)))
@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q6_K], ids=["q4_K", "q6_K"])
@pytest.mark.parametrize("n", [2, 5, 8, 9, 16, 24, 32])
def test_matches_reference(qtype, n, variant):
    # partial last row tiles of 16 and 32; 11 superblocks over 8 warps
    assert_matches_reference(qtype, variant, nrows=72, k=256 * 11, n=n, seed=100 + n)


@pytest.mark.parametrize("nrows", [8500, 16900])
def test_half_kernel_wider_blocks(nrows):
    """Variant 7's Q4_K kernel takes 32 or 64 rows a block on matrices tall enough to keep every SM
    busy with them (how tall depends on the SM count; these two pick 32 and 64 on an H200)."""
    assert_matches_reference(QT.Q4_K, 7, nrows=nrows, k=256 * 3, n=16, seed=nrows)


@pytest.mark.parametrize("variant", [10, 11])
@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q6_K], ids=["q4_K", "q6_K"])
def test_balanced_kernel_shares(qtype, variant):
    """The balanced kernel on a matrix of 532 tiles whose warps' shares straddle tiles: the partial
    sums of a tile's warps add up in the last one to finish."""
    assert_matches_reference(qtype, variant, nrows=8500, k=256 * 3, n=16, seed=11)


def test_rejects_what_it_cannot_run():
    w = random_blocks(np.random.default_rng(0), QT.Q4_K, 16, 256)
    with pytest.raises(Exception, match="multiple of 256"):
        _core.cuda_small_gemm(device_index(), int(QT.Q4_K), w.tobytes(), 16, 255, np.zeros((2, 255), np.float32))
    with pytest.raises(Exception, match="Q4_K and Q6_K"):
        _core.cuda_small_gemm(device_index(), int(QT.Q8_0), w.tobytes(), 16, 256, np.zeros((2, 256), np.float32))
