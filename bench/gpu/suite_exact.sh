#!/usr/bin/env bash
# the tests marked gpu (parity, exactness, PFlash) on cuda:0: pytest -m gpu with LUCE_TEST_DEVICE=cuda:0
# -s keeps the near-tie reports (each flip's margin, printed by the speculative tests) in the log.
need_build || exit 1
# --continue-on-collection-errors: the GPU image has no textual/prompt_toolkit, so the TUI test files
# cannot be collected there (none of them is marked gpu)
device_pytest exact 1500 -m gpu --continue-on-collection-errors -q -s -rs tests
rc=$?
ties=$(grep -o 'near-tie at [0-9]* (margin [0-9.e+-]*' "$RES/exact.txt" | sed 's/.*margin //' | tr '\n' ' ')
summary "exact: $(grep -E '[0-9]+ (passed|failed)' "$RES/exact.txt" | tail -1)${ties:+; near-ties (margins): $ties}"
exit $rc
