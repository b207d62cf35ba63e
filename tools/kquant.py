"""Q4_K and Q6_K encoders for test models (the gguf package decodes K-quants but cannot encode them).

Plain round-to-nearest in ggml's block layouts, not llama-quantize's error-minimising search: test
models need valid, reasonably faithful blocks, and the gguf package's decoder checks the layout
(tests/test_tiny_gguf.py). Rows of the input become rows of blocks: [rows, k] float32 (k a multiple
of 256) -> [rows, k / 256 * block bytes] uint8.
"""
from __future__ import annotations

import numpy as np

QK = 256


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def quantize_q4_k(arr: np.ndarray) -> np.ndarray:
    """y = d*sc*q - dmin*m per 32 values; sc, m 6-bit per sub-block, q 4-bit; d, dmin f16."""
    rows, k = arr.shape
    if k % QK:
        raise ValueError(f"Q4_K rows need a multiple of {QK} values, got {k}")
    x = arr.astype(np.float32).reshape(rows, k // QK, 8, 32)
    lo = np.minimum(x.min(axis=-1), 0.0)                   # the minimum term covers negatives only
    scale = (x.max(axis=-1) - lo) / 15.0                    # per sub-block step
    offset = -lo                                            # >= 0
    d = _f16(scale.max(axis=-1) / 63.0)                     # [rows, nb]
    dmin = _f16(offset.max(axis=-1) / 63.0)
    df, dminf = d.astype(np.float32)[..., None], dmin.astype(np.float32)[..., None]
    sc = np.where(df > 0, np.rint(scale / np.where(df > 0, df, 1)), 0).clip(0, 63).astype(np.uint8)
    m = np.where(dminf > 0, np.rint(offset / np.where(dminf > 0, dminf, 1)), 0).clip(0, 63).astype(np.uint8)
    step = (df * sc)[..., None]
    q = np.where(step > 0, np.rint((x + (dminf * m)[..., None]) / np.where(step > 0, step, 1)), 0)
    q = q.clip(0, 15).astype(np.uint8)                      # [rows, nb, 8, 32]

    scales = np.zeros((rows, k // QK, 12), np.uint8)        # ggml's get_scale_min_k4 layout, inverted
    scales[..., 0:4] = sc[..., 0:4] | ((sc[..., 4:8] >> 4) << 6)
    scales[..., 4:8] = m[..., 0:4] | ((m[..., 4:8] >> 4) << 6)
    scales[..., 8:12] = (sc[..., 4:8] & 0xF) | ((m[..., 4:8] & 0xF) << 4)
    chunks = q.reshape(rows, k // QK, 4, 2, 32)             # 64-value chunks: low nibble first 32
    qs = (chunks[..., 0, :] | (chunks[..., 1, :] << 4)).reshape(rows, k // QK, 128)
    blocks = np.concatenate([d.view(np.uint8).reshape(rows, -1, 2), dmin.view(np.uint8).reshape(rows, -1, 2),
                             scales, qs], axis=-1)
    return blocks.reshape(rows, -1)


def quantize_q6_k(arr: np.ndarray) -> np.ndarray:
    """y = d*sc*(q - 32) per 16 values; sc int8 per group, q 6-bit; d f16."""
    rows, k = arr.shape
    if k % QK:
        raise ValueError(f"Q6_K rows need a multiple of {QK} values, got {k}")
    x = arr.astype(np.float32).reshape(rows, k // QK, 16, 16)
    group = np.abs(x).max(axis=-1) / 31.0                   # per group step
    d = _f16(group.max(axis=-1) / 127.0)
    df = d.astype(np.float32)[..., None]
    sc = np.where(df > 0, np.rint(group / np.where(df > 0, df, 1)), 0).clip(-128, 127).astype(np.int8)
    step = (df * sc)[..., None]
    q = np.where(step != 0, np.rint(x / np.where(step != 0, step, 1)), 0) + 32
    q = q.clip(0, 63).astype(np.uint8).reshape(rows, k // QK, 2, 4, 32)   # [h][quarter][l]: v = 128h + 32m + l

    ql = np.zeros((rows, k // QK, 2, 64), np.uint8)
    ql[..., 0:32] = (q[..., 0, :] & 0xF) | ((q[..., 2, :] & 0xF) << 4)
    ql[..., 32:64] = (q[..., 1, :] & 0xF) | ((q[..., 3, :] & 0xF) << 4)
    qh = (q[..., 0, :] >> 4) | ((q[..., 1, :] >> 4) << 2) | ((q[..., 2, :] >> 4) << 4) | ((q[..., 3, :] >> 4) << 6)
    blocks = np.concatenate([ql.reshape(rows, -1, 128), qh.reshape(rows, -1, 64),
                             sc.view(np.uint8).reshape(rows, -1, 16), d.view(np.uint8).reshape(rows, -1, 2)], axis=-1)
    return blocks.reshape(rows, -1)
