#!/usr/bin/env bash
# PFlash time to first token on 128K, 64K and 32K attachments vs dense prefill (luce and llama.cpp), BF16 Qwen3-0.6B-shaped scorer
# models: qwen35-27b qwen3-0.6b
need_build || exit 1
t=$(need_model qwen35-27b) && s=$(need_model qwen3-0.6b) || exit 1
pf() {   # pf NAME LENGTHS
  $PY bench/bench_pflash.py --target "$t" --scorer "$s" --device cuda:0 --threads 8 --lengths "$2" \
    --dense-max 0 --keep 0.05 --json "$RES/$1.json" > "$RES/$1.txt" 2>&1 || { summary "pflash $1: FAILED ($1.txt)"; return 1; }
  summary "pflash $2: $(tail -3 "$RES/$1.txt" | head -1 | tr -s ' ')"
}
pf pflash128 131072 || exit 1
pf pflash_short 65536,32768 || exit 1
$PY bench/gpu/pflash_scorer_speed.py "$s" 32768,65536,131072 cuda:0 > "$RES/pflash_scorer.txt" 2>&1 \
  || { summary "pflash scorer speed: FAILED (pflash_scorer.txt)"; exit 1; }
