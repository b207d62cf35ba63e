#!/usr/bin/env bash
# the hybrid tree verify's recurrence kernel alone (bench/gpu/tree_recurrence_check.cu, no engine build): every node against a float64 recurrence and bit for bit against the chain of its path, and 48 layers' time for trees and chains of 16/23/33 nodes at the 27B's shape (~10 s)
# The binary: .device/bin/tree_recurrence_check if carried (bash bench/gpu/build_tree_recurrence_check.sh
# here), else built on the machine from this tree.
bin=.device/bin/tree_recurrence_check
if ! [ -x "$bin" ] || ! "$bin" > "$RES/tree_kernel.txt" 2>&1; then
  bin=/tmp/tree_recurrence_check
  bash bench/gpu/build_tree_recurrence_check.sh "$bin" > "$RES/tree_kernel_build.txt" 2>&1 || { summary "tree_kernel: build FAILED"; exit 1; }
  "$bin" > "$RES/tree_kernel.txt" 2>&1
fi
rc=$?
summary "tree_kernel: $(tr -s ' ' < "$RES/tree_kernel.txt" | tr '\n' '|')"
exit $rc
