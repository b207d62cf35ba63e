#!/usr/bin/env bash
# DFlash chain speculation at synthetic acceptance lengths L: luce vs llama-cli --spec-type draft-dflash
# models: qwen35-27b dflash-27b
# The issue's lengths L = 3, 6, 12 in one table, 3 repeats of 512 tokens on each side.
need_build || exit 1
t=$(need_model qwen35-27b) && d=$(need_model dflash-27b) || exit 1
cli=()
[ -x "$LCP_BIN/llama-cli" ] && cli=(--llama-cli "$LCP_BIN/llama-cli")
spec() {   # spec NAME ARGS...
  local name=$1; shift
  $PY bench/bench_spec.py --target "$t" --draft "$d" --device cuda:0 --threads 8 "${cli[@]}" "$@" \
    --json "$RES/$name.json" > "$RES/$name.txt" 2>&1 || { summary "spec $name: FAILED ($name.txt)"; return 1; }
}
spec spec_table --lengths 3,6,12 --repeats 3 --tokens 512 || exit 1
summary "spec: $(grep -E '^plain decode' "$RES/spec_table.txt")"
summary "spec: $(grep -A3 ' L ' "$RES/spec_table.txt" | tail -3 | tr -s ' ' | paste -sd';')"
summary "spec: $(grep -E '^draft graphs' "$RES/spec_table.txt")"
