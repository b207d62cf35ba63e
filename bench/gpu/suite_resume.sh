#!/usr/bin/env bash
# resuming a session from its engine state file vs prefilling it: 32K and 128K tokens, f16 and q4_0 KV, on the 27B-shaped file
# models: qwen35-27b
# The bar of issue 21: at 128K, resume >= 20x faster than the prefill, and the next greedy reply identical.
need_build || exit 1
m=$(need_model qwen35-27b) || exit 1
mkdir -p "$RES/resume-states"
$PY bench/bench_resume.py --model "$m" --device cuda:0 --threads 8 --tokens 32768,131072 --cache-type f16,q4_0 \
  --turns 8 --dir "$RES/resume-states" --json "$RES/resume.json" > "$RES/resume.txt" 2>&1 \
  || { summary "resume: FAILED or reply not identical (resume.txt)"; rm -rf "$RES/resume-states"; exit 1; }
rm -rf "$RES/resume-states"
summary "resume: $(grep -E '^ *131072 tok' "$RES/resume.txt" | tr -s ' ' | head -2 | paste -sd';')"
summary "resume: $(grep -E '^bar:' "$RES/resume.txt")"
