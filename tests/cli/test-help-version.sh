#!/bin/sh
# test-help-version.sh - every program in $BIN answers --help (exit 0,
# a usage text), --version (exit 0, "<program> <version>") and an unknown
# option (exit 2, the usage convention, with a message on stderr), without
# running its real work; a program with commands answers COMMAND --help. The timeout only keeps a program that ignores the
# flag (and serves or runs a suite instead) from hanging the run.
set -u
. "$(dirname "$0")/../lib/common.sh"
failed=0
checked=0

# miss PROGRAM-AND-WHAT: one program broke the convention; the others are
# still checked.
miss() {
    echo "FAIL $*" >&2
    failed=$((failed + 1))
}

for prog in "$BIN"/*; do
    [ -f "$prog" ] && [ -x "$prog" ] || continue
    name=$(basename "$prog")
    checked=$((checked + 1))

    timeout 60 "$prog" --help </dev/null >"$WORK/out" 2>"$WORK/err"
    rc=$?
    if [ $rc -ne 0 ]; then
        miss "$name --help: exit $rc, want 0: $(head -c 300 "$WORK/err")"
    elif ! grep -qi usage "$WORK/out"; then
        miss "$name --help: no usage text on stdout"
    fi

    timeout 60 "$prog" --version </dev/null >"$WORK/out" 2>"$WORK/err"
    rc=$?
    if [ $rc -ne 0 ]; then
        miss "$name --version: exit $rc, want 0: $(head -c 300 "$WORK/err")"
    elif ! awk -v name="$name" 'NR == 1 && $1 == name && $2 ~ /^[0-9]+\.[0-9]+/ { ok = 1 }
                                END { exit !ok }' "$WORK/out"; then
        miss "$name --version: printed '$(head -c 100 "$WORK/out")', want '$name VERSION'"
    fi

    timeout 60 "$prog" --no-such-option </dev/null >"$WORK/out" 2>"$WORK/err"
    rc=$?
    if [ $rc -ne 2 ]; then
        miss "$name --no-such-option: exit $rc, want 2 (usage): $(head -c 300 "$WORK/err")"
    elif [ ! -s "$WORK/err" ]; then
        miss "$name --no-such-option: nothing on stderr"
    fi
done

# A program with commands answers COMMAND --help too (exit 0, usage).
for cmd in "tetris-agent index load view exec check-view" "tetris-profiler profile index job load" \
    "tetris-autoscaler plan run"; do
    set -- $cmd
    prog=$1
    shift
    for sub in "$@"; do
        timeout 60 "$BIN/$prog" "$sub" --help </dev/null >"$WORK/out" 2>"$WORK/err"
        rc=$?
        if [ $rc -ne 0 ]; then
            miss "$prog $sub --help: exit $rc, want 0: $(head -c 300 "$WORK/err")"
        elif ! grep -qi usage "$WORK/out"; then
            miss "$prog $sub --help: no usage text on stdout"
        fi
    done
done

if [ $checked -eq 0 ]; then
    fail "no programs in $BIN"
fi
echo "help-version: programs=$checked failed=$failed"
[ $failed -eq 0 ]
