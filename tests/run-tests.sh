#!/bin/sh
# run-tests.sh - runs Check unit-test binaries, then shell tests.
# Usage: run-tests.sh UNIT_BIN... -- SHELL_TEST...
# Environment: TETRIS_BIN (programs under test), TETRIS_BUILD (build dir).
# Exit status: 0 when every test passed, 1 otherwise.
set -u
failed=0
passed=0
phase=unit
for t in "$@"; do
    if [ "$t" = "--" ]; then phase=shell; continue; fi
    start=$(date +%s)
    if [ "$phase" = unit ]; then
        CK_VERBOSITY=normal "$t"
    else
        sh "$t"
    fi
    rc=$?
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1)); echo "PASS $t (${secs}s)"
    else
        failed=$((failed + 1)); echo "FAIL $t rc=$rc (${secs}s)"
    fi
done
echo "tests passed=$passed failed=$failed"
[ $failed -eq 0 ]
