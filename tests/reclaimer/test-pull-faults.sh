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
need_models
registry_start
host="127.0.0.1:$REGISTRY_PORT"
accept='Accept: application/vnd.oci.image.manifest.v1+json'
run="$BIN/tetris-onnx-run"

"$BIN/tetris-registry" push "$MODELS/hello_deepa.onnx" "oci://$host/models/hello:v1" \
    >/dev/null 2>"$WORK/push.log" || fail "push: $(cat "$WORK/push.log")"
# The artifact, copied for the fault registry.
art="$WORK/artifact"
mkdir -p "$art/blobs"
curl -sf -H "$accept" "$REGISTRY/v2/models/hello/manifests/v1" >"$art/manifest"
for d in $(jq -r '.config.digest, .layers[].digest' "$art/manifest"); do
    curl -sf "$REGISTRY/v2/models/hello/blobs/$d" >"$art/blobs/${d#sha256:}" || fail "blob $d"
done
# The spoiled blob: the largest tensor.
target=$(jq -r '[.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1")] |
                max_by(.size) | .digest | sub("sha256:"; "")' "$art/manifest")
target_file="$STORE/public/tensors/$(printf %.2s "$target")/$target"

# fault_registry NAME FAULT [ARGS]: starts one; sets PORT_<NAME>.
fault_registry() {
    _name=$1
    _fault=$2
    shift 2
    "$BIN/tetris-test-fault-registry" --dir "$art" --fault "$_fault" --target "$target" \
        --port-file "$WORK/$_name.port" --requests "$WORK/$_name.requests" "$@" &
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    wait_until 10 "[ -s '$WORK/$_name.port' ]" || fail "fault registry $_name did not start"
    eval "PORT_$_name=\$(cat '$WORK/$_name.port')"
}
fault_registry elsewhere none
: >"$WORK/elsewhere.requests"
fault_registry corrupt corrupt
fault_registry truncate truncate
fault_registry oversize oversize
fault_registry redirect redirect --redirect-port "$PORT_elsewhere"
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
