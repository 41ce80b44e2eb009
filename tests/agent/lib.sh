# lib.sh - shared set-up for the agent's shell tests (sourced).
# Gives: $BIN (programs under test), $MODELS (real ONNX models), $WORK (a
# scratch dir on tmpfs, removed on exit), fail(), json_get(), assert_shared().
set -eu
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the programs under test}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODELS="${TETRIS_MODELS:-$ROOT/.deps/models}"
# Under ASan: ONNX Runtime's own leaks are not ours (see lsan.supp).
export LSAN_OPTIONS="suppressions=$ROOT/tests/agent/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || shm="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$shm/tetris-agent-test.XXXXXX")"
cleanup() {
    for p in ${KILL_ON_EXIT:-}; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    chmod -R u+w "$WORK" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# json_get JSON KEY: a top-level value of a one-line JSON object.
json_get() {
    printf '%s\n' "$1" | jq -r ".$2"
}

# assert_shared JSON WHAT: a load that did not fall back and maps every
# tensor but the tiny ones (under AGENT_MIN_MAPPED_BYTES = 128, read privately).
assert_shared() {
    printf '%s\n' "$1" | jq -e '.fell_back == false and .mapped_bytes > 0 and
        .mapped_bytes + .private_bytes == .bytes and .private_bytes < 128 * .tensors' \
        >/dev/null || fail "$2: not served from the store: $1"
}

ls "$MODELS"/*.onnx >/dev/null 2>&1 || fail "no real models in $MODELS (run scripts/deps.sh)"
