#!/bin/sh
# test-gpu-check.sh - tetris-gpu-check, the real-GPU checks: runs them
# where a CUDA driver and GPU are present (every check must pass), and
# otherwise shows that the program says so clearly and exits 77, which
# skips this test (tests/gpu/test-gpu-check-fake.sh runs it on the fake
# driver).
set -u
. "$(dirname "$0")/../lib/common.sh"
unset TETRIS_LIBCUDA
rc=0
"$BIN/tetris-gpu-check" --size $((256 << 20)) >"$WORK/check.out" 2>"$WORK/check.err" || rc=$?
case $rc in
0) note "$(tail -n 1 "$WORK/check.out")" ;;
77)
    grep -q 'SKIP tetris-gpu-check: .*GPU sharing unavailable' "$WORK/check.err" ||
        fail "exit 77 without a clear reason: $(cat "$WORK/check.err")"
    skip "no CUDA driver or GPU here: $(head -c 120 "$WORK/check.err")" ;;
*) cat "$WORK/check.out" >&2; fail "tetris-gpu-check exit $rc: $(tail -n 3 "$WORK/check.err")" ;;
esac
echo "ok $PROG"
