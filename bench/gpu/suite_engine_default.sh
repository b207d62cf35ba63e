#!/usr/bin/env bash
# decode, prefill and verify + commit on the 27B-shaped Q4_K_M file with the defaults only: luce vs llama-cpp-python and llama-bench (the engine suite's first part, for a short lease)
# models: qwen35-27b
need_build || exit 1
m=$(need_model qwen35-27b) || exit 1
bench=()
[ -x "$LCP_BIN/llama-bench" ] && bench=(--llama-bench "$LCP_BIN/llama-bench")
$PY bench/bench_engine.py --model "$m" --device cuda:0 --threads 8 --decode-tokens 64 --repeats 3 \
  --prefill 512,8192 --verify 1,2,4,8,16,32 "${bench[@]}" --json "$RES/engine.json" > "$RES/engine.txt" 2>&1 \
  || { summary "engine: FAILED (engine.txt)"; exit 1; }
summary "engine: $(grep -E '^decode tok/s' "$RES/engine.txt" | tr -s ' ')"
summary "engine: $(grep -E '^prefill 8192' "$RES/engine.txt" | tr -s ' ')"
summary "engine: $(grep -E '^verify 16 ' "$RES/engine.txt" | tr -s ' ')"
