#!/usr/bin/env bash
# Builds bench/gpu/small_gemm_bench.cu (here, where nvcc is: no GPU needed) into $1 (default
# .device/bin/small_gemm_bench, carried to the device machine). OLD_REV=<commit> also compiles that
# commit's kernels as the bench's "old" column.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-.device/bin/small_gemm_bench}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-arch=sm_90 -O3 -std=c++17)
objs=("$tmp/new.o")
nvcc "${flags[@]}" -c engine/native/cuda/small_batch_gemm.cu -o "$tmp/new.o" &
old_def=()
if [ -n "${OLD_REV:-}" ]; then
  mkdir -p "$tmp/old"
  for f in small_batch_gemm.cu small_batch_gemm.h small_batch_formats.cuh; do git show "$OLD_REV:engine/native/cuda/$f" > "$tmp/old/$f"; done
  nvcc "${flags[@]}" -Dluce=luce_old -c "$tmp/old/small_batch_gemm.cu" -o "$tmp/old.o" &
  objs+=("$tmp/old.o")
  old_def=(-DOLD_GEMM="\"$tmp/old/small_batch_gemm.h\"")
fi
nvcc "${flags[@]}" -I engine/native/cuda "${old_def[@]}" -c bench/gpu/small_gemm_bench.cu -o "$tmp/bench.o"
wait
mkdir -p "$(dirname "$out")"
nvcc -arch=sm_90 "$tmp/bench.o" "${objs[@]}" -o "$out"
echo "built $out"
