#!/usr/bin/env bash
# Issue 3's bar in one H200 run of about 8 minutes, with the defaults as shipped: builds, writes the
# 27B-shaped random Q4_K_M target, then the small-batch kernels against their float64 reference
# (gemm_test.txt); steady verify costs with our kernels on ggml's stream (the default) and on their
# own (check_q27.txt); decode / prefill / verify cost against llama.cpp (bench_q27.txt); the
# exactness suite on cuda:0 (exact_cuda.txt); with REPLAY=1 the table and the suite again with
# rollback by replay (*_replay.txt). Run it as `RES=$OUT bash bench/gpu/run_issue3_h200.sh`.
set -uo pipefail
. bench/gpu/h200_steps.sh
write_models qwen35 > /tmp/models.txt 2>&1 &
models=$!
log "build start"
LUCE_CUDA_ARCHITECTURES=90 bash .device/build.sh > /tmp/build.txt 2>&1 || { tail -60 /tmp/build.txt | tee -a "$RES/progress.txt"; exit 1; }
log "built"
LUCE_TEST_DEVICE=cuda:0 timeout 300 python3 -c "import llama_cpp, sys, pytest; sys.exit(pytest.main(['tests/test_cuda_small_gemm.py', '-q', '-p', 'no:cacheprovider']))" > "$RES/gemm_test.txt" 2>&1
log "gemm test: $(tail -1 "$RES/gemm_test.txt")"
wait $models; log "models: $(tail -1 /tmp/models.txt)"
timeout 300 python3 bench/gpu/small_batch_check.py --model $M/q27.gguf --timing --variants 12,12o > "$RES/check_q27.txt" 2>&1
log "check q27: $(tail -1 "$RES/check_q27.txt"); $(grep -E '^(decode|verify 16)' "$RES/check_q27.txt" | tr -s ' ' | tr '\n' ' ')"
engine_table
exact_cuda
if [ -n "${REPLAY:-}" ]; then   # REPLAY=1: the same with rollback by replay (LUCE_ROLLBACK=replay)
  ( export LUCE_ROLLBACK=replay; engine_table bench_q27_replay; exact_cuda exact_cuda_replay )
  grep -E 'verify (8|16) ' "$RES/bench_q27_replay.txt"
fi
log "all done"
grep -E 'decode tok/s|prefill 8192|verify 16' "$RES/bench_q27.txt"
