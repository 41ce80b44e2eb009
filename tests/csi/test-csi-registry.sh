#!/bin/sh
# tetris-csi volumes whose model is a registry reference, against the real
# node daemon and a real registry (Debian's docker-registry on loopback)
# holding a real model pushed with tetris-registry: a volume named by tag
# and one named by digest are the pulled model's view, mounted read-only
# on the store's tensors, and ONNX Runtime on either computes what a
# private run of the model file computes; a tenant's pod gets the pull in
# its tenant's store; the record keeps the digest the tag resolved to, so
# a republish and a plugin restart (SIGKILL) after the tag moved still
# serve that digest while a new volume gets the moved tag's model; a
# registry not on the daemon's --registries is INVALID_ARGUMENT and never
# asked, an unknown tag NOT_FOUND, a registry that is down or sends a
# blob that is not its digest, or cuts it short, UNAVAILABLE, each with
# no mount, no volume and no reference left; unpublish leaves nothing and
# the tensors are the reclaimer's again. Needs root (mounts).
set -eu
. "$(dirname "$0")/../lib/csi.sh"

map="$WORK/tenant-map"
A="$STORE/tenants/alpha"
for u in 1 2 3 4 x; do mkdir -p "$PODS/uid-$u/volumes"; done

. "$(dirname "$0")/../lib/registry.sh"
registry_with_hello
host=$REGISTRY_HOST
digest1=$(jq -r .digest "$WORK/push1")
printf %s "$digest1" | grep -q '^sha256:[0-9a-f]\{64\}$' || fail "push digest: $(cat "$WORK/push1")"

# Registries that fail: a copy of models/hello:v1 whose largest tensor
# blob is spoiled or cut short, one that must never be asked, one that is
# listed but down.
art="$WORK/artifact"
registry_copy_artifact "$art"
fault_registry corrupt --dir "$art" --fault corrupt --target "$TARGET"
fault_registry truncate --dir "$art" --fault truncate --target "$TARGET"
fault_registry silent --dir "$art"
down=$(free_port)
# shellcheck disable=SC2154 # set by fault_registry
listed="$host,127.0.0.1:$PORT_corrupt,127.0.0.1:$PORT_truncate,127.0.0.1:$down"

cat >"$map" <<'MAP'
team-a  *  tenant:alpha
*       *  shared
MAP
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600 --tenants alpha \
    --registries "$listed"

record() { cat "$STORE/private/volumes/$(printf %s "$1" | sha256sum | cut -c1-64)/volume.json"; }
# outputs FILE: tetris-onnx-run's digest of the model's outputs, private.
outputs() {
    "$BIN/tetris-onnx-run" "$1" --private --seed 7 2>"$WORK/run.err" | jq -r .sha256
}

csi_start --registry-dir "" --tenant-map "$map"
want_v1=$(outputs "$MODELS/hello_deepa.onnx")
want_old=$(outputs "$MODELS/hello_deepa_old.onnx")
[ -n "$want_v1" ] && [ -n "$want_old" ] && [ "$want_v1" != "$want_old" ] ||
    fail "the two models' outputs: $want_v1, $want_old"

# ---- pulls that fail: a status, and nothing left behind ----
# pull_refused STATUS MESSAGE WHAT MODEL: a publish of MODEL gets STATUS saying
# MESSAGE; no mount, volume, kept holder or daemon holder (a reference)
# appears, and the spoiled tensor is not in the store.
pull_refused() {
    publish vol-bad x "$4" team-b default
    want "$1" "$3"
    grep -q "$2" "$WORK/reply" || fail "$3: message: $(cat "$WORK/reply")"
    [ "$(mounts_under "$PODS")" = 0 ] || fail "$3: a mount was left behind"
    [ "$(volumes)" = 0 ] || fail "$3: a volume was left behind"
    [ -z "$(ls "$STORE/private/holders")" ] ||
        fail "$3: references were left behind: $(ls "$STORE/private/holders")"
    [ ! -e "$TARGET_FILE" ] || fail "$3: the spoiled tensor was published"
    [ ! -e "$PODS/uid-x/volumes/model" ] || fail "$3: the target was made"
}
# shellcheck disable=SC2154 # set by fault_registry
pull_refused INVALID_ARGUMENT "is not one this node may reach" "an unlisted registry" \
    "oci://127.0.0.1:$PORT_silent/models/hello:v1"
[ ! -s "$WORK/silent.requests" ] ||
    fail "a request reached the unlisted registry: $(cat "$WORK/silent.requests")"
pull_refused UNAVAILABLE "hash to\|do not match" "a blob that is not its digest" \
    "oci://127.0.0.1:$PORT_corrupt/models/hello:v1"
grep -q "GET /v2/models/hello/blobs/sha256:$TARGET" "$WORK/corrupt.requests" ||
    fail "the corrupt registry's spoiled blob was never asked for"
pull_refused UNAVAILABLE "ended after" "a blob cut short" "oci://127.0.0.1:$PORT_truncate/models/hello:v1"
pull_refused UNAVAILABLE "." "a registry that is down" "oci://127.0.0.1:$down/models/hello:v1"
pull_refused NOT_FOUND "." "an unknown tag" "oci://$host/models/hello:nope"
pull_refused INVALID_ARGUMENT "." "a reference that does not parse" "oci://$host/Models/hello:v1"
kill -0 "$RECLAIMER_PID" 2>/dev/null || fail "the daemon died"
grep -q 'event=publish-failed volume="vol-bad"' "$WORK/csi.log" || fail "failures not logged"

# ---- by tag, by digest: the pulled model's view ----
t1="$PODS/uid-1/volumes/model"
t2="$PODS/uid-2/volumes/model"
publish vol-tag 1 "oci://$host/models/hello:v1" team-b default
want OK "publish by tag"
publish vol-digest 2 "oci://$host/models/hello@$digest1" team-b default
want OK "publish by digest"
for t in "$t1" "$t2"; do
    mountpoint -q "$t" || fail "nothing mounted at $t"
    [ "$(mounts_under "$t")" = 2 ] || fail "$t: want the view and the store's tensors mounted"
    touch "$t/x" 2>/dev/null && fail "$t is writable"
    jq -e --arg ref "oci://$host/models/hello@$digest1" \
        '.format == "tetris-model-view/1" and .ref == $ref and .store == "." and
         .shared == true and .fallback == null and .graph == "model.onnx"' "$t/tensors.json" \
        >/dev/null || fail "$t's index: $(jq -c 'del(.tensors)' "$t/tensors.json")"
    # Every tensor is the store's own file, the pulled one.
    jq -r '.tensors[] | .file' "$t/tensors.json" | sort -u | while read -r f; do
        [ "$(stat -c %d:%i "$t/$f")" = "$(stat -c %d:%i "$STORE/public/$f")" ] ||
            fail "$t: $f is not the store's file"
    done
    got=$(outputs "$t/model.onnx")
    [ "$got" = "$want_v1" ] || fail "ONNX Runtime on $t: $got, want $want_v1 ($(cat "$WORK/run.err"))"
done
[ "$(all_keeps)" = 2 ] || fail "want two kept holders, have $(all_keeps)"
n_tensors=$(jq '[.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1")] | length' \
            "$WORK/v1.json")
for k in "$STORE"/private/holders/csi-*.keep; do
    [ "$(grep -c '^[0-9a-f]\{64\} ' "$k")" = "$n_tensors" ] ||
        fail "$k does not hold the model's $n_tensors tensors"
done
record vol-tag | jq -e --arg d "$digest1" --arg m "oci://$host/models/hello:v1" \
    '.model == $m and .digest == $d' >/dev/null || fail "vol-tag's record: $(record vol-tag)"
grep -q "event=published volume=\"vol-tag\" .*digest=$digest1" "$WORK/csi.log" ||
    fail "the digest is not logged"

# ---- a tenant's pod: the pull lands in its tenant's store ----
t4="$PODS/uid-4/volumes/model"
publish vol-alpha 4 "oci://$host/models/hello:v1" team-a default
want OK "publish for tenant alpha"
[ "$(find "$A/private/holders" -name 'csi-*.keep' | wc -l)" = 1 ] ||
    fail "the tenant's kept holder is not in its store"
jq -r '.tensors[] | .file' "$t4/tensors.json" | sort -u | while read -r f; do
    [ "$(stat -c %d:%i "$t4/$f")" = "$(stat -c %d:%i "$A/public/$f")" ] ||
        fail "tenant volume: $f is not its store's file"
done
[ "$(outputs "$t4/model.onnx")" = "$want_v1" ] || fail "ONNX Runtime on the tenant's volume"

# ---- the tag moves: the volume keeps the digest it was published with ----
registry_push "$MODELS/hello_deepa_old.onnx" "oci://$host/models/hello:v1"
digest_old=$(jq -r .digest "$WORK/push.out")
[ "$digest_old" != "$digest1" ] || fail "the tag did not move"
publish vol-tag 1 "oci://$host/models/hello:v1" team-b default
want OK "publish again after the tag moved"
[ "$(mounts_under "$t1")" = 2 ] || fail "publish again mounted twice"
[ "$(outputs "$t1/model.onnx")" = "$want_v1" ] || fail "the republished volume changed model"
record vol-tag | jq -e --arg d "$digest1" '.digest == $d' >/dev/null ||
    fail "the record's digest changed: $(record vol-tag)"

# ---- the plugin killed and restarted: recovered from what is mounted ----
kill -KILL "$CSI_PID"
wait "$CSI_PID" 2>/dev/null || true
csi_start --registry-dir "" --tenant-map "$map"
for v in vol-tag vol-digest vol-alpha; do
    grep -q "event=volume-recovered volume=\"$v\" .*digest=$digest1" "$WORK/csi.log" ||
        fail "$v not recovered with its digest"
done
[ "$(all_keeps)" = 3 ] || fail "kept holders after the restart: $(all_keeps)"
publish vol-tag 1 "oci://$host/models/hello:v1" team-b default
want OK "publish after the restart"
[ "$(outputs "$t1/model.onnx")" = "$want_v1" ] || fail "the recovered volume changed model"
# A new volume resolves the tag now: the moved model.
t3="$PODS/uid-3/volumes/model"
publish vol-moved 3 "oci://$host/models/hello:v1" team-b default
want OK "publish of the moved tag"
[ "$(outputs "$t3/model.onnx")" = "$want_old" ] || fail "the moved tag's volume is not its model"
record vol-moved | jq -e --arg d "$digest_old" '.digest == $d' >/dev/null ||
    fail "vol-moved's record: $(record vol-moved)"
publish vol-tag 1 "oci://$host/models/hello@$digest_old" team-b default
want ALREADY_EXISTS "the volume with another digest"

# ---- unpublish: nothing left, the tensors the reclaimer's ----
for v in "vol-tag $t1" "vol-digest $t2" "vol-moved $t3" "vol-alpha $t4"; do
    # shellcheck disable=SC2086
    set -- $v
    csi unpublish "$1" "$2"
    want OK "unpublish $1"
    [ -e "$2" ] && fail "$1: the target is still there"
done
[ "$(mounts_under "$PODS")" = 0 ] || fail "mounts left after unpublish"
[ "$(all_keeps)" = 0 ] || fail "kept holders left after unpublish"
[ "$(volumes)" = 0 ] || fail "volumes left after unpublish"
reclaimer_stop
"$BIN/tetris-reclaimer" --store "$STORE" --listen "" --tenants alpha --keep-alive 0 --once \
    >>"$WORK/once.log" 2>&1 || fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
left=$(find "$STORE/public/tensors" "$A/public/tensors" -type f | wc -l)
[ "$left" = 0 ] || fail "$left tensors of unpublished volumes stay"
kill -TERM "$CSI_PID"
wait "$CSI_PID" || fail "tetris-csi exited $? on SIGTERM"
note "ok: $n_tensors tensors per volume, pulled by tag and by digest"
