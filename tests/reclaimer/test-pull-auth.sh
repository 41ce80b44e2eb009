#!/bin/sh
# Real registries that want credentials and TLS (docker-registry with
# htpasswd basic auth, on plain HTTP and on TLS with a CA made here): push
# and pull authenticate as the registry's challenge asks, with credentials
# from a dockerconfigjson file (--registry-auth) and TLS verified against
# --registry-ca. No credentials, or wrong ones, give a clear error and
# publish nothing; a TLS registry is never fallen back from because its
# certificate is not trusted; the daemon re-reads the credentials at each
# pull (a Secret rotated in place), refuses a bad file or CA bundle at
# start, reaches a non-loopback registry over TLS only unless its entry
# says http://; and no password reaches a log or a message.
set -eu
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$(dirname "$0")/../lib/registry.sh"
need_models
push="$BIN/tetris-registry"
run="$BIN/tetris-onnx-run"
model="$MODELS/hello_deepa.onnx"
variant="$MODELS/hello_deepa_old.onnx"
password="pw-$$-s3cret"
registry_htpasswd "$WORK/htpasswd" alice "$password"
registry_start --htpasswd "$WORK/htpasswd"
plain=$REGISTRY_HOST
registry_start --htpasswd "$WORK/htpasswd" --tls
tls=$REGISTRY_HOST
auth="$WORK/auth.json"
registry_auth_file "$WORK/good.json" "$plain" alice "$password" "$tls" alice "$password"
registry_auth_file "$WORK/wrong.json" "$plain" alice "not-$password" "$tls" alice "not-$password"
cp "$WORK/good.json" "$auth"

# ---- push ----
[ "$(status "$push" push "$model" "oci://$plain/models/hello:v1")" = 1 ] ||
    fail "a push without credentials went through"
grep -q "asks for credentials (Basic realm .*tetris-test.*), and there are none" \
    "$WORK/status.err" || fail "no credentials: $(cat "$WORK/status.err")"
[ "$(status "$push" push --registry-auth "$WORK/wrong.json" "$model" \
      "oci://$plain/models/hello:v1")" = 1 ] || fail "a push with a wrong password went through"
grep -q "refused the credentials of user .*alice" "$WORK/status.err" ||
    fail "wrong credentials: $(cat "$WORK/status.err")"
cat "$WORK/status.err" >>"$WORK/push.log"
registry_push "$model" "oci://$plain/models/hello:v1" --registry-auth "$auth"
registry_push "$variant" "oci://$plain/models/hello:old" --registry-auth "$auth"
# TLS: a certificate the system does not trust is an error, never a
# reason to try plain HTTP.
[ "$(status "$push" push --registry-auth "$auth" "$model" "oci://$tls/models/hello:v1")" = 1 ] ||
    fail "a push to an untrusted TLS registry went through"
grep -qi "certificate" "$WORK/status.err" || fail "untrusted: $(cat "$WORK/status.err")"
cat "$WORK/status.err" >>"$WORK/push.log"
TETRIS_REGISTRY_CA="$TLS_CA" TETRIS_REGISTRY_AUTH="$auth" "$push" push "$model" \
    "oci://$tls/models/hello:v1" >"$WORK/push.out" 2>>"$WORK/push.log" ||
    fail "push over TLS: $(tail -3 "$WORK/push.log")"
[ "$(json_get "$(cat "$WORK/push.out")" uploaded)" -gt 0 ] || fail "TLS push: $(cat "$WORK/push.out")"
curl -sf --cacert "$TLS_CA" -u "alice:$password" -H "$REGISTRY_ACCEPT" \
    "https://$tls/v2/models/hello/manifests/v1" >"$WORK/v1.json" || fail "no manifest over TLS"
# Files that cannot be used: usage errors naming the file, no secret.
printf '{"auths": {"%s": {"auth": "%s"}}}\n' "$plain" "$password" >"$WORK/bad.json"
[ "$(status "$push" push --registry-auth "$WORK/bad.json" "$model" "oci://$plain/x:y")" = 2 ] ||
    fail "a malformed credentials file was taken"
grep -q "bad.json: auths\[.*$plain.*\].auth is not base64" "$WORK/status.err" ||
    fail "malformed: $(cat "$WORK/status.err")"
cat "$WORK/status.err" >>"$WORK/push.log"
[ "$(status "$push" push --registry-ca "$WORK/missing.pem" "$model" "oci://$tls/x:y")" = 2 ] ||
    fail "a missing CA bundle was taken"

# ---- the daemon ----
[ "$(status "$RECLAIMER" --store "$STORE" --registry-auth "$WORK/bad.json")" = 2 ] ||
    fail "the daemon started with a malformed credentials file"
grep -q -- "--registry-auth.*not base64" "$WORK/status.err" ||
    fail "daemon, bad file: $(cat "$WORK/status.err")"
cat "$WORK/status.err" >>"$DAEMON_LOG"
[ "$(status "$RECLAIMER" --store "$STORE" --registry-ca "$WORK/htpasswd")" = 2 ] ||
    fail "the daemon started with a CA bundle that holds no certificate"
grep -q "no PEM certificate" "$WORK/status.err" || fail "daemon, bad CA: $(cat "$WORK/status.err")"
start_daemon --registries "$plain,$tls" --registry-auth "$auth" --registry-ca "$TLS_CA"

# Over TLS into the empty store, basic auth: every tensor layer fetched.
want=$("$run" "$model" --private 2>/dev/null | jq -r .sha256)
out=$("$run" "oci://$tls/models/hello:v1" --store "$STORE" 2>"$WORK/run1.err") ||
    fail "pull over TLS: $(tail -3 "$WORK/run1.err")"
[ "$(json_get "$out" sha256)" = "$want" ] || fail "pulled outputs differ: $out"
v1_bytes=$(jq '[.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1") | .size] | add' \
           "$WORK/v1.json")
[ "$(metric tetris_pull_bytes_total)" = "$v1_bytes" ] ||
    fail "pulled $(metric tetris_pull_bytes_total) bytes over TLS, the layers are $v1_bytes"
# Plain HTTP on loopback (TLS tried first, as docker does), basic auth.
want_old=$("$run" "$variant" --private 2>/dev/null | jq -r .sha256)
out=$("$run" "oci://$plain/models/hello:old" --store "$STORE" 2>"$WORK/run2.err") ||
    fail "pull over plain HTTP: $(tail -3 "$WORK/run2.err")"
[ "$(json_get "$out" sha256)" = "$want_old" ] || fail "variant outputs differ: $out"
grep -q "event=registry-plain-http registry=$plain" "$DAEMON_LOG" ||
    fail "no fall-back to plain HTTP logged for $plain"
grep -q "event=registry-plain-http registry=$tls" "$DAEMON_LOG" &&
    fail "the TLS registry was taken as plain HTTP"

# The Secret rotated in place to a wrong password: the next pull is
# refused, clearly, and publishes and holds nothing; then put back.
tensors_before=$(tensor_count)
cp "$WORK/wrong.json" "$auth"
registry_push "$MODELS/silero_vad_v5.onnx" "oci://$plain/vad:v5" --registry-auth "$WORK/good.json"
[ "$(status "$run" "oci://$plain/vad:v5" --store "$STORE")" != 0 ] ||
    fail "a pull with a wrong password went through"
grep -q "refused the credentials of user" "$WORK/status.err" ||
    fail "wrong password: $(tail -2 "$WORK/status.err")"
[ "$(tensor_count)" = "$tensors_before" ] || fail "a refused pull published tensors"
printf '{"auths": {}}\n' >"$auth"
[ "$(status "$run" "oci://$plain/vad:v5" --store "$STORE")" != 0 ] ||
    fail "a pull without credentials went through"
grep -q "asks for credentials" "$WORK/status.err" || fail "none: $(tail -2 "$WORK/status.err")"
[ "$(metric 'tetris_pull_failures_total{reason="denied"}')" = 2 ] ||
    fail "denied pulls: $(metric 'tetris_pull_failures_total{reason="denied"}')"
cp "$WORK/good.json" "$auth"
"$run" "oci://$plain/vad:v5" --store "$STORE" >/dev/null 2>"$WORK/run3.err" ||
    fail "pull after the rotation back: $(tail -3 "$WORK/run3.err")"
stop_daemon

# Without the CA bundle the TLS registry's certificate is not trusted: a
# clear error, no plain HTTP.
start_daemon --registries "$plain,$tls" --registry-auth "$auth"
[ "$(status "$run" "oci://$tls/models/hello:v1" --store "$STORE")" != 0 ] ||
    fail "a pull from an untrusted TLS registry went through"
grep -qi "certificate" "$WORK/status.err" || fail "untrusted: $(tail -2 "$WORK/status.err")"
stop_daemon

# A registry that is not loopback is reached over TLS only, unless the
# operator's entry says http://.
addr=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9.]+$' | grep -v '^127\.' | head -1 ||
       true)
if [ -n "$addr" ]; then
    registry_start --addr "$addr"
    far=$REGISTRY_HOST
    registry_push "$model" "oci://$far/models/hello:v1" --insecure
    start_daemon --registries "$far"
    [ "$(status "$run" "oci://$far/models/hello:v1" --store "$STORE")" != 0 ] ||
        fail "plain HTTP to $far without http:// in its entry"
    stop_daemon
    start_daemon --registries "http://$far"
    out=$("$run" "oci://$far/models/hello:v1" --store "$STORE" 2>"$WORK/run4.err") ||
        fail "pull from http://$far: $(tail -3 "$WORK/run4.err")"
    [ "$(json_get "$out" sha256)" = "$want" ] || fail "outputs from $far differ"
    stop_daemon
    [ "$(status "$push" push "$model" "oci://$far/models/hello:v2")" = 1 ] ||
        fail "a push to plain $far without --insecure"
else
    note "no non-loopback IPv4 address: the TLS-only rule for remote registries is not run"
fi

# No password, nor its base64, in any log or message.
b64=$(printf 'alice:%s' "$password" | base64 | tr -d '\n')
for f in "$DAEMON_LOG" "$WORK/push.log" "$WORK"/run*.err "$WORK/status.err"; do
    ! grep -qF -e "$password" -e "$b64" "$f" || fail "a secret in $f"
done
echo "PASS $PROG"
