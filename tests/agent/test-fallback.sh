#!/bin/sh
# Degrade, don't fail: no store directory, a dead daemon and a stalled
# daemon each give a private load with one fallback log line, and the
# model's output is unchanged. (A full store is covered by test_agent.c.)
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
model="$MODELS/silero_vad_v5.onnx"
want=$("$BIN/tetris-onnx-run" "$model" --private 2>/dev/null | jq -r .sha256)

check() { # name reason output
    out=$3
    [ "$(json_get "$out" fell_back)" = true ] || fail "$1: did not fall back"
    [ "$(json_get "$out" fallback_reason)" = "$2" ] || fail "$1: reason $(json_get "$out" fallback_reason)"
    [ "$(json_get "$out" mapped_bytes)" = 0 ] || fail "$1: mapped something"
    [ "$(json_get "$out" sha256)" = "$want" ] || fail "$1: output differs"
    [ "$(grep -c 'event=fallback' "$WORK/err")" -eq 1 ] || fail "$1: expected one fallback log line"
    grep -q "event=fallback reason=$2" "$WORK/err" || fail "$1: log line lacks the reason"
    echo "ok $1: $2"
}

out=$("$BIN/tetris-onnx-run" "$model" --store "$WORK/missing" 2>"$WORK/err") || fail "missing store: exit $?"
check "missing store" store-unavailable "$out"

out=$("$BIN/tetris-onnx-run" "$model" --store "$WORK/missing" --direct 2>"$WORK/err") || fail "missing store (direct): exit $?"
check "missing store, direct mode" store-unavailable "$out"

store="$WORK/store"
mkdir -p "$store"
"$BIN/tetris-agent" load --direct --store "$store" "$model" >/dev/null 2>&1 # lay the store out
"$BIN/tetris-test-fake-daemon" dead "$store/public/ingest.sock" || fail "cannot fake a dead daemon"
out=$("$BIN/tetris-onnx-run" "$model" --store "$store" 2>"$WORK/err") || fail "dead daemon: exit $?"
check "dead daemon" daemon-unavailable "$out"

rm -f "$store/public/ingest.sock"
"$BIN/tetris-test-fake-daemon" stall "$store/public/ingest.sock" >"$WORK/ready" &
KILL_ON_EXIT="$KILL_ON_EXIT $!"
wait_until 10 '[ -s "$WORK/ready" ]' || fail "fake daemon not ready"
out=$("$BIN/tetris-agent" load --store "$store" --timeout-ms 300 "$model" 2>"$WORK/err") || fail "stalled daemon: exit $?"
[ "$(json_get "$out" fallback_reason)" = daemon-timeout ] || fail "stalled daemon: reason $(json_get "$out" fallback_reason)"
[ "$(json_get "$out" private_bytes)" = "$(json_get "$out" bytes)" ] || fail "stalled daemon: not all private"
echo "ok stalled daemon: daemon-timeout"
