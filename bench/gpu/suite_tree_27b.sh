#!/usr/bin/env bash
# issue 19 on the 27B-shaped hybrid: tree verify (best-first trees; budget 22 = 23 nodes; the recurrence by paths and by nodes; luce's kernels up to 16 and 24 rows) against the 16-token chain verify, and their commits, then a kernel profile of the 16- and 23-row chains and the 23-node tree (~3 min after build)
# models: qwen35-27b
need_build || exit 1
m=$(need_model qwen35-27b) || exit 1
$PY bench/bench_tree_verify.py --target "$m" --device cuda:0 --threads 8 --rows "${TREE_ROWS:-9,16,17,23,33}" --context 1024 --repeats 9 \
  --tree-recurrence paths,nodes --small-batch-max-tokens 16,24 \
  > "$RES/tree_27b.txt" 2>&1 || { summary "tree_27b: FAILED (tree_27b.txt)"; exit 1; }
summary "tree_27b: $(grep -E 'plain step|^ *(16|23) \||^bar' "$RES/tree_27b.txt" | cut -c1-90 | tr -s ' ' | tr '\n' '|')"
# where the tree's extra time goes: kernels of the 16- and 23-row chain verifies against the
# 23-node tree's (torch.profiler; diagnostics, ~1 min; TREE_PROFILE=0 leaves it out on a short lease)
[ "${TREE_PROFILE:-1}" = 0 ] && exit 0
timeout 240 $PY bench/gpu/profile_kernels.py --model "$m" --verify 16,23 --tree 23 --steps 10 > "$RES/tree_27b_profile.txt" 2>&1 \
  || summary "tree_27b profile: FAILED (tree_27b_profile.txt)"
summary "tree_27b profile: $(grep -E '^==' "$RES/tree_27b_profile.txt" | tr -s ' ' | tr '\n' '|')"
