#!/usr/bin/env bash
# --spec auto step by step on SmolLM2 + the shipped draft (bench/trace_auto.py): each step's mode, time, tokens and graph builds, by mode and by switch, 6 held-out prompts at T = 0 and 0.7 (~1 min after build)
need_build || exit 1
smol=$($PY -c 'from luce_engine import default_model_path; print(default_model_path())' 2>/dev/null)
[ -f "$smol" ] || { summary "auto_trace: SmolLM2 absent"; exit 1; }
$PY bench/trace_auto.py --json "$RES/auto_trace.json" -- --real --spec auto --draft-max 15 --temps 0,0.7 --target "$smol" \
    --device cuda:0 --threads 16 --per-category "${PER_CATEGORY:-2}" --tokens 256 --json "$RES/auto_trace_bench.json" \
    > "$RES/auto_trace.txt" 2>&1 || { summary "auto_trace: FAILED (auto_trace.txt)"; exit 1; }
summary "auto_trace: $(grep -E '^ +auto +(0|0.7) |^auto trace' "$RES/auto_trace.txt" | tr -s ' ' | tr '\n' '|')"
