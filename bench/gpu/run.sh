#!/usr/bin/env bash
# GPU runs on the device machine: shared setup here, one file per suite (bench/gpu/suite_NAME.sh).
#
#   bash bench/gpu/run.sh SUITE...        start the suites, in order, detached; follow them for up to
#                                         FOLLOW seconds (default 540), then copy the results to $OUT
#   bash bench/gpu/run.sh --follow        follow a run started earlier on this machine, as above
#   bash bench/gpu/run.sh --here SUITE... run in this shell, not detached (no time limit of its own)
#   bash bench/gpu/run.sh --list          the suites and what each one does
#
# A device command has at most 10 minutes while the suites together take longer, so the work runs
# under setsid nohup (it outlives the command) and each call follows it for a while: send
# `run.sh --follow` again right after a call returns, while the machine is still warm. Everything is
# written to $RES (default /tmp/res) as it is produced; $OUT gets progress.txt (the log), summary.txt
# (each suite's short result) and results.tar.gz (all of $RES), and the summary is printed last.
# Random models are written to $MODELS (default /tmp/models) by tools/random_gguf.py while the
# build runs: a suite names the presets it needs in a `# models:` line.
#
# Adding a suite is one file: bench/gpu/suite_NAME.sh, sourced in a subshell with the helpers below
# (log, need_model, need_build, device_pytest, summary) and $PY, $RES, $MODELS, $LCP_BIN; its first
# comment line is its description, its exit status its result. Before the first run on a machine:
# `bash ../shared/device/pack.sh` here fills .device/ (carry it); see bench/gpu/README.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HERE=bench/gpu
RES=${RES:-/tmp/res}
MODELS=${MODELS:-/tmp/models}
FOLLOW=${FOLLOW:-540}
PY=${PY:-python3}
LCP_BIN=${LCP_BIN:-/tmp/lcpbuild/bin}   # llama.cpp's own tools, from the build suite
export PYTHONUNBUFFERED=1 RES MODELS PY LCP_BIN

log() { echo "$(date +%T) $*" | tee -a "$RES/progress.txt" >&2; }
summary() { echo "$*" >> "$RES/summary.txt"; log "$*"; }

suite_file() { echo "$HERE/suite_$1.sh"; }
suite_models() { sed -n 's/^# models://p' "$(suite_file "$1")" | tr -s ' ' '\n' | sed '/^$/d'; }

# need_model PRESET: the path of $MODELS/PRESET.gguf, waiting for the background writer (or writing it)
need_model() {
  local f="$MODELS/$1.gguf"
  while [ ! -f "$f" ] && [ -f "$RES/models.pid" ] && kill -0 "$(cat "$RES/models.pid")" 2>/dev/null; do sleep 2; done
  [ -f "$f" ] || $PY -m tools.random_gguf --preset "$1" --out "$f" >> "$RES/models.txt" 2>&1 \
    || { log "could not write $1 (see models.txt)"; return 1; }
  echo "$f"
}

need_build() {
  $PY -c "import luce_engine" 2>/dev/null && return 0
  log "luce_engine is not built on this machine: run the build suite first"; return 1
}

# device_pytest NAME SECONDS PYTEST-ARGS...: pytest on cuda:0 into $RES/NAME.txt, stopped after SECONDS.
# llama_cpp is imported before pytest loads its plugins: on the GPU image its CUDA model load
# crashes when it is imported after them.
device_pytest() {
  local name=$1 limit=$2 args=""
  shift 2
  for a in "$@"; do args+="'$a', "; done
  LUCE_TEST_DEVICE=cuda:0 timeout "$limit" $PY -c "import llama_cpp, sys, pytest; sys.exit(pytest.main([${args}'-p', 'no:cacheprovider']))" \
    > "$RES/$name.txt" 2>&1
}

write_models() {   # the presets every requested suite names, one after another, in the background
  local presets
  presets=$(for s in "$@"; do suite_models "$s"; done | awk '!seen[$0]++')
  [ -n "$presets" ] || return 0
  (
    for p in $presets; do
      [ -f "$MODELS/$p.gguf" ] || $PY -m tools.random_gguf --preset "$p" --out "$MODELS/$p.gguf" || exit 1
    done
  ) >> "$RES/models.txt" 2>&1 &
  echo $! > "$RES/models.pid"
}

run_suites() {
  mkdir -p "$RES" "$MODELS"
  : > "$RES/summary.txt"
  echo running > "$RES/state"
  # the carried wheels first (gguf for the model writer; build.sh installs them again, harmlessly)
  [ -d .device/wheels ] && $PY -m pip install -q --no-index --no-deps .device/wheels/*.whl >> "$RES/setup.txt" 2>&1
  write_models "$@"
  local failed=0 t0 rc
  for s in "$@"; do
    t0=$(date +%s)
    log "suite $s: start"
    ( . "$(suite_file "$s")" )
    rc=$?
    log "suite $s: exit $rc after $(( $(date +%s) - t0 )) s"
    [ $rc -eq 0 ] || failed=1
    if [ "$s" = build ] && [ $rc -ne 0 ]; then summary "build failed: the other suites are skipped"; break; fi
  done
  echo "done $failed" > "$RES/state"
  log "all done"
}

collect() {   # the log, the summary and everything else in $RES into $OUT (8 files come back at most)
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT"
  cp "$RES/progress.txt" "$RES/summary.txt" "$OUT/" 2>/dev/null
  tar czf "$OUT/results.tar.gz" -C "$RES" . 2>/dev/null
  # a file comes back at 16 MB at most: a bigger archive (a trained draft) comes back in parts
  # (cat results.tar.gz.part* > results.tar.gz)
  if [ "$(stat -c %s "$OUT/results.tar.gz")" -gt 15000000 ]; then
    split -b 15000000 -d "$OUT/results.tar.gz" "$OUT/results.tar.gz.part" && rm "$OUT/results.tar.gz"
  fi
}

follow() {   # until the run is done or FOLLOW seconds passed; then collect and print the summary
  local t0 seen=0 n
  t0=$(date +%s)
  [ -f "$RES/state" ] || { echo "no run started on this machine (state file $RES/state missing)"; return 2; }
  while :; do
    n=$(wc -l < "$RES/progress.txt" 2>/dev/null || echo 0)
    [ "$n" -gt "$seen" ] && { sed -n "$((seen + 1)),${n}p" "$RES/progress.txt"; seen=$n; }
    grep -q '^done' "$RES/state" && break
    if [ -f "$RES/worker.pid" ] && ! kill -0 "$(cat "$RES/worker.pid")" 2>/dev/null; then
      grep -q '^done' "$RES/state" || echo "done 1 (the worker ended without finishing; see worker.txt)" > "$RES/state"
      break
    fi
    [ $(( $(date +%s) - t0 )) -ge "$FOLLOW" ] && break
    sleep 5
  done
  collect
  echo "---- $(cat "$RES/state") ----"
  cat "$RES/summary.txt" 2>/dev/null
  grep -q '^done' "$RES/state" || { echo "(still running: call bench/gpu/run.sh --follow again)"; return 3; }
  [ "$(cut -d' ' -f2 "$RES/state")" = 0 ]
}

check_suites() {
  [ $# -gt 0 ] || { echo "name at least one suite (--list shows them)"; return 2; }
  for s in "$@"; do
    [ -f "$(suite_file "$s")" ] || { echo "no suite '$s' (no $(suite_file "$s")); --list shows them"; return 2; }
  done
}

case "${1:-}" in
  --list)
    for f in "$HERE"/suite_*.sh; do
      n=${f##*/suite_}; printf '%-9s %s\n' "${n%.sh}" "$(sed -n '2s/^# *//p' "$f")"
    done ;;
  --follow) follow ;;
  --here) shift; check_suites "$@" || exit 2; run_suites "$@"; [ "$(cut -d' ' -f2 "$RES/state")" = 0 ] ;;
  --worker) shift; run_suites "$@" ;;
  -h|--help|"") sed -n '2,20s/^# \{0,1\}//p' "$HERE/run.sh" ;;
  *)
    check_suites "$@" || exit 2
    if [ -f "$RES/state" ] && grep -q '^running' "$RES/state"; then
      echo "a run is in progress on this machine: bench/gpu/run.sh --follow"; exit 2
    fi
    rm -rf "$RES"; mkdir -p "$RES"; : > "$RES/progress.txt"; echo running > "$RES/state"
    # OUT belongs to this command only: the detached worker writes to $RES (build.sh logs to $OUT)
    OUT= setsid nohup bash "$HERE/run.sh" --worker "$@" > "$RES/worker.txt" 2>&1 < /dev/null &
    echo $! > "$RES/worker.pid"
    follow ;;
esac
