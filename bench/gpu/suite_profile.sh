#!/usr/bin/env bash
# where decode, verify and the draft pass spend GPU time (torch.profiler), and the small-batch kernels against ggml's path
# models: qwen35-27b dflash-27b
# Diagnostics, not benchmarks: the profiler adds overhead of its own.
need_build || exit 1
t=$(need_model qwen35-27b) && d=$(need_model dflash-27b) || exit 1
timeout 400 $PY bench/gpu/profile_kernels.py --model "$t" --draft "$d" --verify 1,16 > "$RES/profile.txt" 2>&1 \
  || { summary "profile: FAILED (profile.txt)"; exit 1; }
summary "profile: $(grep '^==' "$RES/profile.txt" | tr '\n' ' ')"
timeout 400 $PY bench/gpu/small_batch_check.py --model "$t" --timing > "$RES/small_batch.txt" 2>&1
rc=$?
summary "small-batch kernels vs ggml: $(tail -1 "$RES/small_batch.txt")"
exit $rc
