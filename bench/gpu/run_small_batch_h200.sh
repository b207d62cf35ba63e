#!/usr/bin/env bash
# H200 run for luce's CUDA small-batch GEMM (engine/native/cuda): builds with the kernels, then in
# order: the kernels against their float64 reference (gemm_test.txt); each replaced matmul against
# ggml's on a tiny and on the 27B-shaped qwen35 (node_check_*.txt); the small-batch path against the
# scheduler path with steady-state timings of every configuration in VARIANTS (check_q27.txt), the
# fastest then used for the rest: issue 3's table against llama.cpp (bench_q27.txt); DFlash at L = 6
# with and without the kernels (spec6*.txt); the exactness tests on cuda:0 with the fastest (also with
# variant EXACT_ALSO on a stream of its own, and with EXACT_GGML=1 the Q4_K_M ones on ggml alone); a kernel profile
# (profile.txt). QUICK=1 skips DFlash and Nsight Compute.
set -uo pipefail
. bench/gpu/h200_steps.sh
write_models qwen35-tiny qwen35 dflash > /tmp/models.txt 2>&1 &
models=$!
log "build start"
LUCE_CUDA_ARCHITECTURES=90 bash .device/build.sh > /tmp/build.txt 2>&1 || {
  tail -60 /tmp/build.txt | tee -a "$RES/progress.txt"; tail -80 "${OUT:-/tmp}/device-build.log" > "$RES/build_tail.txt"; exit 1; }
log "built: $(grep -h 'luce: small-batch' "${OUT:-/tmp}/device-build.log" | tail -1)"
LUCE_TEST_DEVICE=cuda:0 timeout 300 python3 -c "import llama_cpp, sys, pytest; sys.exit(pytest.main(['tests/test_cuda_small_gemm.py', '-q', '-p', 'no:cacheprovider']))" > "$RES/gemm_test.txt" 2>&1
log "gemm test: $(tail -1 "$RES/gemm_test.txt")"
wait $models; log "models: $(tail -1 /tmp/models.txt)"
node_check() {   # node_check NAME MODEL: each replaced matmul against ggml's, with the current variant
  LUCE_SMALL_BATCH_CHECK=1 timeout 300 python3 bench/gpu/small_batch_check.py --model "$2" > "$RES/$1.txt" 2>&1
  log "$1 (variant ${LUCE_SMALL_GEMM_VARIANT:-default}): $(grep -c 'small-batch check' "$RES/$1.txt") nodes, worst $(grep 'small-batch check' "$RES/$1.txt" | sed 's/.*(\(.*\))$/\1/' | sort -g | tail -1); $(tail -1 "$RES/$1.txt")"
}
node_check node_check_q35-tiny $M/q35-tiny.gguf
node_check node_check_q27 $M/q27.gguf
# kernel variants on ggml's stream ("12"), on a stream of their own ("12o"), with ggml's fusion in the pieces ("12f")
timeout 400 python3 bench/gpu/small_batch_check.py --model $M/q27.gguf --timing --variants ${VARIANTS:-2,12,12o,12f} > "$RES/check_q27.txt" 2>&1
best=$(sed -n 's/^BEST VARIANT //p' "$RES/check_q27.txt")
export LUCE_SMALL_GEMM_VARIANT=${best%%[fo]*}
case $best in *o*) export LUCE_SMALL_BATCH_STREAM=own ;; *) export LUCE_SMALL_BATCH_STREAM=ggml ;; esac
case $best in *f*) export LUCE_SMALL_BATCH_FUSE=1 ;; *) export LUCE_SMALL_BATCH_FUSE=0 ;; esac
log "check q27: $(tail -1 "$RES/check_q27.txt"), best ${best:-none}; $(grep -E 'baseline|verify 16 ' "$RES/check_q27.txt" | sort -u | tr -s ' ' | tr '\n' ' ')"
node_check node_check_best $M/q27.gguf
engine_table
log "table: $(grep -E 'verify 16' "$RES/bench_q27.txt")"
spec6() {   # spec6 NAME [env...]: DFlash chain at L = 6, ours only
  env "${@:2}" timeout 400 python3 bench/bench_spec.py --target $M/q27.gguf --draft $M/q27-dflash.gguf --device cuda:0 \
    --threads 8 --repeats 3 --tokens 512 --lengths 6 --json "$RES/$1.json" > "$RES/$1.txt" 2>&1
  log "$1: $(tail -3 "$RES/$1.txt" | head -1)"
}
if [ -z "${QUICK:-}" ]; then   # QUICK=1: issue 3's measurements only
  spec6 spec6
  spec6 spec6_off LUCE_SMALL_BATCH_GEMM=0
fi
exact_cuda   # with the fastest configuration: the Q4_K_M tests run their verify blocks on our kernels
[ -n "${EXACT_ALSO:-}" ] && ( export LUCE_SMALL_GEMM_VARIANT=$EXACT_ALSO LUCE_SMALL_BATCH_FUSE=0 LUCE_SMALL_BATCH_STREAM=own; exact_cuda exact_cuda_v$EXACT_ALSO )
[ -n "${EXACT_GGML:-}" ] && ( export LUCE_SMALL_BATCH_GEMM=0; exact_cuda exact_cuda_ggml -k q4km )   # the Q4_K_M ones on ggml alone: its batch-shape flips
timeout 200 python3 bench/gpu/profile_kernels.py --model $M/q27.gguf --verify 16 > "$RES/profile.txt" 2>&1
# per-kernel counters of the default and the f16 Q4_K kernel on one FFN-sized matrix (diagnostic)
if [ -z "${QUICK:-}" ]; then
  ncu --set full -k regex:gemm_ -c 2 python3 bench/gpu/gemm_probe.py 17408 5120 2,7 > "$RES/ncu.txt" 2>&1
  log "ncu: $(grep -E 'gemm_small|Duration' "$RES/ncu.txt" | tr -s ' ' | cut -c1-90 | tr '\n' ' ')"
fi
log "all done"
