#!/usr/bin/env bash
# Speculative decoding on the H200 (see ../shared/device/README.md), one run:
#   builds llama-cpp-python with CUDA *and* llama.cpp's tools (llama-cli for draft-dflash), writes the
#   27B-shaped random qwen35 target and its random DFlash draft, runs the exactness tests on cuda:0,
#   profiles decode/verify/draft kernels, then bench_spec.py (luce vs llama-cli at synthetic L).
# Output under $OUT. Start it with setsid/nohup and poll: build + models take ~5 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
M=/tmp/models; mkdir -p $M
# the random models write while ggml builds (disk-bound vs CPU-bound)
( [ -f $M/q27.gguf ] || python3 .device/make_random_gguf.py --arch qwen35 --preset 27b --out $M/q27.gguf
  [ -f $M/q27-dflash.gguf ] || python3 .device/make_random_gguf.py --arch dflash --preset 27b --out $M/q27-dflash.gguf
  [ -z "${WITH_SCORER:-}" ] || [ -f $M/q3-0.6b.gguf ] || python3 .device/make_random_gguf.py --arch qwen3 --preset 0.6b --out $M/q3-0.6b.gguf
) > "$OUT/models.txt" 2>&1 &
models=$!
BUILD_DIR=/tmp/lcpbuild EXTRA_CMAKE_ARGS="-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF" \
  bash .device/build.sh > "$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
echo "build done $(date +%T)"
LUCE_TEST_DEVICE=cuda:0 python3 -c "import llama_cpp, sys, pytest; sys.exit(pytest.main(['tests/test_speculative.py', 'tests/test_speculative_dflash.py', 'tests/test_draft_model.py', 'tests/test_synthetic.py', 'tests/test_tiny_qwen35.py', 'tests/test_engine.py', 'tests/test_parity.py', '-q', '-p', 'no:cacheprovider']))" > "$OUT/exact_cuda.txt" 2>&1
tail -3 "$OUT/exact_cuda.txt"
wait $models; tail -2 "$OUT/models.txt"
python3 bench/gpu/profile_kernels.py --model $M/q27.gguf --draft $M/q27-dflash.gguf --verify ${PROFILE_VERIFY:-16} > "$OUT/profile.txt" 2>&1
grep "==" "$OUT/profile.txt"
python3 bench/bench_spec.py --target $M/q27.gguf --draft $M/q27-dflash.gguf --device cuda:0 --threads 8 --repeats ${SPEC_REPEATS:-3} \
  --llama-cli /tmp/lcpbuild/bin/llama-cli --lengths ${SPEC_LENGTHS:-1.5,3,4,6,8,12} --json "$OUT/spec.json" > "$OUT/spec.txt" 2>&1
tail -13 "$OUT/spec.txt"
# A/B: the same at L=6 with every weight separate (no fused projections)
LUCE_NO_WEIGHT_FUSION=1 python3 bench/bench_spec.py --target $M/q27.gguf --draft $M/q27-dflash.gguf --device cuda:0 \
  --threads 8 --repeats 2 --lengths 6 --json "$OUT/spec_nofuse.json" 2>&1 | tail -4 | head -3
# issue 3's table: decode, prefill and verify cost against llama.cpp on the same file
python3 bench/bench_engine.py --model $M/q27.gguf --device cuda:0 --threads 8 --decode-tokens 64 --repeats 3 \
  --prefill ${Q27_PREFILL:-512,8192} --verify 1,2,4,8,16,32 --json "$OUT/bench_q27.json" > "$OUT/bench_q27.txt" 2>&1
tail -12 "$OUT/bench_q27.txt"
echo "all done $(date +%T)"
