#!/usr/bin/env bash
# the small-batch kernels against float64 on this GPU (tests/test_cuda_small_gemm.py: every format, Q4_1 and partial steps included, ~1 min after build): a short lease's check before the engine uses a new format
need_build || exit 1
device_pytest kernel_test 240 -q tests/test_cuda_small_gemm.py
summary "kernel_test: $(tail -1 "$RES/kernel_test.txt")"
grep -q " passed" "$RES/kernel_test.txt" && ! grep -qE "[0-9]+ (failed|error)" "$RES/kernel_test.txt"
