#!/bin/sh
# Pulls from a flaky or token-locked registry (tetris-test-fault-registry
# serving a copy of a real artifact): a blob answered 503 twice, 429 with
# Retry-After in seconds, 503 with Retry-After as an HTTP-date, a manifest
# answered 503 once, a connection dropped half-way through the largest
# blob (resumed with a Range from where it stopped, and again from a
# registry that ignores Range) all pull, and the outputs are the model's;
# a registry that stays down fails the pull after the last attempt, with a
# message, leaving no temp file, no holder and not the blob it could not
# fetch. Bearer tokens: from the realm with basic credentials,
# anonymously, asked again when one expires; a wrong password, a realm
# not on --registries (never asked) and a token the registry never
# accepts are refused.
# tetris-registry push authenticates the same way, and starts an upload
# answered 503 again.
# shellcheck disable=SC2154 # PORT_<name> (and _port) are set by fault_registry's eval
set -eu
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$(dirname "$0")/../lib/registry.sh"
registry_with_hello
art="$WORK/artifact"
registry_copy_artifact "$art"
size=$(jq --arg d "sha256:$TARGET" '.layers[] | select(.digest == $d) | .size' "$art/manifest")
want=$("$RUN" "$MODELS/hello_deepa.onnx" --private 2>/dev/null | jq -r .sha256)

fault_registry flaky --dir "$art" --fault status --status 503 --target "$TARGET" --times 2
fault_registry limited --dir "$art" --fault status --status 429 --retry-after 1 \
    --target "$TARGET" --times 1
fault_registry dated --dir "$art" --fault status --status 503 --retry-after 2 --retry-after-date \
    --target "$TARGET" --times 1
fault_registry manifest --dir "$art" --fault status --status 503 --times 1
fault_registry dropped --dir "$art" --fault truncate --target "$TARGET" --times 1
fault_registry norange --dir "$art" --fault truncate --target "$TARGET" --times 1 --no-range
fault_registry down --dir "$art" --fault status --status 503 --target "$TARGET"
fault_registry bearer --dir "$art" --auth bearer --user alice --password pw-bearer
fault_registry anonymous --dir "$art" --auth bearer --token-uses 3
fault_registry wrong --dir "$art" --auth bearer --user alice --password other
fault_registry tokens --dir "$art"
fault_registry elsewhere --dir "$art" --auth bearer --realm-port "$PORT_tokens"
fault_registry realm --dir "$art"
fault_registry foreign --dir "$art" --auth bearer --realm-port "$PORT_realm"
registry_auth_file "$WORK/auth.json" "127.0.0.1:$PORT_bearer" alice pw-bearer \
    "127.0.0.1:$PORT_wrong" alice pw-bearer
list=""
for n in flaky limited dated manifest dropped norange down bearer anonymous wrong elsewhere \
    realm foreign; do
    eval "list=\"\$list\${list:+,}127.0.0.1:\$PORT_$n\""
done
start_daemon --registries "$list" --registry-auth "$WORK/auth.json" --pull-parallel 2

# pulled NAME: a pull from that registry gives the model's outputs into an
# empty store (emptied by a restart on a fresh store directory).
pulled() {
    eval "_port=\$PORT_$1"
    _out=$("$RUN" "oci://127.0.0.1:$_port/models/hello:v1" --store "$STORE" \
           2>"$WORK/$1.err") || fail "$1: pull: $(tail -3 "$WORK/$1.err")"
    [ "$(json_get "$_out" sha256)" = "$want" ] || fail "$1: outputs differ: $_out"
}
# fresh_store: the daemon again on an empty store, so the next pull
# fetches every blob.
fresh_store() {
    stop_daemon
    rm -rf "$STORE"
    start_daemon --registries "$list" --registry-auth "$WORK/auth.json" --pull-parallel 2
}
# target_gets NAME: how often that registry was asked for the target blob.
target_gets() { grep -c "^GET /v2/models/hello/blobs/sha256:$TARGET" "$WORK/$1.requests" || true; }

pulled flaky
[ "$(target_gets flaky)" = 3 ] || fail "flaky: the blob was asked $(target_gets flaky) times, not 3"
fresh_store
# asked_again_after NAME: the target blob was asked twice of that
# registry; sets WAITED to the ms between the two requests.
asked_again_after() {
    [ "$(target_gets "$1")" = 2 ] || fail "$1: asked $(target_gets "$1") times"
    WAITED=$(grep "^GET /v2/models/hello/blobs/sha256:$TARGET" "$WORK/$1.requests" |
        sed 's/.* ms=//' | awk 'NR == 1 { a = $1 } NR == 2 { print $1 - a }')
}
pulled limited
asked_again_after limited
[ "$WAITED" -ge 1000 ] || fail "limited: asked again after $WAITED ms, Retry-After said 1 s"
fresh_store
# Retry-After as an HTTP-date two seconds ahead (whole seconds: at least one).
pulled dated
asked_again_after dated
[ "$WAITED" -ge 1000 ] || fail "dated: asked again after $WAITED ms, Retry-After gave a date 2 s ahead"
fresh_store
pulled manifest
[ "$(grep -c '^GET /v2/models/hello/manifests/v1' "$WORK/manifest.requests")" = 2 ] ||
    fail "manifest: $(cat "$WORK/manifest.requests")"
# A dropped connection: the second request asks for what the first did
# not bring, and only that.
fresh_store
pulled dropped
[ "$(target_gets dropped)" = 2 ] || fail "dropped: asked $(target_gets dropped) times"
grep "^GET /v2/models/hello/blobs/sha256:$TARGET" "$WORK/dropped.requests" | tail -1 |
    grep -q " range=bytes=$((size / 2))-" ||
    fail "dropped: not resumed at byte $((size / 2)): $(grep "$TARGET" "$WORK/dropped.requests")"
grep -q "event=registry-retry op=blob digest=sha256:$TARGET received=$((size / 2))" "$DAEMON_LOG" ||
    fail "dropped: no retry logged"
fresh_store
pulled norange
[ "$(target_gets norange)" = 2 ] || fail "norange: asked $(target_gets norange) times"

# Down for good: refused after the last attempt; the store keeps no
# temp file, no holder, and not the blob.
fresh_store
[ "$(status "$RUN" "oci://127.0.0.1:$PORT_down/models/hello:v1" --store "$STORE")" != 0 ] ||
    fail "down: the pull succeeded"
grep -q "5 attempts.*HTTP 503" "$WORK/status.err" || fail "down: $(tail -2 "$WORK/status.err")"
[ "$(target_gets down)" = 5 ] || fail "down: asked $(target_gets down) times, not 5"
[ ! -e "$TARGET_FILE" ] || fail "down: the blob it never got is published"
[ -z "$(ls "$STORE/private/tmp" 2>/dev/null)" ] || fail "down: temp files left"
[ -z "$(ls "$STORE/private/holders" 2>/dev/null)" ] || fail "down: holders left"
[ "$(metric 'tetris_pull_failures_total{reason="registry"}')" = 1 ] || fail "down: not counted"
daemon_alive || fail "down: the daemon died"

# Bearer: the token from the realm, asked with the registry's basic
# credentials for the challenge's service and scope; the token then sent
# on every request.
fresh_store
pulled bearer
grep -q "^GET /token?service=fault-registry&scope=repository%3Amodels%2Fhello%3Apull&account=alice auth=Basic" \
    "$WORK/bearer.requests" || fail "bearer: token request: $(grep token "$WORK/bearer.requests")"
[ "$(grep -c '^GET /token' "$WORK/bearer.requests")" = 1 ] || fail "bearer: tokens asked more than once"
[ "$(grep '^GET /v2/models/hello/blobs' "$WORK/bearer.requests" | grep -vc 'auth=Bearer')" = 0 ] ||
    fail "bearer: a blob asked without the token"
# Anonymous tokens that expire after 3 requests: asked again.
fresh_store
pulled anonymous
grep -q '^GET /token?service=fault-registry&scope=[^ ]* ms=' "$WORK/anonymous.requests" ||
    fail "anonymous: $(grep token "$WORK/anonymous.requests")"
[ "$(grep -c '^GET /token' "$WORK/anonymous.requests")" -gt 2 ] ||
    fail "anonymous: expired tokens not asked again"
[ "$(status "$RUN" "oci://127.0.0.1:$PORT_wrong/models/hello:v1" --store "$STORE")" != 0 ] ||
    fail "wrong: the pull succeeded"
grep -q "token server refused the credentials of user" "$WORK/status.err" ||
    fail "wrong: $(tail -2 "$WORK/status.err")"
[ "$(status "$RUN" "oci://127.0.0.1:$PORT_elsewhere/models/hello:v1" --store "$STORE")" != 0 ] ||
    fail "elsewhere: the pull succeeded"
grep -q "127.0.0.1:$PORT_tokens is not one this node may reach" "$WORK/status.err" ||
    fail "elsewhere: $(tail -2 "$WORK/status.err")"
[ ! -s "$WORK/tokens.requests" ] || fail "the unlisted realm was asked: $(cat "$WORK/tokens.requests")"
# A token the registry never accepts (its realm is another registry's):
# refused after one fetch, not fetched again and again.
[ "$(status "$RUN" "oci://127.0.0.1:$PORT_foreign/models/hello:v1" --store "$STORE")" != 0 ] ||
    fail "foreign: the pull succeeded"
grep -q "127.0.0.1:$PORT_foreign refused the token its realm gave for scope" "$WORK/status.err" ||
    fail "foreign: $(tail -2 "$WORK/status.err")"
[ "$(grep -c '^GET /token' "$WORK/realm.requests")" = 1 ] ||
    fail "foreign: $(grep -c '^GET /token' "$WORK/realm.requests") tokens asked, not 1"
[ "$(metric 'tetris_pull_failures_total{reason="denied"}')" = 3 ] || fail "denied not counted"
stop_daemon

# A push authenticates the same way: every blob there (HEAD), the
# manifest put, each with the token.
: >"$WORK/bearer.requests"
out=$("$BIN/tetris-registry" push --registry-auth "$WORK/auth.json" "$MODELS/hello_deepa.onnx" \
      "oci://127.0.0.1:$PORT_bearer/models/hello:v1" 2>"$WORK/push-bearer.log") ||
    fail "bearer push: $(tail -3 "$WORK/push-bearer.log")"
[ "$(json_get "$out" present)" = "$(json_get "$out" blobs)" ] || fail "bearer push: $out"
grep -q "^PUT /v2/models/hello/manifests/v1 auth=Bearer" "$WORK/bearer.requests" ||
    fail "bearer push: $(tail -3 "$WORK/bearer.requests")"
# A push's upload answered 503 is started again from its POST.
mkdir -p "$WORK/empty/blobs"
fault_registry uploads --dir "$WORK/empty" --fault status --status 503 --target uploads --times 1
out=$("$BIN/tetris-registry" push "$MODELS/hello_deepa.onnx" \
      "oci://127.0.0.1:$PORT_uploads/models/hello:v1" 2>"$WORK/push-uploads.log") ||
    fail "push through a 503: $(tail -3 "$WORK/push-uploads.log")"
blobs=$(json_get "$out" blobs)
[ "$(json_get "$out" uploaded)" = "$blobs" ] || fail "push through a 503: $out"
[ "$(grep -c '^POST /v2/models/hello/blobs/uploads/' "$WORK/uploads.requests")" = $((blobs + 1)) ] ||
    fail "push through a 503: $(grep -c '^POST' "$WORK/uploads.requests") POSTs for $blobs blobs"
grep -q "event=registry-retry op=upload status=503 attempt=1" "$WORK/push-uploads.log" ||
    fail "push through a 503: no retry logged"
echo "PASS $PROG"
