#!/bin/sh
# Pulls from a hostile registry (tetris-test-fault-registry serving a copy
# of a real artifact): a blob whose bytes are not its digest, a truncated
# one, an oversized one, a redirect to a host not on the list. Each is
# refused with a message, the spoiled tensor is never published, the
# registry the redirect names is never asked, the failures are counted by
# reason, and the daemon goes on to serve a good pull. A failed pull
# leaves the store as it was: the good tensors it published before it
# failed are withdrawn (no temp file either), except those another
# instance came to reference meanwhile (the model's variant, loaded while
# the pull waits for its last, spoiled blob).
set -eu
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$(dirname "$0")/../lib/registry.sh"
registry_with_hello
host=$REGISTRY_HOST
run=$RUN
art="$WORK/artifact"
registry_copy_artifact "$art"
target=$TARGET
target_file=$TARGET_FILE

fault_registry elsewhere --dir "$art"
fault_registry corrupt --dir "$art" --fault corrupt --target "$target"
fault_registry truncate --dir "$art" --fault truncate --target "$target"
fault_registry oversize --dir "$art" --fault oversize --target "$target"
# shellcheck disable=SC2154 # set by fault_registry
fault_registry redirect --dir "$art" --fault redirect --target "$target" \
    --redirect-port "$PORT_elsewhere"
# The tensors v1 shares with its variant, and the smallest of its own,
# which a registry answers 503 (Retry-After: 2) until the pull gives up:
# the other blobs are fetched and published meanwhile.
"$PROBE" manifest "$MODELS/hello_deepa_old.onnx" | jq -r '.tensors[].digest | sub("sha256:"; "")' |
    sort -u >"$WORK/old.digests"
shared=$(jq -r '.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1") |
                .digest | sub("sha256:"; "")' "$art/manifest" | sort -u |
         grep -xF -f "$WORK/old.digests")
[ -n "$shared" ] || fail "hello and its variant share no tensor"
last=$(jq -r '[.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1")] |
              sort_by(.size) | .[].digest | sub("sha256:"; "")' "$art/manifest" |
       grep -vxF -f "$WORK/old.digests" | head -1)
[ -n "$last" ] || fail "hello has no tensor of its own"
fault_registry late --dir "$art" --fault status --status 503 --retry-after 2 --target "$last"
# shellcheck disable=SC2154 # set by fault_registry
start_daemon --registries "$host,127.0.0.1:$PORT_corrupt,127.0.0.1:$PORT_truncate,127.0.0.1:$PORT_oversize,127.0.0.1:$PORT_redirect,127.0.0.1:$PORT_late"

# store_list: the store's tensors, one digest a line, sorted.
store_list() { find "$STORE/public/tensors" -type f -printf '%f\n' | sort; }
# no_temp_files WHAT: nothing left in the store's tmp/.
no_temp_files() {
    [ -z "$(ls -A "$STORE/private/tmp" 2>/dev/null)" ] ||
        fail "$1: temp files left: $(ls -A "$STORE/private/tmp")"
}
before=$(store_list)

# refused NAME MESSAGE: a pull from that registry fails saying MESSAGE, and
# the spoiled tensor is not in the store.
refused() {
    eval "_port=\$PORT_$1"
    [ "$(status "$run" "oci://127.0.0.1:$_port/models/hello:v1" --store "$STORE")" != 0 ] ||
        fail "$1: the pull succeeded"
    grep -q "$2" "$WORK/status.err" || fail "$1: message: $(tail -2 "$WORK/status.err")"
    [ ! -e "$target_file" ] || fail "$1: the spoiled tensor was published"
    grep -q "GET /v2/models/hello/blobs/sha256:$target" "$WORK/$1.requests" ||
        fail "$1: the spoiled blob was never asked for"
    daemon_alive || fail "$1: the daemon died"
    [ "$(store_list)" = "$before" ] || fail "$1: the store is not as it was: $(store_list)"
    no_temp_files "$1"
}
refused corrupt "do not match\|corrupt"
refused truncate "ended after"
refused oversize "more than the"
refused redirect "is not one this node may reach"
[ ! -s "$WORK/elsewhere.requests" ] ||
    fail "the redirect's target was asked: $(cat "$WORK/elsewhere.requests")"
[ "$(metric 'tetris_pull_failures_total{reason="corrupt"}')" = 3 ] ||
    fail "corrupt failures: $(metric 'tetris_pull_failures_total{reason="corrupt"}')"
[ "$(metric 'tetris_pull_failures_total{reason="denied"}')" = 1 ] || fail "denied failures"
[ "$(metric tetris_pull_bytes_total)" = 0 ] || fail "a failed pull counted pulled bytes"
# No reference is held by a failed pull: no holder names the spoiled model.
[ -z "$(ls "$STORE/private/holders" 2>/dev/null)" ] ||
    fail "holders after failed pulls: $(ls "$STORE/private/holders")"
# What they published was withdrawn, said once per pull and counted: the
# good tensors a pull fetched before its spoiled one failed (on 8 threads
# the others are usually done by then; the rest it fetches no further).
n_tensors=$(jq '[.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1")] | length' \
            "$art/manifest")
logged=$(sed -n 's/.*event=pull-withdrawn.* tensors=\([0-9]*\).*/\1/p' "$DAEMON_LOG")
[ "$(printf '%s\n' "$logged" | grep -c .)" -le 4 ] ||
    fail "withdrawals logged: $(grep event=pull-withdrawn "$DAEMON_LOG")"
for n in $logged; do
    [ "$n" -le $((n_tensors - 1)) ] || fail "a pull withdrew $n tensors, it had $((n_tensors - 1)) good ones"
done
withdrawn=$(metric tetris_pull_withdrawn_tensors_total)
[ "$withdrawn" = "$(printf '%s\n' $logged | awk '{ s += $1 } END { print s + 0 }')" ] ||
    fail "withdrawn tensors: $withdrawn counted, logged: $logged"

# While the pull waits for its last blob, the variant loads through the
# daemon and references the tensors the two share, which the pull has
# published. The pull then fails and withdraws only what is its alone:
# the store is what the variant references.
"$run" "oci://127.0.0.1:$PORT_late/models/hello:v1" --store "$STORE" >/dev/null \
    2>"$WORK/late.err" &
late_pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $late_pid"
shared_published() {
    for _d in $shared; do [ -f "$STORE/public/tensors/$(printf %.2s "$_d")/$_d" ] || return 1; done
    grep -q "GET /v2/models/hello/blobs/sha256:$last" "$WORK/late.requests"
}
wait_until 30 shared_published || fail "the late pull did not publish the shared tensors"
hold "$MODELS/hello_deepa_old.onnx" "$WORK/old.hold"
! wait "$late_pid" || fail "the late pull succeeded"
grep -q "HTTP 503" "$WORK/late.err" || fail "late: message: $(tail -2 "$WORK/late.err")"
line=$(grep 'event=pull-withdrawn' "$DAEMON_LOG" | tail -1)
kept=$(printf '%s\n' "$line" | sed -n 's/.* kept=\([0-9]*\).*/\1/p')
[ "$kept" = "$(printf '%s\n' "$shared" | wc -l)" ] ||
    fail "the pull did not keep exactly the tensors the variant references: $line"
held=$(cat "$STORE"/private/holders/*.ref | grep -o '[0-9a-f]\{64\}' | sort -u)
[ "$(store_list)" = "$held" ] ||
    fail "the store holds what the variant does not reference: $(store_list | grep -vxF "$held")"
no_temp_files late
# With the variant still held, a failed pull of v1 leaves the tensors the
# variant had before it (the shared ones were not the pull's to withdraw).
before=$(store_list)
refused corrupt "do not match\|corrupt"
release "$HOLD_PID"

# The daemon still serves: the real registry's artifact pulls and runs.
want=$("$run" "$MODELS/hello_deepa.onnx" --private 2>/dev/null | jq -r .sha256)
out=$("$run" "oci://$host/models/hello:v1" --store "$STORE" 2>"$WORK/good.err") ||
    fail "good pull: $(tail -3 "$WORK/good.err")"
[ "$(json_get "$out" sha256)" = "$want" ] || fail "outputs differ: $out"
[ -f "$target_file" ] || fail "the good pull did not publish the tensor"
http_get /metrics | promtool check metrics >"$WORK/promtool.out" 2>&1 ||
    fail "promtool: $(cat "$WORK/promtool.out")"
stop_daemon

# A pull stops at its first failure: one blob at a time (largest first,
# the spoiled one), into an empty store, it asks for no tensor after it.
STORE="$WORK/store-serial"
start_daemon --pull-parallel 1 --registries "127.0.0.1:$PORT_corrupt"
: >"$WORK/corrupt.requests"
[ "$(status "$run" "oci://127.0.0.1:$PORT_corrupt/models/hello:v1" --store "$STORE")" != 0 ] ||
    fail "serial: the pull succeeded"
grep -q "do not match\|corrupt" "$WORK/status.err" ||
    fail "serial: not the spoiled blob's message: $(tail -2 "$WORK/status.err")"
jq -r '.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1") | .digest' \
    "$art/manifest" >"$WORK/tensor.layers"
asked=$(grep -o 'GET /v2/models/hello/blobs/sha256:[0-9a-f]*' "$WORK/corrupt.requests" |
        sed 's/.*blobs\///' | grep -xF -f "$WORK/tensor.layers" | sort -u)
[ "$asked" = "sha256:$target" ] ||
    fail "serial: tensors asked for: $(printf '%s\n' "$asked" | tr '\n' ' ') (want only the spoiled one)"
[ -z "$(find "$STORE/public/tensors" -type f)" ] || fail "serial: the failed pull left tensors"
no_temp_files serial
stop_daemon
echo "ok a failed pull fetches no tensor after its failure"
echo "PASS $PROG"
