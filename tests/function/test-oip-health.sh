#!/bin/sh
# Readiness follows loading: while the model loads (its node daemon stalls
# the ingest) the function already serves HTTP and is live
# (/v2/health/live 200) but not ready: /v2/health/ready, the model's ready,
# of-watchdog's /_/health, the metadata, inference (V2 and POST /) and
# /metrics answer 503. Once the daemon goes away the agent falls back to a
# private load and every one of them answers 200.
set -eu
. "$(dirname "$0")/../lib/function.sh"
model="$MODELS/silero_vad_v5.onnx"
name=silero_vad_v5
store="$WORK/store"
mkdir -p "$store"
"$BIN/tetris-agent" load --direct --store "$store" "$model" >/dev/null 2>&1 # lay the store out
rm -f "$store/public/ingest.sock"
"$BIN/tetris-test-fake-daemon" stall "$store/public/ingest.sock" >"$WORK/stall.ready" &
stall=$!
KILL_ON_EXIT="$KILL_ON_EXIT $stall"
wait_until 10 '[ -s "$WORK/stall.ready" ]' || fail "fake daemon not ready"
"$BIN/tetris-onnx-run" "$model" --private --seed 2 --oip-request "$WORK/req.json" >/dev/null 2>&1

port=$(free_port)
url="http://127.0.0.1:$port"
"$BIN/tetris-function" --model "$model" --store "$store" --listen "127.0.0.1:$port" \
    >"$WORK/fn.ready" 2>"$WORK/fn.log" &
fn=$!
KILL_ON_EXIT="$KILL_ON_EXIT $fn"
code() { # METHOD PATH: the status of a request
    curl -s -o "$WORK/code.out" -w '%{http_code}' -X "$1" --data-binary @"$WORK/req.json" "$url$2"
}
wait_until 60 '[ "$(code GET /v2/health/live)" = 200 ] || ! kill -0 $fn' || fail "never live"
kill -0 $fn 2>/dev/null || fail "tetris-function died: $(tail -n 5 "$WORK/fn.log")"
# The agent waits for the stalled daemon (up to its 30 s timeout) meanwhile.
[ ! -s "$WORK/fn.ready" ] || fail "loaded although the daemon stalls"
[ "$(code GET /v2/health/ready)" = 503 ] && [ "$(cat "$WORK/code.out")" = '{"ready":false}' ] ||
    fail "ready while loading: $(cat "$WORK/code.out")"
[ "$(code GET /v2/models/$name/ready)" = 503 ] &&
    [ "$(cat "$WORK/code.out")" = '{"name":"silero_vad_v5","ready":false}' ] ||
    fail "model ready while loading: $(cat "$WORK/code.out")"
for p in "GET /_/health" "GET /healthz" "GET /v2/models/$name" "POST /v2/models/$name/infer" \
    "POST /" "GET /metrics"; do
    # shellcheck disable=SC2086
    [ "$(code $p)" = 503 ] || fail "$p while loading: $(cat "$WORK/code.out")"
done
[ "$(code GET /v2)" = 200 ] || fail "server metadata while loading"
[ ! -s "$WORK/fn.ready" ] || fail "the load ended during the checks; they proved nothing"
echo "ok loading: live, not ready; health, metadata, inference, metrics 503"

kill -TERM $stall
wait_until 60 '[ -s "$WORK/fn.ready" ] || ! kill -0 $fn' || fail "never loaded"
jq -e '.fell_back == true' "$WORK/fn.ready" >/dev/null || fail "no fallback: $(cat "$WORK/fn.ready")"
for p in "GET /v2/health/ready" "GET /v2/models/$name/ready" "GET /_/health" "GET /v2/models/$name" \
    "POST /v2/models/$name/infer" "GET /metrics"; do
    # shellcheck disable=SC2086
    [ "$(code $p)" = 200 ] || fail "$p once loaded: $(cat "$WORK/code.out")"
done
kill -TERM $fn
wait $fn || fail "exit status $? after SIGTERM"
echo "ok loaded (private fallback): ready, and everything answers"
