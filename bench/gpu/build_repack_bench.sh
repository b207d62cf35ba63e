#!/usr/bin/env bash
# Builds bench/gpu/repack_bench.cu (issue 17's repacked-Q4_K experiment) with the current kernels
# (engine/native/cuda/small_batch_gemm.cu) into $1 (default .device/bin/repack_bench). The two
# translation units compile in parallel; -split-compile spreads each one's device code over the cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-.device/bin/repack_bench}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-arch=sm_90 -O3 -std=c++17 -split-compile=0)
nvcc "${flags[@]}" -c engine/native/cuda/small_batch_gemm.cu -o "$tmp/cur.o" &
cur=$!
nvcc "${flags[@]}" ${PTXAS_VERBOSE:+-Xptxas -v} -I engine/native/cuda -c bench/gpu/repack_bench.cu -o "$tmp/bench.o"
wait $cur
mkdir -p "$(dirname "$out")"
nvcc -arch=sm_90 "$tmp/bench.o" "$tmp/cur.o" -o "$out"
echo "built $out"
