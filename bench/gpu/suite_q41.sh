#!/usr/bin/env bash
# SmolLM2's Q4_1 matmuls on luce's kernels past 8 rows (debug switch LUCE_SMALL_BATCH_Q41=1), only once kernel_test has passed in this run: the shipped draft's greedy tree test, a profile of 8/9/16-row verifies, and the chains of 7 and 15 against plain at T = 0 (~2 min after build)
need_build || exit 1
if ! grep -q " passed" "$RES/kernel_test.txt" 2>/dev/null || grep -qE "[0-9]+ (failed|error)" "$RES/kernel_test.txt"; then
  summary "q41: skipped (kernel_test has not passed in this run)"; exit 1
fi
smol=$($PY -c 'from luce_engine import default_model_path; print(default_model_path())' 2>/dev/null)
draft=$($PY -c 'from luce_engine.default_draft import shipped_draft_path; print(shipped_draft_path())' 2>/dev/null)
[ -f "$smol" ] || { summary "q41: SmolLM2 absent"; exit 1; }
export LUCE_SMALL_BATCH_Q41=1
status=0
device_pytest q41_tree_shipped 300 -q tests/test_tree_shipped_draft.py || status=1
summary "q41 tree test: $(tail -1 "$RES/q41_tree_shipped.txt")"
timeout 300 $PY bench/gpu/profile_kernels.py --model "$smol" --draft "$draft" --verify 8,9,16 --steps 20 > "$RES/q41_profile.txt" 2>&1 \
  || status=1
summary "q41 profile: $(grep -E '^==|engine:' "$RES/q41_profile.txt" | tr -s ' ' | tr '\n' '|')"
for k in 7 15; do
  $PY bench/bench_spec.py --real --spec chain --draft-max $k --temps 0 --target "$smol" --device cuda:0 --threads 16 \
      --per-category "${PER_CATEGORY:-2}" --tokens 256 --json "$RES/q41_chain$k.json" > "$RES/q41_chain$k.txt" 2>&1 || status=1
  summary "q41 chain K=$k: $(grep -E '^ +chain +0 ' "$RES/q41_chain$k.txt" | tr -s ' ' | tr '\n' '|')"
done
exit $status
