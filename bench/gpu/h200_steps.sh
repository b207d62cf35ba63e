# Steps shared by the H200 run scripts (sourced; see run_final_h200.sh). Results go to $RES.
RES=${RES:-/tmp/res}; mkdir -p "$RES"
export PYTHONUNBUFFERED=1
M=/tmp/models; mkdir -p $M
log() { echo "$(date +%T) $*" | tee -a "$RES/progress.txt"; }

# write_models ARCH... : the random presets (qwen35 27B target, dflash draft, qwen3 0.6B scorer)
write_models() {
  for arch in "$@"; do
    case $arch in
      qwen35) f=q27.gguf; preset=27b ;;
      dflash) f=q27-dflash.gguf; preset=27b ;;
      qwen3) f=q3-0.6b.gguf; preset=0.6b ;;
      qwen35-tiny) arch=qwen35; f=q35-tiny.gguf; preset=tiny ;;
    esac
    [ -f $M/$f ] || python3 .device/make_random_gguf.py --arch $arch --preset $preset --out $M/$f
  done
}

exact_cuda() {   # exact_cuda [NAME [PYTEST-ARGS...]]: the exactness and scorer tests on cuda:0, into $RES/NAME.txt
  local name=${1:-exact_cuda} extra=""
  for a in "${@:2}"; do extra+=", '$a'"; done
  # -s: the near-tie reports (test_speculative prints each flip's margin) go into the log
  LUCE_TEST_DEVICE=cuda:0 timeout 420 python3 -c "import llama_cpp, sys, pytest; sys.exit(pytest.main(['tests/test_pflash_scorer.py', 'tests/test_speculative.py', 'tests/test_speculative_dflash.py', 'tests/test_draft_model.py', 'tests/test_synthetic.py', 'tests/test_tiny_qwen35.py', 'tests/test_engine.py', 'tests/test_parity.py', '-q', '-s', '-p', 'no:cacheprovider'$extra]))" > "$RES/$name.txt" 2>&1
  log "$name: $(tail -1 "$RES/$name.txt"); near-ties reported: $(grep -o 'near-tie at [0-9]* (margin [0-9.e+-]*' "$RES/$name.txt" | sed 's/.*margin //' | tr '\n' ' ')"
}

pflash() {   # pflash NAME LENGTHS: TTFT against both dense prefills
  python3 bench/bench_pflash.py --target $M/q27.gguf --scorer $M/q3-0.6b.gguf --device cuda:0 --threads 8 \
    --lengths "$2" --dense-max 0 --keep 0.05 --json "$RES/$1.json" > "$RES/$1.txt" 2>&1
  log "$1 done"
}

engine_table() {   # engine_table [NAME]: issue 3's decode / prefill / verify-cost table, into $RES/NAME.txt
  local name=${1:-bench_q27}
  python3 bench/bench_engine.py --model $M/q27.gguf --device cuda:0 --threads 8 --decode-tokens 64 --repeats 3 \
    --prefill 512,8192 --verify 1,2,4,8,16,32 --json "$RES/$name.json" > "$RES/$name.txt" 2>&1
  log "$name done"
}
