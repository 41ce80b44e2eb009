#!/bin/sh
# tetris-csi's tenants: which store a volume uses is chosen from the pod's
# identity (the kubelet's pod.namespace and serviceAccount.name in the
# volume context) by the admin's tenant map (--tenant-map), never by the
# pod. Against the real node daemon serving tenants alpha and beta and
# real models: a tenant's volume mounts its tenant store's tensors and
# holds its references there, and shows nothing of another store (the
# same model published for two tenants is two copies, each volume seeing
# its own); the most specific rule wins; a pod no rule matches, or that
# the kubelet named not, is refused with PERMISSION_DENIED; an attribute
# naming a tenant is refused; a tenant the daemon does not serve is
# FAILED_PRECONDITION; every refusal leaves no mount, volume or reference;
# a restart with another map keeps the volumes in their stores and
# releases what no volume owns in any store; unpublish releases each
# volume's references in its own store; a map that does not parse stops
# the plugin with exit 2 and the line named. Needs root (mounts).
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
[ "$(id -u)" = 0 ] || skip "needs root: the volumes are bind mounts"
command -v mountpoint >/dev/null || skip "no mountpoint(1)"

store="$WORK/store"
models="$WORK/models"
pods="$WORK/pods"
sock="$WORK/csi.sock"
map="$WORK/tenant-map"
A="$store/tenants/alpha"
B="$store/tenants/beta"
mkdir -p "$store" "$models" "$pods"
for u in a b b2 s x; do mkdir -p "$pods/uid-$u/volumes"; done
cp "$MODELS/silero_vad_v5.onnx" "$models/vad.onnx"
cp "$MODELS/hello_deepa.onnx" "$models/other.onnx"
at_exit "grep -o ' $WORK[^ ]* ' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null || true"

cat >"$map" <<'MAP'
# team-a's pods are alpha's; team-b's inference pods beta's, its others
# the shared store's; a mapped tenant this node's daemon does not serve.
team-a  *          tenant:alpha
team-b  inference  tenant:beta
team-b  *          shared
team-d  *          tenant:delta
MAP

reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600 --tenants alpha,beta

csi_start() {
    "$BIN/tetris-csi" --store "$store" --csi-socket "$sock" --registry-dir "" \
        --pods-dir "$pods" --models-dir "$models" --node-id node-a --tenant-map "$map" \
        >>"$WORK/csi.log" 2>&1 &
    CSI_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $CSI_PID"
    wait_until 60 "[ \$(grep -c event=started '$WORK/csi.log') -gt $1 ] || ! kill -0 $CSI_PID" ||
        fail "tetris-csi did not start"
    kill -0 "$CSI_PID" 2>/dev/null || fail "tetris-csi died: $(tail -n 5 "$WORK/csi.log")"
}
call() {
    "$BIN/tetris-test-csi-client" "$@" >"$WORK/reply" 2>"$WORK/reply.err" ||
        fail "no answer to $2: $(cat "$WORK/reply" "$WORK/reply.err")"
}
want() {
    grep -q "^status=$1 " "$WORK/reply" || fail "$2: want $1, got $(cat "$WORK/reply")"
}
# pod NAMESPACE SERVICE-ACCOUNT UID: the kubelet's volume context of a pod.
pod() {
    echo "csi.storage.k8s.io/ephemeral=true csi.storage.k8s.io/pod.name=fn-$3" \
        "csi.storage.k8s.io/pod.namespace=$1 csi.storage.k8s.io/pod.uid=uid-$3" \
        "csi.storage.k8s.io/serviceAccount.name=$2"
}
# publish VOLUME UID MODEL NAMESPACE SERVICE-ACCOUNT [ATTR...]
publish() {
    _vol=$1 _uid=$2 _model=$3 _ns=$4 _sa=$5
    shift 5
    # shellcheck disable=SC2046
    call "$sock" publish "$_vol" "$pods/uid-$_uid/volumes/model" "model=$models/$_model" \
        $(pod "$_ns" "$_sa" "$_uid") "$@"
}
keeps() { find "$1/private/holders" -name 'csi-*.keep' 2>/dev/null | wc -l; }
all_keeps() { find "$store" -path '*/private/holders/csi-*.keep' | wc -l; }
volumes() { find "$store/private/volumes" -mindepth 1 -maxdepth 1 | wc -l; }
mounts_under() { grep -c " $1[/ ]" /proc/self/mountinfo || true; }
# digests DIR: the tensor files seen under DIR (a store's or a volume's tensors/).
digests() { find "$1" -type f -printf '%f\n' | sort; }

csi_start 0
grep -q "event=tenant-map-read .*rules=4" "$WORK/csi.log" || fail "the map's rules not logged"

# ---- a tenant's volume is its tenant store's ----
ta="$pods/uid-a/volumes/model"
publish vol-a a vad.onnx team-a default
want OK "team-a's volume"
[ "$(stat -c %d:%i "$ta/tensors")" = "$(stat -c %d:%i "$A/public/tensors")" ] ||
    fail "team-a's volume does not mount alpha's tensors"
[ "$(keeps "$A")" = 1 ] && [ "$(keeps "$store")" = 0 ] ||
    fail "team-a's kept holder: alpha $(keeps "$A"), shared $(keeps "$store")"
[ "$(digests "$A/public/tensors" | wc -l)" -gt 0 ] || fail "nothing ingested into alpha's store"
[ "$(digests "$store/public/tensors" | wc -l)" = 0 ] || fail "team-a's model went into the shared store"
grep -q 'event=published volume="vol-a" .*namespace="team-a" .*tenant="alpha"' "$WORK/csi.log" ||
    fail "the tenant is not logged"
jq -e '.tenant == "alpha" and .pod.namespace == "team-a"' \
    "$store/private/volumes/$(printf vol-a | sha256sum | cut -c1-64)/volume.json" >/dev/null ||
    fail "the record does not name the tenant"
want_sha=$("$BIN/tetris-onnx-run" "$models/vad.onnx" --private --seed 7 | jq -r .sha256)
got_sha=$("$BIN/tetris-onnx-run" "$ta/model.onnx" --private --seed 7 2>"$WORK/run.err" | jq -r .sha256)
[ -n "$want_sha" ] && [ "$got_sha" = "$want_sha" ] ||
    fail "ONNX Runtime on alpha's volume: $got_sha, want $want_sha ($(cat "$WORK/run.err"))"

# The same model for beta is beta's copy; beta's other model stays beta's.
tb="$pods/uid-b/volumes/model"
tb2="$pods/uid-b2/volumes/model"
publish vol-b b vad.onnx team-b inference
want OK "team-b's inference volume"
publish vol-b2 b2 other.onnx team-b inference
want OK "team-b's second volume"
[ "$(stat -c %d:%i "$tb/tensors")" = "$(stat -c %d:%i "$B/public/tensors")" ] ||
    fail "team-b's volume does not mount beta's tensors"
[ "$(keeps "$B")" = 2 ] && [ "$(keeps "$A")" = 1 ] || fail "kept holders: beta $(keeps "$B"), alpha $(keeps "$A")"
# What each volume shows is its store, and nothing of the other's.
[ "$(digests "$ta/tensors")" = "$(digests "$A/public/tensors")" ] || fail "alpha's volume shows other files"
digests "$tb2/tensors" >"$WORK/beta.list"
digests "$ta/tensors" >"$WORK/alpha.list"
other_only=$(comm -13 "$WORK/alpha.list" "$WORK/beta.list" | head -n 1)
[ -n "$other_only" ] || fail "beta holds nothing alpha lacks: the test shows nothing"
find "$ta/tensors" -name "$other_only" | grep -q . && fail "alpha's volume shows beta's tensor $other_only"
f=$(jq -r '[.tensors[] | select(.shared) | .file][0]' "$ta/tensors.json")
[ "$(stat -c %d:%i "$ta/$f")" != "$(stat -c %d:%i "$tb/$f")" ] ||
    fail "alpha's and beta's volumes share a file: tenants' stores are copies of their own"
[ "$(stat -c %d:%i "$tb/$f")" = "$(stat -c %d:%i "$B/public/$f")" ] || fail "$f is not beta's file"

# The namespace's other service accounts: the shared store.
ts="$pods/uid-s/volumes/model"
publish vol-s s vad.onnx team-b default
want OK "team-b's default volume"
[ "$(stat -c %d:%i "$ts/tensors")" = "$(stat -c %d:%i "$store/public/tensors")" ] ||
    fail "team-b's default service account does not get the shared store"
[ "$(keeps "$store")" = 1 ] || fail "the shared volume's kept holder is not in the shared store"

# ---- refusals: nothing left behind ----
refused() {
    _st=$1 _what=$2
    shift 2
    _m=$(mounts_under "$WORK") _v=$(volumes) _k=$(all_keeps)
    "$@"
    want "$_st" "$_what"
    grep -q '^status=[A-Z_]* message="..*"' "$WORK/reply" || fail "$_what: no message"
    [ "$(mounts_under "$WORK")" = "$_m" ] || fail "$_what: a mount was left behind"
    [ "$(volumes)" = "$_v" ] || fail "$_what: a volume was left behind"
    [ "$(all_keeps)" = "$_k" ] || fail "$_what: a reference was left behind"
}
refused PERMISSION_DENIED "a namespace the map does not name" publish vol-x x vad.onnx team-c default
grep -q "namespace .*team-c" "$WORK/reply" || fail "the refusal does not name the namespace"
refused PERMISSION_DENIED "a pod the kubelet named not" call "$sock" publish vol-x \
    "$pods/uid-x/volumes/model" "model=$models/vad.onnx"
# An identity the kubelet did not write (no podInfoOnMount: the pod's own
# volumeAttributes) names another pod's uid, never the target's.
# shellcheck disable=SC2046
refused PERMISSION_DENIED "an identity that is not the kubelet's" call "$sock" publish vol-x \
    "$pods/uid-x/volumes/model" "model=$models/vad.onnx" $(pod team-a default a)
grep -q "podInfoOnMount" "$WORK/reply" || fail "the refusal does not say why: $(cat "$WORK/reply")"
refused INVALID_ARGUMENT "a pod naming its tenant" publish vol-x x vad.onnx team-c default tenant=alpha
refused INVALID_ARGUMENT "a pod naming another tenant" publish vol-x x vad.onnx team-a default tenant=beta
refused FAILED_PRECONDITION "a tenant the daemon does not serve" publish vol-x x vad.onnx team-d default
grep -q "delta has no store" "$WORK/reply" || fail "the refusal does not say why: $(cat "$WORK/reply")"
[ -e "$store/tenants/delta" ] && fail "a publish made a tenant store"
refused ALREADY_EXISTS "a published volume asked for by another tenant's pod" \
    publish vol-a a vad.onnx team-b inference
publish vol-a a vad.onnx team-a other-sa
want OK "the same volume again, same tenant"

# ---- a restart with another map ----
# An unfinished unpublish left a kept holder in beta's store, and one in
# alpha's for a volume that is beta's.
lost=$(printf 'lost' | sha256sum | cut -c1-64)
printf 'tetris-holder 1\npid 0\nlabel lost\n' >"$B/private/holders/csi-$lost.keep"
kb=$(printf 'vol-b' | sha256sum | cut -c1-64)
printf 'tetris-holder 1\npid 0\nlabel stray\n' >"$A/private/holders/csi-$kb.keep"
kill -KILL "$CSI_PID"
wait "$CSI_PID" 2>/dev/null || true
# team-a is no longer mapped: its volume stays alpha's until unpublished.
printf 'team-b inference tenant:beta\n* * shared\n' >"$map"
csi_start 1
for v in vol-a vol-b vol-b2 vol-s; do
    grep -q "event=volume-recovered volume=\"$v\"" "$WORK/csi.log" || fail "$v not recovered"
done
grep -q 'event=volume-recovered volume="vol-a" .*tenant="alpha"' "$WORK/csi.log" ||
    fail "vol-a not recovered as alpha's"
[ -e "$B/private/holders/csi-$lost.keep" ] && fail "an orphan kept holder in beta's store survived"
[ -e "$A/private/holders/csi-$kb.keep" ] && fail "a kept holder in the wrong store survived"
[ "$(keeps "$A")" = 1 ] && [ "$(keeps "$B")" = 2 ] && [ "$(keeps "$store")" = 1 ] ||
    fail "kept holders after the restart: alpha $(keeps "$A") beta $(keeps "$B") shared $(keeps "$store")"
# A forged identity is no identity: the catch-all's store, not alpha's.
# shellcheck disable=SC2046
call "$sock" publish vol-f "$pods/uid-x/volumes/model" "model=$models/vad.onnx" $(pod team-a default a)
want OK "a forged identity under the catch-all"
[ "$(stat -c %d:%i "$pods/uid-x/volumes/model/tensors")" = "$(stat -c %d:%i "$store/public/tensors")" ] ||
    fail "a forged identity got a tenant's store"
call "$sock" unpublish vol-f "$pods/uid-x/volumes/model"
want OK "unpublish the forged one"
# Now team-c is the shared store's, through the catch-all.
publish vol-c x vad.onnx team-c default
want OK "the catch-all"
[ "$(stat -c %d:%i "$pods/uid-x/volumes/model/tensors")" = "$(stat -c %d:%i "$store/public/tensors")" ] ||
    fail "the catch-all is not the shared store"

# ---- unpublish: each volume's references, in its own store ----
for v in "vol-a $ta" "vol-b $tb" "vol-b2 $tb2" "vol-s $ts" "vol-c $pods/uid-x/volumes/model"; do
    # shellcheck disable=SC2086
    call "$sock" unpublish $v
    want OK "unpublish ${v%% *}"
done
[ "$(all_keeps)" = 0 ] || fail "kept holders after unpublish: $(find "$store" -name 'csi-*.keep')"
[ "$(volumes)" = 0 ] || fail "volumes after unpublish"
[ "$(mounts_under "$pods")" = 0 ] || fail "mounts after unpublish"
reclaimer_stop
"$BIN/tetris-reclaimer" --store "$store" --listen "" --tenants alpha,beta --keep-alive 0 --once \
    >>"$WORK/once.log" 2>&1 || fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
[ "$(find "$A/public/tensors" "$B/public/tensors" -type f | wc -l)" = 0 ] ||
    fail "tenants' tensors stay after unpublish"

# ---- a map that does not parse ----
kill -TERM "$CSI_PID"
wait "$CSI_PID" || fail "tetris-csi exited $? on SIGTERM"
printf 'team-a * tenant:alpha\nteam-b beta\n' >"$map"
rc=0
"$BIN/tetris-csi" --store "$store" --csi-socket "$sock" --registry-dir "" --pods-dir "$pods" \
    --models-dir "$models" --tenant-map "$map" >"$WORK/bad.log" 2>&1 || rc=$?
[ $rc = 2 ] || fail "a bad map: exit $rc, want 2"
grep -q "tenant-map:2: want NAMESPACE SERVICE-ACCOUNT STORE" "$WORK/bad.log" ||
    fail "a bad map's line is not named: $(cat "$WORK/bad.log")"
rc=0
"$BIN/tetris-csi" --store "$store" --csi-socket "$sock" --registry-dir "" --pods-dir "$pods" \
    --models-dir "$models" --tenant-map "$WORK/absent" >"$WORK/bad.log" 2>&1 || rc=$?
[ $rc = 2 ] || fail "a missing map: exit $rc, want 2"
note "ok: tenants alpha and beta, $(wc -l <"$WORK/alpha.list") tensors in alpha's volume"
