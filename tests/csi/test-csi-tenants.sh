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
# the map follows its file, mounted as the kubelet mounts a ConfigMap:
# after the kubelet's swap of its links, a new volume gets the new map's
# store without a restart; a map that does not parse (refused, one line
# naming its line) or a file that is gone (one line) leaves the map
# before it in use; the volumes published before keep their stores, also
# when their pod publishes again;
# a restart with another map keeps the volumes in their stores and
# releases what no volume owns in any store; unpublish releases each
# volume's references in its own store; a map that does not parse stops
# the plugin with exit 2 and the line named. Needs root (mounts).
set -eu
. "$(dirname "$0")/../lib/csi.sh"

A="$STORE/tenants/alpha"
B="$STORE/tenants/beta"
for u in a b b2 c1 c2 s x; do mkdir -p "$PODS/uid-$u/volumes"; done
cp "$MODELS/silero_vad_v5.onnx" "$MODELS_DIR/vad.onnx"
cp "$MODELS/hello_deepa.onnx" "$MODELS_DIR/other.onnx"

# The map as the kubelet mounts a ConfigMap's file: tenant-map ->
# ..data/tenant-map, ..data -> the current version's directory.
cm="$WORK/configmap"
map="$cm/tenant-map"
mkdir -p "$cm"
# configmap_update VERSION: the map on stdin is the ConfigMap's now, as
# the kubelet's atomic writer updates it: a new directory, then the
# ..data link swapped by rename.
configmap_update() {
    mkdir "$cm/..$1"
    cat >"$cm/..$1/tenant-map"
    ln -s "..$1" "$cm/..data_tmp"
    mv -T "$cm/..data_tmp" "$cm/..data"
}
configmap_update v1 <<'MAP'
# team-a's pods are alpha's; team-b's inference pods beta's, its others
# the shared store's; a mapped tenant this node's daemon does not serve.
team-a  *          tenant:alpha
team-b  inference  tenant:beta
team-b  *          shared
team-d  *          tenant:delta
MAP
ln -s ..data/tenant-map "$map"

reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600 --tenants alpha,beta

# digests DIR: the tensor files seen under DIR (a store's or a volume's tensors/).
digests() { find "$1" -type f -printf '%f\n' | sort; }

csi_start --registry-dir "" --tenant-map "$map"
grep -q "event=tenant-map-read .*rules=4" "$WORK/csi.log" || fail "the map's rules not logged"

# ---- a tenant's volume is its tenant store's ----
ta="$PODS/uid-a/volumes/model"
publish vol-a a vad.onnx team-a default
want OK "team-a's volume"
[ "$(stat -c %d:%i "$ta/tensors")" = "$(stat -c %d:%i "$A/public/tensors")" ] ||
    fail "team-a's volume does not mount alpha's tensors"
[ "$(keeps "$A")" = 1 ] && [ "$(keeps)" = 0 ] ||
    fail "team-a's kept holder: alpha $(keeps "$A"), shared $(keeps "$STORE")"
[ "$(digests "$A/public/tensors" | wc -l)" -gt 0 ] || fail "nothing ingested into alpha's store"
[ "$(digests "$STORE/public/tensors" | wc -l)" = 0 ] || fail "team-a's model went into the shared store"
grep -q 'event=published volume="vol-a" .*namespace="team-a" .*tenant="alpha"' "$WORK/csi.log" ||
    fail "the tenant is not logged"
jq -e '.tenant == "alpha" and .pod.namespace == "team-a"' \
    "$STORE/private/volumes/$(printf vol-a | sha256sum | cut -c1-64)/volume.json" >/dev/null ||
    fail "the record does not name the tenant"
want_sha=$("$BIN/tetris-onnx-run" "$MODELS_DIR/vad.onnx" --private --seed 7 | jq -r .sha256)
got_sha=$("$BIN/tetris-onnx-run" "$ta/model.onnx" --private --seed 7 2>"$WORK/run.err" | jq -r .sha256)
[ -n "$want_sha" ] && [ "$got_sha" = "$want_sha" ] ||
    fail "ONNX Runtime on alpha's volume: $got_sha, want $want_sha ($(cat "$WORK/run.err"))"

# The same model for beta is beta's copy; beta's other model stays beta's.
tb="$PODS/uid-b/volumes/model"
tb2="$PODS/uid-b2/volumes/model"
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
ts="$PODS/uid-s/volumes/model"
publish vol-s s vad.onnx team-b default
want OK "team-b's default volume"
[ "$(stat -c %d:%i "$ts/tensors")" = "$(stat -c %d:%i "$STORE/public/tensors")" ] ||
    fail "team-b's default service account does not get the shared store"
[ "$(keeps)" = 1 ] || fail "the shared volume's kept holder is not in the shared store"

# ---- refusals: nothing left behind ----
refused PERMISSION_DENIED "a namespace the map does not name" publish vol-x x vad.onnx team-c default
grep -q "namespace .*team-c" "$WORK/reply" || fail "the refusal does not name the namespace"
refused PERMISSION_DENIED "a pod the kubelet named not" csi publish vol-x \
    "$PODS/uid-x/volumes/model" "model=$MODELS_DIR/vad.onnx"
# An identity the kubelet did not write (no podInfoOnMount: the pod's own
# volumeAttributes) names another pod's uid, never the target's.
# shellcheck disable=SC2046
refused PERMISSION_DENIED "an identity that is not the kubelet's" csi publish vol-x \
    "$PODS/uid-x/volumes/model" "model=$MODELS_DIR/vad.onnx" $(pod team-a default a)
grep -q "podInfoOnMount" "$WORK/reply" || fail "the refusal does not say why: $(cat "$WORK/reply")"
refused INVALID_ARGUMENT "a pod naming its tenant" publish vol-x x vad.onnx team-c default tenant=alpha
refused INVALID_ARGUMENT "a pod naming another tenant" publish vol-x x vad.onnx team-a default tenant=beta
refused FAILED_PRECONDITION "a tenant the daemon does not serve" publish vol-x x vad.onnx team-d default
grep -q "delta has no store" "$WORK/reply" || fail "the refusal does not say why: $(cat "$WORK/reply")"
[ -e "$STORE/tenants/delta" ] && fail "a publish made a tenant store"
refused ALREADY_EXISTS "a published volume asked for by another tenant's pod" \
    publish vol-a a vad.onnx team-b inference
publish vol-a a vad.onnx team-a other-sa
want OK "the same volume again, same tenant"

# ---- the map follows its file: new volumes get the new map ----
# An upgrade of the chart: team-c, which no rule named, is beta's now.
configmap_update v2 <<'MAP'
team-a  *          tenant:alpha
team-b  inference  tenant:beta
team-b  *          shared
team-c  *          tenant:beta
team-d  *          tenant:delta
MAP
tc1="$PODS/uid-c1/volumes/model"
tc2="$PODS/uid-c2/volumes/model"
# beta_store TARGET WHAT: the volume at TARGET mounts beta's tensors.
beta_store() {
    [ "$(stat -c %d:%i "$1/tensors")" = "$(stat -c %d:%i "$B/public/tensors")" ] ||
        fail "$2: the volume does not mount beta's tensors"
}
publish vol-c1 c1 vad.onnx team-c default
want OK "team-c's volume under the new map"
beta_store "$tc1" "team-c under the new map"
grep -q "event=tenant-map-changed .*rules=5" "$WORK/csi.log" || fail "the new map is not logged"
# kept_map EVENT WHAT: after a change that was refused (EVENT, logged
# once), the map before it is in use: team-c's new volume is beta's, a
# namespace that map does not name is refused.
kept_map() {
    publish vol-c2 c2 vad.onnx team-c default
    want OK "team-c's volume, $2"
    beta_store "$tc2" "team-c, $2"
    refused PERMISSION_DENIED "a namespace no map in use names, $2" publish vol-x x vad.onnx team-e default
    [ "$(grep -c "event=$1" "$WORK/csi.log")" = 1 ] ||
        fail "$2: $1 is not logged once: $(grep event=tenant-map "$WORK/csi.log")"
}
# A map that does not parse (an editor's, in place): refused, with its
# line named.
printf 'team-c * tenant:alpha\nteam-b beta\n' >"$map"
kept_map tenant-map-refused "a map that does not parse"
grep -q "event=tenant-map-refused .*tenant-map:2: want NAMESPACE SERVICE-ACCOUNT STORE" \
    "$WORK/csi.log" || fail "the refusal does not name the line: $(grep event=tenant-map "$WORK/csi.log")"
# The file gone.
rm "$map"
csi unpublish vol-c2 "$tc2"
want OK "unpublish team-c's second volume"
kept_map tenant-map-missing "no map file"
# The first map again, without team-c: its new volumes are refused; the
# volumes published before keep their store, also when the same pod
# publishes again.
configmap_update v3 <"$cm/..v1/tenant-map"
ln -s ..data/tenant-map "$map"
refused PERMISSION_DENIED "team-c under a map without it" publish vol-x x vad.onnx team-c default
publish vol-c1 c1 vad.onnx team-c default
want OK "team-c's volume again, published before the map changed"
beta_store "$tc1" "team-c's volume again"
jq -e '.tenant == "beta"' "$STORE/private/volumes/$(printf vol-c1 | sha256sum | cut -c1-64)/volume.json" \
    >/dev/null || fail "vol-c1's record changed its tenant"
[ "$(grep -c event=tenant-map-changed "$WORK/csi.log")" = 2 ] ||
    fail "want two maps read after the start: $(grep event=tenant-map "$WORK/csi.log")"
[ "$(stat -c %d:%i "$ta/tensors")" = "$(stat -c %d:%i "$A/public/tensors")" ] &&
    [ "$(stat -c %d:%i "$tb/tensors")" = "$(stat -c %d:%i "$B/public/tensors")" ] &&
    [ "$(stat -c %d:%i "$ts/tensors")" = "$(stat -c %d:%i "$STORE/public/tensors")" ] ||
    fail "a map change moved a published volume"
for v in "vol-c1 $tc1" "vol-c2 $tc2"; do
    # shellcheck disable=SC2086
    csi unpublish $v
    want OK "unpublish ${v%% *}"
done
[ "$(keeps "$B")" = 2 ] || fail "beta's kept holders after team-c's volumes: $(keeps "$B")"

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
csi_start --registry-dir "" --tenant-map "$map"
for v in vol-a vol-b vol-b2 vol-s; do
    grep -q "event=volume-recovered volume=\"$v\"" "$WORK/csi.log" || fail "$v not recovered"
done
grep -q 'event=volume-recovered volume="vol-a" .*tenant="alpha"' "$WORK/csi.log" ||
    fail "vol-a not recovered as alpha's"
[ -e "$B/private/holders/csi-$lost.keep" ] && fail "an orphan kept holder in beta's store survived"
[ -e "$A/private/holders/csi-$kb.keep" ] && fail "a kept holder in the wrong store survived"
[ "$(keeps "$A")" = 1 ] && [ "$(keeps "$B")" = 2 ] && [ "$(keeps)" = 1 ] ||
    fail "kept holders after the restart: alpha $(keeps "$A") beta $(keeps "$B") shared $(keeps "$STORE")"
# A forged identity is no identity: the catch-all's store, not alpha's.
# shellcheck disable=SC2046
csi publish vol-f "$PODS/uid-x/volumes/model" "model=$MODELS_DIR/vad.onnx" $(pod team-a default a)
want OK "a forged identity under the catch-all"
[ "$(stat -c %d:%i "$PODS/uid-x/volumes/model/tensors")" = "$(stat -c %d:%i "$STORE/public/tensors")" ] ||
    fail "a forged identity got a tenant's store"
csi unpublish vol-f "$PODS/uid-x/volumes/model"
want OK "unpublish the forged one"
# Now team-c is the shared store's, through the catch-all.
publish vol-c x vad.onnx team-c default
want OK "the catch-all"
[ "$(stat -c %d:%i "$PODS/uid-x/volumes/model/tensors")" = "$(stat -c %d:%i "$STORE/public/tensors")" ] ||
    fail "the catch-all is not the shared store"

# ---- unpublish: each volume's references, in its own store ----
for v in "vol-a $ta" "vol-b $tb" "vol-b2 $tb2" "vol-s $ts" "vol-c $PODS/uid-x/volumes/model"; do
    # shellcheck disable=SC2086
    csi unpublish $v
    want OK "unpublish ${v%% *}"
done
[ "$(all_keeps)" = 0 ] || fail "kept holders after unpublish: $(find "$STORE" -name 'csi-*.keep')"
[ "$(volumes)" = 0 ] || fail "volumes after unpublish"
[ "$(mounts_under "$PODS")" = 0 ] || fail "mounts after unpublish"
reclaimer_stop
"$BIN/tetris-reclaimer" --store "$STORE" --listen "" --tenants alpha,beta --keep-alive 0 --once \
    >>"$WORK/once.log" 2>&1 || fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
[ "$(find "$A/public/tensors" "$B/public/tensors" -type f | wc -l)" = 0 ] ||
    fail "tenants' tensors stay after unpublish"

# ---- a map that does not parse ----
kill -TERM "$CSI_PID"
wait "$CSI_PID" || fail "tetris-csi exited $? on SIGTERM"
printf 'team-a * tenant:alpha\nteam-b beta\n' >"$map"
rc=0
(csi_exec --registry-dir "" --tenant-map "$map") >"$WORK/bad.log" 2>&1 || rc=$?
[ $rc = 2 ] || fail "a bad map: exit $rc, want 2"
grep -q "tenant-map:2: want NAMESPACE SERVICE-ACCOUNT STORE" "$WORK/bad.log" ||
    fail "a bad map's line is not named: $(cat "$WORK/bad.log")"
rc=0
(csi_exec --registry-dir "" --tenant-map "$WORK/absent") >"$WORK/bad.log" 2>&1 || rc=$?
[ $rc = 2 ] || fail "a missing map: exit $rc, want 2"
note "ok: tenants alpha and beta, $(wc -l <"$WORK/alpha.list") tensors in alpha's volume"
