#!/usr/bin/env bash
# SmolLM2 (the default model) on the GPU: kernel time against wall time for decode, 5-, 8-, 9- and 16-token verifies and the shipped draft's pass, and whether they replay as one CUDA graph (~1 min after build)
# Diagnostics, not benchmarks: the profiler adds overhead of its own. Needs SmolLM2's wheel.
need_build || exit 1
smol=$($PY -c 'from luce_engine import default_model_path; print(default_model_path())' 2>/dev/null)
draft=$($PY -c 'from luce_engine.default_draft import shipped_draft_path; print(shipped_draft_path())' 2>/dev/null)
[ -f "$smol" ] || { summary "profile_smol: SmolLM2 absent"; exit 1; }
timeout 300 $PY bench/gpu/profile_kernels.py --model "$smol" --draft "$draft" --verify 5,8,9,16 --steps 20 > "$RES/profile_smol.txt" 2>&1 \
  || { summary "profile_smol: FAILED (profile_smol.txt)"; exit 1; }
summary "profile_smol: $(grep -E '^==|engine:' "$RES/profile_smol.txt" | tr -s ' ' | tr '\n' '|')"
