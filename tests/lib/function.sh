# tests/lib/function.sh - helpers for tetris-function's tests (sourced;
# sources tests/lib/common.sh): fn_start NAME ARGS... (starts a function on
# a free loopback port, waits for its ready line; sets FN_PID_<NAME> and
# FN_URL_<NAME>), fn_post URL BODY (prints "STATUS BODY"), want_sha
# MODEL SEED (tetris-onnx-run's output hash), and for the Open Inference
# Protocol OIP_TOOL (tests/function/oip_tool.py) and oip_infer (POST
# /v2/models/NAME/infer).
# shellcheck shell=sh
. "$(dirname "$0")/../lib/common.sh"
need_models

# fn_start NAME ARGS...: tetris-function ARGS on 127.0.0.1:0.
fn_start() {
    _name=$1
    shift
    rm -f "$WORK/$_name.ready"
    "$BIN/tetris-function" --listen 127.0.0.1:0 "$@" >"$WORK/$_name.ready" 2>"$WORK/$_name.log" &
    _pid=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $_pid"
    wait_output $_pid "$WORK/$_name.ready" "$_name: tetris-function" "$WORK/$_name.log"
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

# The Open Inference Protocol client's side (tests/function/oip_tool.py).
OIP_TOOL="/usr/bin/python3 $ROOT/tests/function/oip_tool.py"

# oip_infer URL NAME FILE [HEADER_LENGTH [OUT]]: POSTs FILE to
# URL/v2/models/NAME/infer, with Inference-Header-Content-Length when
# HEADER_LENGTH is not empty; prints the HTTP status. The reply's body goes
# to OUT (default $WORK/oip.out), its headers to OUT.headers and its
# Inference-Header-Content-Length to OUT.hl (empty when it has none).
oip_infer() {
    _url="$1/v2/models/$2/infer"
    _out=${5:-$WORK/oip.out}
    if [ -n "${4:-}" ]; then
        curl -s -D "$_out.headers" -o "$_out" -w '%{http_code}' \
            -H "Inference-Header-Content-Length: $4" -H 'Content-Type: application/octet-stream' \
            --data-binary @"$3" "$_url" || fail "POST $_url failed (curl)"
    else
        curl -s -D "$_out.headers" -o "$_out" -w '%{http_code}' \
            -H 'Content-Type: application/json' --data-binary @"$3" "$_url" ||
            fail "POST $_url failed (curl)"
    fi
    tr -d '\r' <"$_out.headers" |
        sed -n 's/^[Ii]nference-[Hh]eader-[Cc]ontent-[Ll]ength: *//p' >"$_out.hl"
}
