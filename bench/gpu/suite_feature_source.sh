#!/usr/bin/env bash
# the shipped draft's chain-of-7 AL on features from one-token steps vs verify-shaped batches (bench/al_by_feature_source.py; the text vs the features: why --spec auto gains less than the fixed chain on a GPU; ~1 min after build)
need_build || exit 1
$PY bench/al_by_feature_source.py --device cuda:0 --threads 16 --per-category "${PER_CATEGORY:-2}" --tokens 256 \
    > "$RES/feature_source.txt" 2>&1 || { summary "feature_source: FAILED (feature_source.txt)"; exit 1; }
summary "feature_source: $(grep -E '^ +(steps|prefill|batches|chain text) |^steps vs|^the chain.s own' "$RES/feature_source.txt" | tr -s ' ' | tr '\n' '|')"
