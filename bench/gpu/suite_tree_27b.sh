#!/usr/bin/env bash
# issue 19 on the 27B-shaped hybrid: tree verify (best-first trees; budget 22 = 23 nodes) against the 16-token chain verify, and their commits (~2 min after build)
# models: qwen35-27b
need_build || exit 1
m=$(need_model qwen35-27b) || exit 1
$PY bench/bench_tree_verify.py --target "$m" --device cuda:0 --threads 8 --rows 9,16,17,23,33 --context 1024 --repeats 9 \
  > "$RES/tree_27b.txt" 2>&1 || { summary "tree_27b: FAILED (tree_27b.txt)"; exit 1; }
summary "tree_27b: $(grep -E '^plain step' "$RES/tree_27b.txt")"
summary "tree_27b: $(grep -E '^ *(17|23) \|' "$RES/tree_27b.txt" | tr -s ' ' | tr '\n' '|')"
