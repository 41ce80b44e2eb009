#!/bin/sh
# test-bad-requests.sh - tetris-reclaimer under hostile or broken clients:
# garbage, truncated, huge and stalled messages, wrong or missing
# descriptors, malformed tensor lists, forged digests on the ingest socket;
# unknown paths, wrong methods, oversized bodies and raw garbage over HTTP;
# bad command lines. Each gets a clear error (or a closed connection) and
# the daemon keeps serving; a forged digest never enters the store.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"

SOCK="$STORE/public/ingest.sock"
synth "$WORK/m.safetensors" 4 4096 1
synth "$WORK/other.safetensors" 4 4096 2
"$PROBE" manifest "$WORK/m.safetensors" >"$WORK/m.json" || fail "manifest"
"$PROBE" manifest "$WORK/other.safetensors" >"$WORK/other.json" || fail "manifest"

# request MANIFEST [JQ-FILTER]: an ingest request for MANIFEST's tensors.
request() {
    jq -c "{op: \"ingest\", label: \"bad\", sources: [.model],
            tensors: [.tensors[] | {name, dtype, shape, source_index: 0, offset, length,
                                    nbytes, encoding, digest, crc32}]} | ${2:-.}" "$1"
}

# expect_error WHAT PATTERN CMD...: CMD's reply must be an error matching
# PATTERN (or the connection closed when PATTERN is "closed").
expect_error() {
    what=$1; pattern=$2; shift 2
    out=$("$@" 2>&1)
    case "$pattern" in
    closed) echo "$out" | grep -q -e closed -e '"ok":false' || fail "$what: got $out" ;;
    *) echo "$out" | grep -q '"ok":false' && echo "$out" | grep -q -e "$pattern" ||
           fail "$what: want error ~ $pattern, got $out" ;;
    esac
    daemon_alive || fail "daemon died on: $what"
    note "$what -> $(echo "$out" | cut -c1-110)"
}

send() { "$PROBE" send --socket "$SOCK" "$@"; }

start_daemon --interval 1 --request-timeout 1 --scrub-rate 0

# The socket is every uid's door (its mode set without a process-wide
# umask): a function instance of another uid gets an answer.
[ "$(stat -c %a "$SOCK")" = 666 ] || fail "socket mode $(stat -c %a "$SOCK"), want 666"
chmod a+x "$WORK" "$STORE"
out=$(printf '{"op":"hello"}' | setpriv --reuid=65534 --regid=65534 --clear-groups \
      "$PROBE" send --socket "$SOCK" 2>&1)
echo "$out" | grep -q '"unknown op hello"' || fail "uid 65534 cannot use the socket: $out"
note "socket mode 666: uid 65534 is answered"

expect_error "garbage bytes" "exceeds" sh -c "printf 'hello, daemon' | $PROBE send --socket $SOCK --raw"
expect_error "huge length" "exceeds" sh -c "printf '\377\377\377\377{}' | $PROBE send --socket $SOCK --raw"
expect_error "truncated message" closed sh -c "printf '\144\0\0\0{\"op\"' | $PROBE send --socket $SOCK --raw"
expect_error "stalled client" "timed out" sh -c "printf '\144\0\0\0{\"op\"' | $PROBE send --socket $SOCK --raw --no-eof"
expect_error "idle connection" "no request within" sh -c "printf '' | $PROBE send --socket $SOCK --raw --no-eof"
expect_error "empty message" "not JSON" sh -c "printf '\0\0\0\0' | $PROBE send --socket $SOCK --raw"
expect_error "not JSON" "not JSON" sh -c "printf 'op=ingest' | $PROBE send --socket $SOCK"
expect_error "JSON array" "unknown op" sh -c "printf '[1,2]' | $PROBE send --socket $SOCK"
expect_error "unknown op" "unknown op" sh -c "printf '{\"op\":\"format-disk\"}' | $PROBE send --socket $SOCK"
# bad WHAT PATTERN FILTER SEND-ARGS...: an ingest request for m, edited by
# the jq FILTER, sent with SEND-ARGS, must be refused with PATTERN.
bad() {
    what=$1; pattern=$2; request "$WORK/m.json" "$3" >"$WORK/req.json"; shift 3
    expect_error "$what" "$pattern" sh -c "$PROBE send --socket $SOCK $* <$WORK/req.json"
}
M="--fd $WORK/m.safetensors"
bad "missing fds" "1 sources but 0 descriptors" .
bad "extra fds" "1 sources but 2 descriptors" . $M $M
bad "directory fd" "not a regular file" . --fd "$WORK"
bad "fd of /dev/null" "not a regular file" . --fd /dev/null
bad "O_PATH fd" "not readable (write-only or O_PATH)" . --path-fd "$WORK/m.safetensors"
many=""
i=0
while [ $i -lt 70 ]; do many="$many $M"; i=$((i + 1)); done
bad "too many fds" "descriptors" . $many
bad "region past EOF" "past the end" '.tensors[0].offset = 99999999' $M
bad "offset overflow" "past the end" '.tensors[0].offset = 9007199254740991' $M
bad "negative offset" "needs name" '.tensors[0].offset = -1' $M
bad "absurd shape" "format" '.tensors[0].shape = [4294967296, 4294967296, 4294967296]' $M
bad "shape/nbytes mismatch" "format" '.tensors[0].shape = [3]' $M
bad "unknown dtype" "format" '.tensors[0].dtype = "complex512"' $M
bad "bad digest text" "format" '.tensors[0].digest = "sha256:zz"' $M
bad "source index" "out of range" '.tensors[0].source_index = 3' $M
bad "too many dims" "dims" '.tensors[0].shape = [1,1,1,1,1,1,1,1,1,1]' $M
bad "tensors not a list" "needs" '.tensors = 5' $M
bad "tensor not an object" "not an object" '.tensors[0] = "x"' $M
bad "raw length mismatch" "raw length" '.tensors[0].length = 8' $M
bad "unknown encoding" "encoding" '.tensors[0].encoding = "zstd"' $M
bad "newline in label" "control characters" '.label = "a\nb"' $M
# Client bytes in an error message reach the log escaped: no forged line,
# no terminal escape.
expect_error "log injection" "unknown op" sh -c \
    "printf '{\"op\":\"x\\\\nts=0 level=error event=forged \\\\u001b[31m\\\\r\"}' | $PROBE send --socket $SOCK"
grep -q '^ts=0 ' "$DAEMON_LOG" && fail "a client forged a log line: $(grep '^ts=0 ' "$DAEMON_LOG")"
grep -q "$(printf '[\033\r]')" "$DAEMON_LOG" && fail "control bytes from a client reached the log"
grep -qF 'msg="unknown op x\nts=0 level=error event=forged \x1b[31m\r"' "$DAEMON_LOG" ||
    fail "escaped message not logged: $(grep 'unknown op x' "$DAEMON_LOG")"
[ "$(tensor_count)" = 0 ] || fail "refused requests left tensors in the store"

# A forged digest: m's bytes claimed to be other's first tensor. The daemon
# hashes what it reads, refuses the tensor and publishes nothing under it;
# the client's uid then backs off, so each of the request's other tensors
# is stored, or refused unread if the forged one failed first.
forged=$(jq -r '.tensors[0].digest' "$WORK/other.json")
forged_crc=$(jq -r '.tensors[0].crc32' "$WORK/other.json")
out=$(request "$WORK/m.json" ".tensors[0].digest = \"$forged\" | .tensors[0].crc32 = $forged_crc" |
      send --fd "$WORK/m.safetensors")
echo "$out" | jq -e '.ok and .tensors[0].status == "rejected" and .tensors[0].error == "corrupt"' >/dev/null ||
    fail "forged digest not rejected: $out"
echo "$out" | jq -e '[.tensors[1:][] | .status == "ingested" or
        (.error == "denied" and (.reason | test("failed verification")))] | all' >/dev/null ||
    fail "honest tensors of the same request neither ingested nor backed off: $out"
hex=${forged#sha256:}
http_get /inventory | jq -e --arg d "$hex" '[.tensors[] | select(.digest == $d)] | length == 0' >/dev/null ||
    fail "forged digest visible in the inventory"
[ -z "$(find "$STORE/public/tensors" -name "$hex*")" ] || fail "forged digest present in the store"
# Once the backoff (1 s after a first failure) is over, the same client's
# honest request is served in full.
honest_m() {
    request "$WORK/m.json" | send --fd "$WORK/m.safetensors" |
        jq -e '.ok and ([.tensors[] | .status != "rejected"] | all)' >/dev/null
}
wait_until 30 honest_m || fail "the client's uid stayed backed off"
note "forged digest rejected (corrupt), its client backed off, then served again"

# The daemon still serves a normal client.
"$PROBE" load --store "$STORE" "$WORK/other.safetensors" >"$WORK/ok.json" 2>>"$WORK/probe.log" ||
    fail "normal load after abuse"
grep -q '"fallback":false' "$WORK/ok.json" || fail "normal load fell back: $(cat "$WORK/ok.json")"
[ "$(metric tetris_ingest_errors_total)" -ge 20 ] || fail "refused requests not counted"

# A stalled daemon: the instance times out and loads privately.
kill -STOP "$RECLAIMER_PID"
"$PROBE" load --store "$STORE" --timeout-ms 500 "$WORK/m.safetensors" >"$WORK/stall.json" 2>>"$WORK/probe.log"
kill -CONT "$RECLAIMER_PID"
grep -q '"fallback":true' "$WORK/stall.json" && grep -q 'timeout' "$WORK/stall.json" ||
    fail "stalled daemon: $(cat "$WORK/stall.json")"
grep -q '"private_bytes":16384' "$WORK/stall.json" || fail "stalled daemon: no private load"
note "stalled daemon -> timeout, private load"

# A full backlog (instances starting in a burst, the daemon behind): the
# instance retries the connect and shares, rather than load privately for
# its whole life.
kill -STOP "$RECLAIMER_PID"
mkfifo "$WORK/fill.in"
"$PROBE" fill --socket "$SOCK" <"$WORK/fill.in" >"$WORK/fill.out" 2>&1 &
FILL=$!
exec 7>"$WORK/fill.in"
wait_until 30 "grep -q '^full' '$WORK/fill.out'" || fail "backlog not filled: $(cat "$WORK/fill.out")"
"$PROBE" load --store "$STORE" --timeout-ms 60000 "$WORK/other.safetensors" >"$WORK/busy.json" \
    2>"$WORK/busy.log" 7>&- &
LOADER=$!
wait_until 30 "grep -q 'event=daemon-busy' '$WORK/busy.log'" ||
    fail "instance did not see a full backlog: $(cat "$WORK/busy.log")"
exec 7>&-
wait "$FILL"
kill -CONT "$RECLAIMER_PID"
wait "$LOADER" || fail "load after a full backlog failed: $(cat "$WORK/busy.log")"
grep -q '"fallback":false' "$WORK/busy.json" ||
    fail "full backlog -> private load: $(cat "$WORK/busy.json")"
note "full backlog -> retried connect, shared load"

# HTTP.
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 20 "$@"; }
[ "$(code "http://127.0.0.1:$RECLAIMER_PORT/nope")" = 404 ] || fail "unknown path not 404"
[ "$(code -X POST "http://127.0.0.1:$RECLAIMER_PORT/metrics")" = 405 ] || fail "POST /metrics not 405"
head -c 100000 /dev/zero >"$WORK/big"
[ "$(code -X GET --data-binary @"$WORK/big" "http://127.0.0.1:$RECLAIMER_PORT/inventory")" = 413 ] ||
    fail "oversized body not 413"
[ "$(code "http://127.0.0.1:$RECLAIMER_PORT/inventory?x=%%%%")" = 200 ] || fail "odd query broke /inventory"
for junk in 'GARBAGE\r\n\r\n' 'GET /metrics HTTP/9.9\r\n\r\n' 'GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n' \
            'GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n' '\0\1\2\3\4'; do
    printf "$junk" | "$PROBE" tcp --port "$RECLAIMER_PORT" >/dev/null 2>&1
    daemon_alive || fail "daemon died on HTTP junk: $junk"
done
[ "$(code "http://127.0.0.1:$RECLAIMER_PORT/healthz")" = 200 ] || fail "healthz after HTTP junk"
note "HTTP: 404, 405, 413, junk survived"

# Command line.
"$RECLAIMER" --interval never >/dev/null 2>&1; [ $? = 2 ] || fail "bad --interval not exit 2"
"$RECLAIMER" --capacity 3Zi >/dev/null 2>&1; [ $? = 2 ] || fail "bad --capacity not exit 2"
"$RECLAIMER" --bogus >/dev/null 2>&1; [ $? = 2 ] || fail "unknown flag not exit 2"
"$RECLAIMER" --help | grep -q "Exit status" || fail "--help has no exit codes"
"$RECLAIMER" --version | grep -q "tetris-reclaimer" || fail "--version"
"$RECLAIMER" --store "$WORK/s2" --listen "127.0.0.1:$RECLAIMER_PORT" >"$WORK/busy.log" 2>&1; rc=$?
[ $rc = 1 ] || fail "busy HTTP port: exit $rc, want 1"
grep -q "listen on 127.0.0.1:$RECLAIMER_PORT" "$WORK/busy.log" || fail "busy port error unclear: $(cat "$WORK/busy.log")"
"$RECLAIMER" --store "$STORE" --listen 127.0.0.1:0 >"$WORK/twice.log" 2>&1; rc=$?
[ $rc = 3 ] && grep -q "event=store-served .*served by another daemon" "$WORK/twice.log" ||
    fail "second daemon on one store: exit $rc"
daemon_alive || fail "daemon died"
stop_daemon
note "command line errors: exit 2; unusable address or store: exit 1; a served store: exit 3"

# Connection limit: the third concurrent instance is turned away and loads
# privately; the first two keep their references.
start_daemon --max-connections 2 --scrub-rate 0
hold "$WORK/m.safetensors" "$WORK/h1.json"; H1=$HOLD_PID
hold "$WORK/other.safetensors" "$WORK/h2.json"; H2=$HOLD_PID
"$PROBE" load --store "$STORE" "$WORK/m.safetensors" >"$WORK/h3.json" 2>>"$WORK/probe.log"
grep -q '"fallback":true' "$WORK/h3.json" && grep -q "too many connections" "$WORK/h3.json" ||
    fail "third connection not refused: $(cat "$WORK/h3.json")"
[ "$(metric tetris_ingest_connections)" = 2 ] || fail "connections gauge $(metric tetris_ingest_connections)"
release "$H1"
wait_until 30 '[ "$(metric tetris_ingest_connections)" = 1 ]' || fail "closed connection still counted"
"$PROBE" load --store "$STORE" "$WORK/m.safetensors" >"$WORK/h4.json" 2>>"$WORK/probe.log"
grep -q '"fallback":false' "$WORK/h4.json" || fail "a freed slot was not reusable: $(cat "$WORK/h4.json")"
release "$H2"
stop_daemon
note "connection limit: refused politely, slot reused"
echo "ok $PROG"
