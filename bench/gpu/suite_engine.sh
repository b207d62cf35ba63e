#!/usr/bin/env bash
# decode, prefill and verify + commit on the 27B-shaped Q4_K_M file: luce vs llama.cpp (llama-cpp-python and llama-bench)
# models: qwen35-27b
# Four times for luce: with the defaults, with --rollback snapshot (the other mode), so the choice
# between them is re-measured in every run, with ggml's kernels alone (--small-batch-kernels off),
# and with the small-batch steps in pieces, not replayed as one CUDA graph (--step-graphs off).
# the defaults against llama.cpp: the engine_default suite (its summary lines too)
. bench/gpu/suite_engine_default.sh || exit 1
$PY bench/bench_engine.py --model "$m" --device cuda:0 --threads 8 --decode-tokens 64 --repeats 3 \
  --prefill 512 --verify 8,16 --skip-llama-cpp --rollback snapshot --json "$RES/engine_snapshot.json" \
  > "$RES/engine_snapshot.txt" 2>&1 || { summary "engine --rollback snapshot: FAILED (engine_snapshot.txt)"; exit 1; }
$PY bench/bench_engine.py --model "$m" --device cuda:0 --threads 8 --decode-tokens 64 --repeats 3 \
  --prefill 512 --verify 1,2,4,8,16 --skip-llama-cpp --small-batch-kernels off --json "$RES/engine_ggml.json" \
  > "$RES/engine_ggml.txt" 2>&1 || { summary "engine --small-batch-kernels off: FAILED (engine_ggml.txt)"; exit 1; }
$PY bench/bench_engine.py --model "$m" --device cuda:0 --threads 8 --decode-tokens 64 --repeats 3 \
  --prefill 512 --verify 1,4,16 --skip-llama-cpp --step-graphs off --json "$RES/engine_pieces.json" \
  > "$RES/engine_pieces.txt" 2>&1 || { summary "engine --step-graphs off: FAILED (engine_pieces.txt)"; exit 1; }
summary "engine (--small-batch-kernels off): $(grep -E '^decode tok/s' "$RES/engine_ggml.txt" | tr -s ' ')"
summary "engine (--step-graphs off): $(grep -E '^decode tok/s' "$RES/engine_pieces.txt" | tr -s ' ')"
summary "engine (--step-graphs off): $(grep -E '^verify 16 ' "$RES/engine_pieces.txt" | tr -s ' ')"
summary "engine (--rollback snapshot): $(grep -E '^verify 16 ' "$RES/engine_snapshot.txt" | tr -s ' ')"
