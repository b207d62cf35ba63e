#!/usr/bin/env bash
# Second H200 run of a session (see run_final_h200.sh for the first): no llama.cpp tools, no
# DFlash draft. In order: the scorer's memory plan vs measured buffers (scorer_plan.txt), the
# exactness and PFlash tests on cuda:0 (exact_cuda.txt; SmolLM2 tests skip without its wheel),
# PFlash TTFT at 64K and 32K against both dense prefills (pflash_short.txt), and issue 3's
# decode / prefill / verify-cost table (bench_q27.txt). Results go to $RES as they come.
set -uo pipefail
RES=${RES:-/tmp/res}; mkdir -p "$RES"
export PYTHONUNBUFFERED=1
M=/tmp/models; mkdir -p $M
log() { echo "$(date +%T) $*" | tee -a "$RES/progress.txt"; }
( [ -f $M/q27.gguf ] || python3 .device/make_random_gguf.py --arch qwen35 --preset 27b --out $M/q27.gguf
  [ -f $M/q3-0.6b.gguf ] || python3 .device/make_random_gguf.py --arch qwen3 --preset 0.6b --out $M/q3-0.6b.gguf
) > /tmp/models.txt 2>&1 &
models=$!
log "build start"
bash .device/build.sh > /tmp/build.txt 2>&1 || { tail -40 /tmp/build.txt | tee -a "$RES/progress.txt"; exit 1; }
log "built"
python3 bench/gpu/scorer_plan_probe.py --device cuda:0 > "$RES/scorer_plan.txt" 2>&1
log "probe done"
LUCE_TEST_DEVICE=cuda:0 timeout 420 python3 -c "import llama_cpp, sys, pytest; sys.exit(pytest.main(['tests/test_pflash_scorer.py', 'tests/test_speculative.py', 'tests/test_speculative_dflash.py', 'tests/test_draft_model.py', 'tests/test_synthetic.py', 'tests/test_tiny_qwen35.py', 'tests/test_engine.py', 'tests/test_parity.py', '-q', '-p', 'no:cacheprovider']))" > "$RES/exact_cuda.txt" 2>&1
log "exact: $(tail -1 "$RES/exact_cuda.txt")"
wait $models; log "models: $(tail -1 /tmp/models.txt)"
python3 bench/bench_pflash.py --target $M/q27.gguf --scorer $M/q3-0.6b.gguf --device cuda:0 --threads 8 \
  --lengths 65536,32768 --dense-max 0 --keep 0.05 --json "$RES/pflash_short.json" > "$RES/pflash_short.txt" 2>&1
log "pflash short done"
python3 bench/bench_engine.py --model $M/q27.gguf --device cuda:0 --threads 8 --decode-tokens 64 --repeats 3 \
  --prefill 512,8192 --verify 1,2,4,8,16,32 --json "$RES/bench_q27.json" > "$RES/bench_q27.txt" 2>&1
log "all done"
