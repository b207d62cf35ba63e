#!/usr/bin/env bash
# the shipped draft's chain-of-7 AL on features from one-token steps vs verify-shaped batches, and along the chain's own text (bench/al_by_feature_source.py), then diag_verify_vs_step.py against the CPU's rows: why --spec auto gains less than the fixed chain on a GPU (~2 min after build)
need_build || exit 1
$PY bench/al_by_feature_source.py --device cuda:0 --threads 16 --per-category "${PER_CATEGORY:-2}" --tokens 256 \
    > "$RES/feature_source.txt" 2>&1 || { summary "feature_source: FAILED (feature_source.txt)"; exit 1; }
summary "feature_source: $(grep -E '^ +(steps|prefill|batches|chain text) |^steps vs|^the chain.s own' "$RES/feature_source.txt" | tr -s ' ' | tr '\n' '|')"
# ... and which GPU path rounds far from the CPU's rows on the same tokens: one-token steps or batches
$PY bench/gpu/diag_verify_vs_step.py --device cuda:0 --tokens 64 --prompts 3 > "$RES/diag_vs_cpu.txt" 2>&1 \
    || { summary "feature_source diag: FAILED (diag_vs_cpu.txt)"; exit 1; }
summary "feature_source diag: $(grep -E 'vs cpu|verify +max' "$RES/diag_vs_cpu.txt" | tr -s ' ' | tr '\n' '|')"
