#!/bin/sh
# test-help-version.sh - every program in $TETRIS_BIN answers --help (exit 0,
# a usage text), --version (exit 0, "<program> <version>") and an unknown
# option (exit 2, the usage convention, with a message on stderr), without
# running its real work. The timeout only keeps a program that ignores the
# flag (and serves or runs a suite instead) from hanging the run.
set -u
: "${TETRIS_BIN:?TETRIS_BIN must name the directory of binaries under test}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
checked=0

fail() {
    echo "FAIL $*" >&2
    failed=$((failed + 1))
}

for prog in "$TETRIS_BIN"/*; do
    [ -f "$prog" ] && [ -x "$prog" ] || continue
    name=$(basename "$prog")
    checked=$((checked + 1))

    timeout 60 "$prog" --help </dev/null >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ]; then
        fail "$name --help: exit $rc, want 0: $(head -c 300 "$tmp/err")"
    elif ! grep -qi usage "$tmp/out"; then
        fail "$name --help: no usage text on stdout"
    fi

    timeout 60 "$prog" --version </dev/null >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ]; then
        fail "$name --version: exit $rc, want 0: $(head -c 300 "$tmp/err")"
    elif ! awk -v name="$name" 'NR == 1 && $1 == name && $2 ~ /^[0-9]+\.[0-9]+/ { ok = 1 }
                                END { exit !ok }' "$tmp/out"; then
        fail "$name --version: printed '$(head -c 100 "$tmp/out")', want '$name VERSION'"
    fi

    timeout 60 "$prog" --no-such-option </dev/null >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 2 ]; then
        fail "$name --no-such-option: exit $rc, want 2 (usage): $(head -c 300 "$tmp/err")"
    elif [ ! -s "$tmp/err" ]; then
        fail "$name --no-such-option: nothing on stderr"
    fi
done

if [ $checked -eq 0 ]; then
    echo "FAIL no programs in $TETRIS_BIN" >&2
    exit 1
fi
echo "help-version: programs=$checked failed=$failed"
[ $failed -eq 0 ]
