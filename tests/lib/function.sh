# lib.sh - shared set-up for tetris-function's tests (sourced).
# Gives: $BIN, $MODELS, $WORK (scratch on tmpfs, removed on exit), fail(),
# fn_start NAME ARGS... (starts a function on a free loopback port, waits
# for its ready line; sets FN_PID_<NAME> and FN_URL_<NAME>), fn_post URL
# BODY (prints "STATUS BODY"), and want_sha MODEL SEED (tetris-onnx-run's
# output hash).
set -eu
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the programs under test}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODELS="${TETRIS_MODELS:-$ROOT/.deps/models}"
export LSAN_OPTIONS="suppressions=$ROOT/tests/agent/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || shm="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$shm/tetris-function-test.XXXXXX")"
KILL_ON_EXIT=""
cleanup() {
    for p in $KILL_ON_EXIT; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
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

# fn_start NAME ARGS...: tetris-function ARGS on 127.0.0.1:0.
fn_start() {
    _name=$1
    shift
    rm -f "$WORK/$_name.ready"
    "$BIN/tetris-function" --listen 127.0.0.1:0 "$@" >"$WORK/$_name.ready" 2>"$WORK/$_name.log" &
    _pid=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $_pid"
    _i=0
    while [ ! -s "$WORK/$_name.ready" ]; do
        kill -0 $_pid 2>/dev/null || fail "$_name: tetris-function exited before ready"
        _i=$((_i + 1))
        [ $_i -lt 600 ] || fail "$_name: no ready line"
        sleep 0.1
    done
    eval "FN_PID_$_name=$_pid"
    eval "FN_URL_$_name=http://127.0.0.1:$(jq -r .port "$WORK/$_name.ready")"
}

# fn_post URL BODY: "STATUS BODY" of POST URL/.
fn_post() {
    curl -s -o "$WORK/post.body" -w '%{http_code}' --data-binary "$2" "$1/" >"$WORK/post.status" ||
        fail "POST $1/ failed (curl)"
    printf '%s %s\n' "$(cat "$WORK/post.status")" "$(cat "$WORK/post.body")"
}

# want_sha MODEL SEED: the output hash tetris-onnx-run gives.
want_sha() {
    "$BIN/tetris-onnx-run" "$1" --private --seed "$2" 2>"$WORK/onnx-run.log" | jq -r .sha256
}
