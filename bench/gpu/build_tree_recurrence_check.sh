#!/usr/bin/env bash
# Builds bench/gpu/tree_recurrence_check.cu with the engine's tree kernel and visit planner (here,
# where nvcc is: no GPU needed) into $1 (default .device/bin/tree_recurrence_check). The kernel's file
# takes ggml-cuda's -use_fast_math, as in the engine's build (engine/native/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-.device/bin/tree_recurrence_check}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-arch=sm_90 -O3 -std=c++17 -I engine/native/cuda -I engine/native/src/runtime)
nvcc "${flags[@]}" -use_fast_math -c engine/native/cuda/tree_recurrence.cu -o "$tmp/kernel.o"
nvcc "${flags[@]}" -x cu -c engine/native/src/runtime/tree_nodes.cpp -o "$tmp/plan.o"
nvcc "${flags[@]}" -c bench/gpu/tree_recurrence_check.cu -o "$tmp/check.o"
mkdir -p "$(dirname "$out")"
nvcc -arch=sm_90 "$tmp/check.o" "$tmp/kernel.o" "$tmp/plan.o" -o "$out"
echo "built $out"
