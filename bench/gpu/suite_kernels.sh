#!/usr/bin/env bash
# the small-batch GEMM alone on the 27B's matrix shapes: every launch geometry, 1 / 4 / 16 / 24 / 32 columns, GB/s against the copy ceiling
# The binary: $KERNEL_BENCH if set (e.g. one built here with an earlier commit's kernels as the
# "old" column: OLD_REV=<commit> bash bench/gpu/build_small_gemm_bench.sh, carried in .device/bin),
# else built on the machine from this tree.
bin=${KERNEL_BENCH:-}
[ -z "$bin" ] && [ -x .device/bin/small_gemm_bench ] && bin=.device/bin/small_gemm_bench
if [ -z "$bin" ]; then
  bin=/tmp/small_gemm_bench
  bash bench/gpu/build_small_gemm_bench.sh "$bin" > "$RES/kernels_build.txt" 2>&1 || { summary "kernels: build FAILED"; exit 1; }
fi
"$bin" "$RES/kernels.csv" > "$RES/kernels.txt" 2>&1 || { summary "kernels: FAILED (kernels.txt)"; exit 1; }
summary "kernels: $(grep -E '^copy ceiling' "$RES/kernels.txt")"
summary "$(sed -n '/^shape /,$p' "$RES/kernels.txt")"
