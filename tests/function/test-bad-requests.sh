#!/bin/sh
# Bad requests get a 4xx with a clear JSON error and the function keeps
# serving; bad configuration exits with its documented status; SIGTERM
# drains: a request waiting for its batch is still answered, then exit 0.
set -eu
. "$(dirname "$0")/../lib/function.sh"
model="$MODELS/silero_vad_v5.onnx"
fn_start bad --model "$model" --private
url=$FN_URL_bad

expect() { # STATUS BODY MESSAGE_PART
    got=$(fn_post "$url" "$2")
    [ "${got%% *}" = "$1" ] || fail "body '$2': got $got, want $1"
    printf '%s' "${got#* }" | jq -e --arg m "$3" '.error | contains($m)' >/dev/null ||
        fail "body '$2': error does not say '$3': $got"
}
expect 400 'garbage' 'not JSON'
expect 400 '{"seed":' 'not JSON'
expect 400 '[1,2]' 'JSON object'
expect 400 '{"seed":"7"}' 'integer'
expect 400 '{"seed":-1}' 'integer'
expect 400 '{"seed":1.5}' 'integer'
expect 400 '{"seed":1,"extra":2}' 'unknown field "extra"'
big=$(head -c 8000 /dev/zero | tr '\0' ' ')
expect 413 "{\"seed\":1}$big" 'large'
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/")" = 405 ] || fail "GET / is not 405"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/nope")" = 404 ] || fail "unknown path is not 404"
got=$(fn_post "$url" '{"seed":2}')
[ "${got%% *}" = 200 ] || fail "not serving after bad requests: $got"
[ "$(metric_at "$url" 'tetris_function_requests_total{code="400"}')" = 7 ] ||
    fail "400s not counted"
echo "ok bad requests: 400/405/404/413 with clear errors, still serving"

# SIGTERM drains: a request waiting for a batch that will never fill is
# answered at once, then the process exits 0.
fn_start drain --model "$model" --private --batch 8 --max-wait-ms 60000
curl -s -o "$WORK/drain.body" -w '%{http_code}' --data-binary '{"seed":5}' "$FN_URL_drain/" \
    >"$WORK/drain.status" &
client=$!
wait_until 30 '[ "$(metric_at "$FN_URL_drain" tetris_function_queue_depth)" = 1 ]' || fail "request never queued"
kill -TERM "$FN_PID_drain"
wait "$FN_PID_drain" || fail "drain: exit status $?"
wait $client || fail "drain: client failed"
[ "$(cat "$WORK/drain.status")" = 200 ] || fail "queued request not answered: $(cat "$WORK/drain.status")"
[ "$(jq -r .sha256 "$WORK/drain.body")" = "$(want_sha "$model" 5)" ] || fail "drained answer wrong"
echo "ok SIGTERM drains a queued request and exits 0"

# Configuration errors.
[ "$(status "$BIN/tetris-function" --help)" = 0 ] || fail "--help"
"$BIN/tetris-function" --version | grep -q '^tetris-function ' || fail "--version"
[ "$(status "$BIN/tetris-function")" = 2 ] || fail "no model is not usage error"
grep -q TETRIS_MODEL "$WORK/status.err" || fail "no model: message does not name TETRIS_MODEL"
[ "$(status env TETRIS_BATCH=0 "$BIN/tetris-function" --model "$model")" = 2 ] || fail "TETRIS_BATCH=0"
grep -q TETRIS_BATCH "$WORK/status.err" || fail "TETRIS_BATCH=0: message does not name it"
[ "$(status env TETRIS_CONCURRENCY=x "$BIN/tetris-function" --model "$model")" = 2 ] || fail "bad concurrency"
[ "$(status "$BIN/tetris-function" --model "$model" --max-wait-ms -1)" = 2 ] || fail "bad max wait"
[ "$(status "$BIN/tetris-function" --model "$WORK/missing.onnx" --private)" = 3 ] || fail "missing model not 3"
head -c 1000 /dev/urandom >"$WORK/junk.onnx"
# The function serves HTTP while it loads: a free port, so that the model's
# error is the one seen.
[ "$(status "$BIN/tetris-function" --model "$WORK/junk.onnx" --private --listen 127.0.0.1:0)" = 3 ] ||
    fail "junk model not 3"
[ "$(status "$BIN/tetris-function" --model "$model" --private --listen 127.0.0.1:notaport)" = 1 ] ||
    fail "bad listen address not 1"
echo "ok configuration errors: usage 2, bad model 3, cannot listen 1"
