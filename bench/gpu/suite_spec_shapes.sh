#!/usr/bin/env bash
# SmolLM2 + the shipped draft on the GPU at verify shapes within ggml's one-kernel range (up to 8 rows: MMVQ): chains of K = 3 and 7 (7 also with the small-batch kernels off), trees of budget 3 and 7, plain beside each (~4 min after build)
# Beside the ddtree suite's K = 15 chain and budgets 4..32: on the H100 (2026-12-06) a 16-row verify
# cost 3.5 ms (ggml's MMQ and its stream-k fix-ups) against 1.6 ms at 5 rows.
need_build || exit 1
smol=$($PY -c 'from luce_engine import default_model_path; print(default_model_path())' 2>/dev/null)
[ -f "$smol" ] || { summary "spec_shapes: SmolLM2 absent"; exit 1; }
status=0
for k in 7 3; do
  $PY bench/bench_spec.py --real --spec chain --draft-max $k --temps 0,0.7 --target "$smol" --device cuda:0 --threads 16 \
      --per-category "${PER_CATEGORY:-2}" --tokens 256 --json "$RES/spec_chain$k.json" > "$RES/spec_chain$k.txt" 2>&1 || status=1
  summary "spec_shapes chain K=$k: $(grep -E '^ +chain +(0|0.7) ' "$RES/spec_chain$k.txt" | tr -s ' ' | tr '\n' '|')"
done
# the chain of 7 once more with the small-batch kernels off (ggml's MMQ for the draft's 16-row
# matmuls, MMVQ for the LM head): what the kernels' Q8_0 rows of k = 576 / 2880 bring, same run
$PY bench/bench_spec.py --real --spec chain --draft-max 7 --temps 0 --target "$smol" --device cuda:0 --threads 16 \
    --small-batch-kernels off --per-category "${PER_CATEGORY:-2}" --tokens 256 --json "$RES/spec_chain7_nokernels.json" \
    > "$RES/spec_chain7_nokernels.txt" 2>&1 || status=1
summary "spec_shapes chain K=7, kernels off: $(grep -E '^ +chain +0 ' "$RES/spec_chain7_nokernels.txt" | tr -s ' ' | tr '\n' '|')"
$PY bench/bench_spec.py --real --spec tree --tree-budget 3,7 --temps 0,0.7 --target "$smol" --device cuda:0 --threads 16 \
    --per-category "${PER_CATEGORY:-2}" --tokens 256 --json "$RES/spec_tree37.json" > "$RES/spec_tree37.txt" 2>&1 || status=1
summary "spec_shapes trees 3, 7: $(grep -E '^ +tree[37] ' "$RES/spec_tree37.txt" | tr -s ' ' | tr '\n' '|')"
exit $status
