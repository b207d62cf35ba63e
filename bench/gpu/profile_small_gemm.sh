#!/usr/bin/env bash
# Nsight Compute and the disassembly of a few small-batch GEMM launches (ffn gate+up, 34816 x 5120
# Q4_K) with the engine's geometry at 1 and 16 columns. Writes ncu_*.txt and sass_counts.txt into $1 (default $OUT). Bench binary: .device/bin.
set -uo pipefail
out=${1:-$OUT}
bin=${KERNEL_BENCH:-.device/bin/small_gemm_bench}
sections=(--section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats
          --section MemoryWorkloadAnalysis --section InstructionStats --section LaunchStats)
profile() {   # name kernel-regex bench args...
  local name=$1 kernel=$2
  shift 2
  ncu --clock-control none -k "regex:$kernel" --launch-skip 3 --launch-count 1 "${sections[@]}" \
      "$bin" --one "$@" > "$out/ncu_$name.txt" 2>&1
  echo "== $name: $("$bin" --one "$@")"
  grep -E "Memory Throughput|DRAM Throughput|Issue Slots Busy|Issued Warp Per Scheduler|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Achieved Occupancy|Executed Instructions  |Registers Per" "$out/ncu_$name.txt" | sed 's/  */ /g'
}
profile n1 gemm_small 12 34816 5120 1 2 1 3
profile n16 gemm_small 12 34816 5120 16 2 1 3
# the n = 1 kernel's instructions by opcode
cuobjdump -sass "$bin" > "$out/sass_all.txt" 2>/dev/null
python3 - "$out" <<'PY'
import re, sys, collections
out = sys.argv[1]
text = open(f"{out}/sass_all.txt").read().split("Function : ")
want = {"n1": "gemm_smallINS1_7Q4KHalfELi1ELi2ELb0ELi3E"}
with open(f"{out}/sass_counts.txt", "w") as f:
    for name, key in want.items():
        for part in text:
            if key in part.split("\n", 1)[0] and "luce_old" not in part.split("\n", 1)[0]:
                ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", part)
                c = collections.Counter(o.split(".")[0] for o in ops)
                line = f"{name}: {len(ops)} instructions: " + ", ".join(f"{k} {v}" for k, v in c.most_common(25))
                print(line); f.write(line + "\n")
                f.write(part[:200000]); f.write("\n")
                break
PY
rm -f "$out/sass_all.txt"
