#!/bin/sh
# A model pulled by reference through a real daemon from a real registry
# (docker-registry on loopback) into an empty store: tetris-onnx-run on
# oci://... computes what a private run of the file computes, on the
# store's pages; a variant pulled second fetches only the tensors the store
# lacks (tetris_pull_bytes_total == the bytes of its layers v1 does not
# have, tetris_pull_skipped_bytes_total == those it has); a pinned digest
# pulls that manifest and a wrong one is refused; a registry not on
# --registries is refused and never asked (its request log stays empty),
# as is a listed name that resolves to loopback; the daemon keeps serving.
# The registry is listed without http://: a loopback one, probed for TLS
# once (one event=registry-plain-http for every pull of the daemon's
# life), and a daemon whose host has no CA bundle (the project's image)
# still finds it plain and pulls from it.
set -eu
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$(dirname "$0")/../lib/registry.sh"
registry_with_hello
host=$REGISTRY_HOST
run=$RUN
registry_push "$MODELS/hello_deepa_old.onnx" "oci://$host/models/hello:old"
registry_manifest models/hello old >"$WORK/old.json"

# A registry that must never be asked: it records whatever reaches it.
mkdir -p "$WORK/silent"
fault_registry silent --dir "$WORK/silent"
# shellcheck disable=SC2154 # set by fault_registry
silent=$PORT_silent

# Any name of the hosts file other than localhost that is a loopback address.
loopback_name=$(awk '$1 ~ /^(127\.|::1$)/ { for (i = 2; i <= NF; i++)
                     if ($i != "localhost" && $i ~ /^[a-z0-9.-]+$/) { print $i; exit } }' \
                /etc/hosts 2>/dev/null || true)
loopback_name=${loopback_name:+$loopback_name:$REGISTRY_PORT}
start_daemon --registries "$host${loopback_name:+,$loopback_name}"

# Empty store, first pull: every tensor layer fetched.
want=$("$run" "$MODELS/hello_deepa.onnx" --private 2>/dev/null | jq -r .sha256)
out=$("$run" "oci://$host/models/hello:v1" --store "$STORE" 2>"$WORK/run1.err") ||
    fail "run on the pulled model: $(tail -3 "$WORK/run1.err")"
[ "$(json_get "$out" sha256)" = "$want" ] || fail "pulled outputs differ: $out"
[ "$(json_get "$out" shared_tensors)" -gt 0 ] || fail "nothing shared: $out"
[ "$(json_get "$out" private_bytes)" = 0 ] || fail "private bytes: $out"
v1_bytes=$(jq '[.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1") | .size] | add' \
           "$WORK/v1.json")
[ "$(metric tetris_pull_bytes_total)" = "$v1_bytes" ] ||
    fail "pulled $(metric tetris_pull_bytes_total) bytes, the layers are $v1_bytes"
[ "$(metric tetris_pull_skipped_bytes_total)" = 0 ] || fail "skipped bytes on an empty store"
n_v1=$(jq '[.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1")] | length' \
       "$WORK/v1.json")
[ "$(metric tetris_pull_tensors_total)" = "$n_v1" ] || fail "tensors pulled"
for d in $(jq -r '.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1") |
                  .digest | sub("sha256:"; "")' "$WORK/v1.json"); do
    f="$STORE/public/tensors/$(printf %.2s "$d")/$d"
    [ -f "$f" ] || fail "tensor $d not in the store"
done

# The variant second: only what v1 lacks, byte for byte.
lacked=$(jq -s '([.[0].layers[] | .digest] | map({(.): true}) | add) as $have |
                [.[1].layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1") |
                 select($have[.digest] == null) | .size] | add // 0' "$WORK/v1.json" "$WORK/old.json")
shared=$(jq -s '([.[0].layers[] | .digest] | map({(.): true}) | add) as $have |
                [.[1].layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1") |
                 select($have[.digest] != null) | .size] | add // 0' "$WORK/v1.json" "$WORK/old.json")
[ "$shared" -gt 0 ] || fail "the variant shares no tensor with v1"
want_old=$("$run" "$MODELS/hello_deepa_old.onnx" --private 2>/dev/null | jq -r .sha256)
out=$("$run" "oci://$host/models/hello:old" --store "$STORE" 2>"$WORK/run2.err") ||
    fail "run on the pulled variant: $(tail -3 "$WORK/run2.err")"
[ "$(json_get "$out" sha256)" = "$want_old" ] || fail "variant outputs differ: $out"
[ "$(metric tetris_pull_bytes_total)" = $((v1_bytes + lacked)) ] ||
    fail "variant pulled $(( $(metric tetris_pull_bytes_total) - v1_bytes )) bytes, it lacked $lacked"
[ "$(metric tetris_pull_skipped_bytes_total)" = "$shared" ] ||
    fail "variant skipped $(metric tetris_pull_skipped_bytes_total) bytes, the store had $shared"

# Pinned by digest: that manifest, nothing fetched again (the tag is not read).
digest=$(json_get "$(cat "$WORK/push1")" digest)
before=$(metric tetris_pull_bytes_total)
out=$("$run" "oci://$host/models/hello@$digest" --store "$STORE" 2>"$WORK/run3.err") ||
    fail "pinned pull: $(tail -3 "$WORK/run3.err")"
[ "$(json_get "$out" sha256)" = "$want" ] || fail "pinned outputs differ"
[ "$(metric tetris_pull_bytes_total)" = "$before" ] || fail "a warm pinned pull fetched bytes"
grep -q "GET /v2/models/hello/manifests/$digest" "$WORK/registry.log" 2>/dev/null ||
    note "the registry's log does not list requests (log level warn)"
zero=sha256:0000000000000000000000000000000000000000000000000000000000000000
[ "$(status "$run" "oci://$host/models/hello@$zero" --store "$STORE")" != 0 ] ||
    fail "a digest the registry lacks was pulled"
grep -q "no such manifest" "$WORK/status.err" || fail "message: $(cat "$WORK/status.err")"

# Not on the list: refused with a clear error, and no request reaches it.
[ "$(status "$run" "oci://127.0.0.1:$silent/models/hello:v1" --store "$STORE")" != 0 ] ||
    fail "an unlisted registry was pulled from"
grep -q "is not one this node may reach" "$WORK/status.err" ||
    fail "message: $(cat "$WORK/status.err")"
[ ! -s "$WORK/silent.requests" ] || fail "a request reached the unlisted registry: $(cat "$WORK/silent.requests")"
# A listed name that resolves to loopback (what DNS rebinding would do).
if [ -n "$loopback_name" ]; then
    [ "$(status "$run" "oci://$loopback_name/models/hello:v1" --store "$STORE")" != 0 ] ||
        fail "a name resolving to loopback was pulled from"
    grep -q "loopback, link-local or metadata" "$WORK/status.err" ||
        fail "message: $(cat "$WORK/status.err")"
else
    note "no loopback name in the hosts file: the resolved-loopback case is not run"
fi
[ "$(metric 'tetris_pull_failures_total{reason="denied"}')" -ge 1 ] || fail "denied not counted"

# The agent's load maps the pulled model too; the daemon still serves.
daemon_alive || fail "the daemon died"
"$BIN/tetris-agent" load --store "$STORE" "oci://$host/models/hello:v1" >"$WORK/load.out" \
    2>"$WORK/load.err" || fail "tetris-agent load: $(tail -3 "$WORK/load.err")"
http_get /metrics | promtool check metrics >"$WORK/promtool.out" 2>&1 ||
    fail "promtool: $(cat "$WORK/promtool.out")"
# Many pulls, one probe: the daemon remembers the registry is plain.
[ "$(grep -c "event=registry-plain-http registry=$host " "$DAEMON_LOG")" = 1 ] ||
    fail "the registry was probed for TLS more than once: $(grep -c event=registry-plain-http "$DAEMON_LOG")"
stop_daemon

# No CA bundle on the daemon's host (an image without one): the probe
# does not need one, so the plain registry is still found plain.
if unshare -m sh -c 'mount -t tmpfs none /etc/ssl/certs' 2>/dev/null; then
    bare="$WORK/bare-store"
    unshare -m sh -c 'mount -t tmpfs none /etc/ssl/certs && exec "$@"' sh \
        "$BIN/tetris-reclaimer" --store "$bare" --listen "" --registries "$host" \
        >"$WORK/bare.log" 2>&1 &
    bare_pid=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $bare_pid"
    wait_until 60 "grep -q event=serving '$WORK/bare.log'" || fail "daemon without CA bundle: $(tail -3 "$WORK/bare.log")"
    out=$("$run" "oci://$host/models/hello:v1" --store "$bare" 2>"$WORK/bare.err") ||
        fail "pull with no CA bundle: $(tail -3 "$WORK/bare.err")"
    [ "$(json_get "$out" sha256)" = "$want" ] || fail "outputs differ without a CA bundle: $out"
    grep -q "event=registry-plain-http registry=$host " "$WORK/bare.log" ||
        fail "no plain-http line without a CA bundle"
    kill -TERM "$bare_pid"
    wait "$bare_pid" || fail "the daemon without a CA bundle exited $?"
else
    note "cannot hide /etc/ssl/certs (unshare -m): the no-CA-bundle case is not run"
fi
echo "PASS $PROG"
