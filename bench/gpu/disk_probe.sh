#!/usr/bin/env bash
# How fast this machine's disk reads a large file cold, by access pattern: one or several streams,
# through the page cache or around it (O_DIRECT). Tells whether a cold state-file load is bound by
# the disk itself or by how we read it (bench/RESULTS.md, issue 21).
#
#   bash bench/gpu/disk_probe.sh DIR [GiB]     (default 8 GiB, written once into DIR, removed after)
set -uo pipefail
dir=${1:?usage: disk_probe.sh DIR [GiB]}
gib=${2:-8}
mkdir -p "$dir"
f="$dir/disk_probe.bin"
PY=${PY:-python3}
echo "disk: $(df -h "$dir" | tail -1)"
echo "device: $(lsblk -no NAME,MODEL,SIZE,ROTA "$(df --output=source "$dir" | tail -1)" 2>/dev/null | head -1)"
head -c $((64 << 20)) /dev/urandom > "$f.chunk"
t0=$(date +%s.%N)
for _ in $(seq $((gib * 16))); do cat "$f.chunk"; done > "$f"
sync "$f"
rm -f "$f.chunk"
echo "write ${gib} GiB + fsync: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}') s"

drop() { $PY -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)" "$f"; }
# read STREAMS FLAGS: STREAMS dd processes, each one contiguous 1/STREAMS of the file, 64 MiB requests
read_with() {
  local streams=$1 flags=$2 per=$((gib * 16 / $1)) pids=()
  drop
  local t0 t1
  t0=$(date +%s.%N)
  for i in $(seq 0 $((streams - 1))); do
    dd if="$f" of=/dev/null bs=64M skip=$((i * per)) count=$per $flags status=none & pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(date +%s.%N)
  echo "read $streams stream(s) ${flags:-buffered}: $(awk -v n=$((per * streams)) -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", n*0.067108864/(b-a)}') GB/s"
}
for s in 1 3 8; do read_with $s ""; done
for s in 1 3 8 16; do read_with $s "iflag=direct"; done
rm -f "$f"
