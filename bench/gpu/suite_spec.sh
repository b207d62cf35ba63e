#!/usr/bin/env bash
# DFlash chain speculation at synthetic acceptance lengths L: luce vs llama-cli --spec-type draft-dflash
# models: qwen35-27b dflash-27b
# L = 6 first with 5 repeats of 1024 tokens (the headline number), then the rest of the table.
need_build || exit 1
t=$(need_model qwen35-27b) && d=$(need_model dflash-27b) || exit 1
cli=()
[ -x "$LCP_BIN/llama-cli" ] && cli=(--llama-cli "$LCP_BIN/llama-cli")
spec() {   # spec NAME ARGS...
  local name=$1; shift
  $PY bench/bench_spec.py --target "$t" --draft "$d" --device cuda:0 --threads 8 "${cli[@]}" "$@" \
    --json "$RES/$name.json" > "$RES/$name.txt" 2>&1 || { summary "spec $name: FAILED ($name.txt)"; return 1; }
}
spec spec6 --lengths 6 --repeats 5 --tokens 1024 || exit 1
summary "spec L=6: $(grep -A1 ' L ' "$RES/spec6.txt" | tail -1 | tr -s ' ')"
spec spec_table --lengths 1.5,3,4,8,12 --repeats 2 --tokens 512 || exit 1
summary "spec table: spec_table.txt"
