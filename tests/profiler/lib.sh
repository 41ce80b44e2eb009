# lib.sh - shared set-up for tetris-profiler's tests (sourced).
# Gives: $BIN, $MODELS, $WORK (scratch on tmpfs, removed on exit), fail().
set -eu
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the programs under test}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODELS="${TETRIS_MODELS:-$ROOT/.deps/models}"
export LSAN_OPTIONS="suppressions=$ROOT/tests/agent/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || shm="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$shm/tetris-profiler-test.XXXXXX")"
cleanup() {
    chmod -R u+w "$WORK" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
    echo "FAIL: $*" >&2
    for f in "$WORK"/*.log; do
        [ -s "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
    done
    exit 1
}

ls "$MODELS"/*.onnx >/dev/null 2>&1 || fail "no real models in $MODELS (run scripts/deps.sh)"

# status CMD...: the exit status of CMD (stderr in $WORK/status.err).
status() {
    set +e
    "$@" >"$WORK/status.out" 2>"$WORK/status.err"
    echo $?
    set -e
}
