#!/usr/bin/env bash
# A short lease's check of --spec auto and the tree test on SmolLM2: the shipped draft's tree greedy test, then auto and fixed chains of K = 7 and 3 on 6 held-out prompts, auto and K = 3 again with step_kv_pad 1024, T = 0 and 0.7, plain beside each (~2 min after build)
need_build || exit 1
smol=$($PY -c 'from luce_engine import default_model_path; print(default_model_path())' 2>/dev/null)
[ -f "$smol" ] || { summary "auto_check: SmolLM2 absent"; exit 1; }
status=0
device_pytest tree_shipped_cuda 300 -q -s tests/test_tree_shipped_draft.py || status=1
summary "auto_check tree test: $(tail -1 "$RES/tree_shipped_cuda.txt")"
# auto with the full block (it weighs chains of 15, 7, 3 and the trees); fixed chains of 7 and 3; then
# auto and the chain of 3 with the target's step and verify graphs attending in 1024-cell steps
for run in auto:15:256 chain:7:256 chain:3:256 auto:15:1024 chain:3:1024; do
  IFS=: read -r spec k pad <<< "$run"
  name=auto_check_$spec$k; [ "$pad" = 256 ] || name=${name}_pad$pad
  $PY bench/bench_spec.py --real --spec $spec --draft-max $k --temps 0,0.7 --target "$smol" --device cuda:0 --threads 16 \
      --per-category "${PER_CATEGORY:-2}" --tokens 256 --step-kv-pad "$pad" --json "$RES/$name.json" > "$RES/$name.txt" 2>&1 || status=1
  summary "auto_check $spec (K=$k, step_kv_pad $pad): $(grep -E "^ +$spec +(0|0.7) " "$RES/$name.txt" | tr -s ' ' | tr '\n' '|')"
done
exit $status
