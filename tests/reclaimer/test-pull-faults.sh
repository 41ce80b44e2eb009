#!/bin/sh
# Pulls from a hostile registry (tetris-test-fault-registry serving a copy
# of a real artifact): a blob whose bytes are not its digest, a truncated
# one, an oversized one, a redirect to a host not on the list. Each is
# refused with a message, the spoiled tensor is never published, the
# registry the redirect names is never asked, the failures are counted by
# reason, and the daemon goes on to serve a good pull.
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
# shellcheck disable=SC2154 # set by fault_registry
start_daemon --registries "$host,127.0.0.1:$PORT_corrupt,127.0.0.1:$PORT_truncate,127.0.0.1:$PORT_oversize,127.0.0.1:$PORT_redirect"

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

# The daemon still serves: the real registry's artifact pulls and runs.
want=$("$run" "$MODELS/hello_deepa.onnx" --private 2>/dev/null | jq -r .sha256)
out=$("$run" "oci://$host/models/hello:v1" --store "$STORE" 2>"$WORK/good.err") ||
    fail "good pull: $(tail -3 "$WORK/good.err")"
[ "$(json_get "$out" sha256)" = "$want" ] || fail "outputs differ: $out"
[ -f "$target_file" ] || fail "the good pull did not publish the tensor"
stop_daemon
echo "PASS $PROG"
