#!/usr/bin/env bash
# resuming a session from its engine state file vs prefilling it: 128K (the bar) then 32K tokens, f16 and q4_0 KV, on the 27B-shaped file (~4 min)
# models: qwen35-27b
# The bar of issue 21: at 128K, resume >= 20x faster than the prefill (cold read), and the next greedy
# reply identical to the never-closed session's. Time goes to the four prefills (128K: ~74 s each,
# 32K: ~14 s); the loads take seconds, the saves ~1 GB/s. 3 appending turns a row give the per-turn
# write's median. One process: the model loads once; 128K first, so its rows exist even if the
# lease ends during the 32K ones (each row is printed as it is done).
need_build || exit 1
m=$(need_model qwen35-27b) || exit 1
mkdir -p "$RES/resume-states"
$PY bench/bench_resume.py --model "$m" --device cuda:0 --threads 8 --tokens 131072,32768 --cache-type f16,q4_0 \
  --turns 3 --dir "$RES/resume-states" --json "$RES/resume.json" > "$RES/resume.txt" 2>&1 \
  || { summary "resume: FAILED or reply not identical (resume.txt)"; rm -rf "$RES/resume-states"; exit 1; }
rm -rf "$RES/resume-states"
summary "resume: $(grep -E '^ *131072 tok' "$RES/resume.txt" | tr -s ' ' | head -2 | paste -sd';')"
summary "resume: $(grep -E '^bar:' "$RES/resume.txt")"
