#!/bin/sh
# run-tests.sh - runs Check unit-test binaries, then shell tests, one at a
# time, and sums them up.
# Usage: run-tests.sh UNIT_BIN... -- SHELL_TEST...
# Environment: TETRIS_BIN (programs under test), TETRIS_BUILD (build dir).
#
# A test passes with exit status 0 and is skipped with 77 (automake's
# convention): it cannot run here, for a reason outside the code under test
# (no writable memory cgroup, not root for the local cluster, no prometheus
# installed). It says why on stderr and, through skip() in
# tests/lib/common.sh, in the file $TETRIS_TEST_SKIP_FILE, which this
# script prints as "SKIP test (reason)". Any other status is a failure.
#
# Exit status: 0 when no test failed, 1 otherwise. A skip does not fail the
# run; the summary counts skips apart from passes, so a run that skipped
# is never mistaken for one that passed everything.
set -u
failed=0
passed=0
skipped=0
failed_list=""
skipped_list=""
skip_file="$(mktemp)" || exit 1
trap 'rm -f "$skip_file"' EXIT
trap 'exit 1' INT TERM
phase=unit
for t in "$@"; do
    if [ "$t" = "--" ]; then phase=shell; continue; fi
    : >"$skip_file"
    start=$(date +%s)
    if [ "$phase" = unit ]; then
        TETRIS_TEST_SKIP_FILE="$skip_file" CK_VERBOSITY=normal "$t"
    else
        TETRIS_TEST_SKIP_FILE="$skip_file" sh "$t"
    fi
    rc=$?
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        echo "PASS $t (${secs}s)"
    elif [ $rc -eq 77 ]; then
        reason="$(head -n 1 "$skip_file")"
        skipped=$((skipped + 1))
        skipped_list="$skipped_list
  $t (${reason:-no reason given})"
        echo "SKIP $t (${reason:-no reason given})"
    else
        failed=$((failed + 1))
        failed_list="$failed_list $t"
        echo "FAIL $t rc=$rc (${secs}s)"
    fi
done
echo "tests passed=$passed failed=$failed skipped=$skipped"
[ $skipped -eq 0 ] || echo "skipped:$skipped_list"
[ $failed -eq 0 ] || echo "failed:$failed_list"
[ $failed -eq 0 ]
