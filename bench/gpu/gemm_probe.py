"""One Q4_K matrix of random blocks times 16 columns on luce's small-batch kernels, once per variant:
a target for Nsight Compute's per-kernel counters (run_small_batch_h200.sh), not a timing.

    ncu --set full -k regex:gemm_ -c 2 python bench/gpu/gemm_probe.py NROWS K VARIANTS   (e.g. 17408 5120 2,7)
"""
from __future__ import annotations

import sys

import numpy as np
from gguf import GGMLQuantizationType as QT

sys.path.insert(0, "tests")
from test_cuda_small_gemm import random_blocks  # noqa: E402

from luce_engine import _core  # noqa: E402


def main() -> int:
    nrows, k, variants = int(sys.argv[1]), int(sys.argv[2]), [int(v) for v in sys.argv[3].split(",")]
    rng = np.random.default_rng(0)
    w = random_blocks(rng, QT.Q4_K, nrows, k).tobytes()
    x = rng.standard_normal((16, k)).astype(np.float32)
    for v in variants:
        _core.cuda_small_gemm(0, int(QT.Q4_K), w, nrows, k, x, v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
