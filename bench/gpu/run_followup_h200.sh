#!/usr/bin/env bash
# Second H200 run of a session (see run_final_h200.sh for the first): no llama.cpp tools, no
# DFlash draft. In order: the scorer's memory plan vs measured buffers (scorer_plan.txt), the
# exactness and PFlash tests on cuda:0 (exact_cuda.txt; SmolLM2 tests skip without its wheel),
# PFlash TTFT at 64K and 32K against both dense prefills (pflash_short.txt), and issue 3's
# decode / prefill / verify-cost table (bench_q27.txt). Results go to $RES as they come.
set -uo pipefail
. bench/gpu/h200_steps.sh
write_models qwen35 qwen3 > /tmp/models.txt 2>&1 &
models=$!
log "build start"
bash .device/build.sh > /tmp/build.txt 2>&1 || { tail -40 /tmp/build.txt | tee -a "$RES/progress.txt"; exit 1; }
log "built"
python3 bench/gpu/scorer_plan_probe.py --device cuda:0 > "$RES/scorer_plan.txt" 2>&1
log "probe done"
exact_cuda
wait $models; log "models: $(tail -1 /tmp/models.txt)"
pflash pflash_short 65536,32768
engine_table
log "all done"
