#!/bin/sh
# tetris-csi driven as the kubelet drives it, over gRPC (tetris-test-csi-
# client: nghttp2 as the client), against the real node daemon and a real
# model: identity, node info and registration answer with CSI's fields; a
# published volume is the model's view bind-mounted read-only at the
# target with the store's tensors/ mounted read-only on the view's, so its
# tensors are the store's own files (no link a checker could refuse),
# and ONNX Runtime run on it computes what the original model computes;
# its references are a kept holder that survives a daemon restart and a
# reclaim pass with no keep-alive, and a plugin restart (recovered from
# what is mounted); publish and unpublish are idempotent; every bad
# request gets CSI's status with a message and leaves no mount, no volume
# and no reference; garbage on the socket ends that connection only.
# The client sends the socket's path as :authority, as the kubelet's
# grpc-go does.
# Needs root (mounts).
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
[ "$(id -u)" = 0 ] || skip "needs root: the volumes are bind mounts"
command -v mountpoint >/dev/null || skip "no mountpoint(1)"

store="$WORK/store"
models="$WORK/models"
pods="$WORK/pods"
registry="$WORK/registry"
sock="$WORK/csi.sock"
regsock="$registry/csi.tetris.io-reg.sock"
mkdir -p "$store" "$models" "$pods/uid-1/volumes" "$pods/uid-2/volumes" "$registry" "$WORK/elsewhere"
cp "$MODELS/silero_vad_v5.onnx" "$models/vad.onnx"
cp "$MODELS/hello_deepa.onnx" "$models/other.onnx"
head -c 4096 /dev/urandom >"$models/not-a-model.onnx"
target="$pods/uid-1/volumes/model"

# Every mount the test makes goes at exit, even after a failure.
at_exit "grep -o ' $WORK[^ ]* ' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null || true"

reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600

csi_start() {
    "$BIN/tetris-csi" --store "$store" --csi-socket "$sock" --registry-dir "$registry" \
        --pods-dir "$pods" --models-dir "$models" --node-id node-a --max-volumes 4 \
        >>"$WORK/csi.log" 2>&1 &
    CSI_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $CSI_PID"
    _started=$(grep -c "event=started" "$WORK/csi.log" || true)
    wait_until 60 "[ \$(grep -c event=started '$WORK/csi.log') -gt ${1:-0} ] || ! kill -0 $CSI_PID" ||
        fail "tetris-csi did not start"
    kill -0 "$CSI_PID" 2>/dev/null || fail "tetris-csi died: $(tail -n 5 "$WORK/csi.log")"
    : "$_started"
}
# call SOCKET CALL ARGS...: the client's output in $WORK/reply.
call() {
    "$BIN/tetris-test-csi-client" "$@" >"$WORK/reply" 2>"$WORK/reply.err" ||
        fail "no answer to $2: $(cat "$WORK/reply" "$WORK/reply.err")"
}
# want STATUS WHAT: the last reply's status.
want() {
    grep -q "^status=$1 " "$WORK/reply" || fail "$2: want $1, got $(cat "$WORK/reply")"
}
field() { sed -n "s/^f$1=//p" "$WORK/reply"; }
keeps() { find "$store/private/holders" -name 'csi-*.keep' | wc -l; }
volumes() { find "$store/private/volumes" -mindepth 1 -maxdepth 1 | wc -l; }
mounts_under() { grep -c " $1[/ ]" /proc/self/mountinfo || true; }

csi_start 0

# ---- identity, node, registration ----
call "$sock" plugin-info
want OK plugin-info
[ "$(field 1)" = '"csi.tetris.io"' ] || fail "plugin name: $(cat "$WORK/reply")"
call "$sock" probe
want OK probe
[ "$(field 1)" = 0x0801 ] || fail "probe is not ready=true: $(cat "$WORK/reply")"
call "$sock" plugin-caps
want OK plugin-caps
call "$sock" node-caps
want OK node-caps
call "$sock" node-info
want OK node-info
[ "$(field 1)" = '"node-a"' ] && [ "$(field 2)" = 4 ] || fail "node info: $(cat "$WORK/reply")"
call "$regsock" reg-info
want OK reg-info
[ "$(field 1)" = '"CSIPlugin"' ] && [ "$(field 2)" = '"csi.tetris.io"' ] &&
    [ "$(field 3)" = "\"$sock\"" ] && [ "$(field 4)" = '"1.0.0"' ] ||
    fail "registration info: $(cat "$WORK/reply")"
call "$regsock" notify true
want OK notify
grep -q "event=registered driver=csi.tetris.io" "$WORK/csi.log" || fail "registration not logged"
call "$regsock" notify false "driver name taken"
grep -q 'event=registration-refused.*driver name taken' "$WORK/csi.log" ||
    fail "refused registration not logged"

# ---- publish ----
ctx="model=$models/vad.onnx csi.storage.k8s.io/ephemeral=true csi.storage.k8s.io/pod.name=fn-1
csi.storage.k8s.io/pod.namespace=team-a csi.storage.k8s.io/pod.uid=uid-1
csi.storage.k8s.io/serviceAccount.name=default"
# shellcheck disable=SC2086
call "$sock" publish vol-1 "$target" $ctx
want OK publish
mountpoint -q "$target" || fail "nothing mounted at the target"
[ "$(mounts_under "$target")" = 2 ] || fail "want the view and the store's tensors mounted"
touch "$target/tensors/x" 2>/dev/null && fail "the store's tensors are writable through the volume"
touch "$target/x" 2>/dev/null && fail "the volume is writable"
ix="$target/tensors.json"
jq -e '.format == "tetris-model-view/1" and .store == "." and .shared == true and
    .fallback == null and .graph == "model.onnx" and
    .session_options["session.model_external_initializers_file_folder_path"] == "."' "$ix" \
    >/dev/null || fail "the view's index: $(jq -c 'del(.tensors)' "$ix")"
[ "$(stat -c %a "$target")" = 755 ] || fail "view mode $(stat -c %a "$target")"
# Every shared tensor is the store's file itself: same inode, no link.
n_shared=$(jq '[.tensors[] | select(.shared)] | length' "$ix")
[ "$n_shared" -gt 0 ] || fail "no shared tensor in the view"
jq -r '.tensors[] | select(.shared) | .file' "$ix" | sort -u | while read -r f; do
    [ -f "$target/$f" ] && [ ! -L "$target/$f" ] || fail "$f is not a file of the view"
    [ "$(stat -c %d:%i "$target/$f")" = "$(stat -c %d:%i "$store/public/$f")" ] ||
        fail "$f is not the store's file"
done
[ "$(keeps)" = 1 ] || fail "want one kept holder, have $(keeps)"
kept=$(find "$store/private/holders" -name 'csi-*.keep')
[ "$(grep -c '^[0-9a-f]\{64\} ' "$kept")" -eq "$(jq '[.tensors[] | select(.digest != null) | .digest] | unique | length' "$ix")" ] ||
    fail "the kept holder does not hold every tensor of the model"
grep -q 'event=published volume="vol-1" .*namespace="team-a" pod="fn-1" service_account="default"' \
    "$WORK/csi.log" || fail "the pod's identity is not logged"
# A runtime on the volume alone computes what the model computes.
want_sha=$("$BIN/tetris-onnx-run" "$models/vad.onnx" --private --seed 7 | jq -r .sha256)
got_sha=$("$BIN/tetris-onnx-run" "$target/model.onnx" --private --seed 7 2>"$WORK/run.err" | jq -r .sha256)
[ -n "$want_sha" ] && [ "$got_sha" = "$want_sha" ] ||
    fail "ONNX Runtime on the volume: $got_sha, want $want_sha ($(cat "$WORK/run.err"))"

# Idempotent: the same publish again is OK and mounts nothing more.
# shellcheck disable=SC2086
call "$sock" publish vol-1 "$target" $ctx
want OK "publish again"
[ "$(mounts_under "$target")" = 2 ] || fail "publish again mounted twice"

# ---- refusals: status, message, and nothing left behind ----
# refused STATUS WHAT CALL ARGS...: the call gets STATUS, and no mount,
# volume or kept holder appears.
refused() {
    _st=$1 _what=$2
    shift 2
    _m=$(mounts_under "$WORK") _v=$(volumes) _k=$(keeps)
    call "$sock" "$@"
    want "$_st" "$_what"
    grep -q '^status=[A-Z_]* message="..*"' "$WORK/reply" || fail "$_what: no message"
    [ "$(mounts_under "$WORK")" = "$_m" ] || fail "$_what: a mount was left behind"
    [ "$(volumes)" = "$_v" ] || fail "$_what: a volume was left behind"
    [ "$(keeps)" = "$_k" ] || fail "$_what: a reference was left behind"
}
t2="$pods/uid-2/volumes/model"
refused ALREADY_EXISTS "the volume at another target" publish vol-1 "$t2" "model=$models/vad.onnx"
[ -e "$t2" ] && fail "a refused publish made the target"
refused ALREADY_EXISTS "the volume with another model" publish vol-1 "$target" "model=$models/other.onnx"
refused INVALID_ARGUMENT "no volume id" publish "" "$t2" "model=$models/vad.onnx"
refused INVALID_ARGUMENT "no target" publish vol-2 "" "model=$models/vad.onnx"
refused INVALID_ARGUMENT "no capability" publish-nocap vol-2 "$t2" "model=$models/vad.onnx"
refused INVALID_ARGUMENT "a block volume" publish-block vol-2 "$t2" "model=$models/vad.onnx"
refused INVALID_ARGUMENT "no model" publish vol-2 "$t2"
refused INVALID_ARGUMENT "an unknown attribute" publish vol-2 "$t2" "model=$models/vad.onnx" colour=red
refused INVALID_ARGUMENT "a persistent volume" publish vol-2 "$t2" "model=$models/vad.onnx" \
    csi.storage.k8s.io/ephemeral=false
refused INVALID_ARGUMENT "a model outside the models directory" publish vol-2 "$t2" \
    "model=$MODELS/silero_vad_v5.onnx"
refused INVALID_ARGUMENT "a relative model" publish vol-2 "$t2" "model=vad.onnx"
refused INVALID_ARGUMENT "a registry the daemon may not reach" publish vol-2 "$t2" \
    "model=oci://reg.example:5000/m:v1"
refused NOT_FOUND "a missing model" publish vol-2 "$t2" "model=$models/missing.onnx"
refused INVALID_ARGUMENT "a file that is not a model" publish vol-2 "$t2" "model=$models/not-a-model.onnx"
refused INVALID_ARGUMENT "a target outside the pods directory" publish vol-2 "$WORK/elsewhere/t" \
    "model=$models/vad.onnx"
ln -s "$WORK/elsewhere" "$pods/uid-2/volumes/link"
refused INVALID_ARGUMENT "a target through a link out of the pods directory" publish vol-2 \
    "$pods/uid-2/volumes/link/t" "model=$models/vad.onnx"
refused INVALID_ARGUMENT "the pods directory itself" publish vol-2 "$pods" "model=$models/vad.onnx"
refused NOT_FOUND "unpublish at another target" unpublish vol-1 "$t2"
refused INVALID_ARGUMENT "unpublish without a target" unpublish vol-1 ""
refused INVALID_ARGUMENT "unpublish without a volume id" unpublish "" "$target"
ls "$WORK/elsewhere" | grep -q . && fail "a refused publish wrote outside the pods directory"

# ---- the gRPC layer: garbage, refused calls, limits ----
call "$sock" garbage
grep -q connection-closed "$WORK/reply" || fail "garbage did not end its connection"
grep -q "event=grpc-bad-connection server=csi" "$WORK/csi.log" || fail "garbage not logged"
call "$sock" raw POST /csi.v1.Identity/Probe text/plain 0000000000
grep -q '^http=415' "$WORK/reply" || fail "a wrong content-type: $(cat "$WORK/reply")"
call "$sock" raw GET /csi.v1.Identity/Probe application/grpc 0000000000
grep -q '^http=405' "$WORK/reply" || fail "a GET: $(cat "$WORK/reply")"
call "$sock" raw POST /csi.v1.Controller/CreateVolume application/grpc 0000000000
want UNIMPLEMENTED "an unknown method"
call "$sock" raw POST "$(printf '/csi.v1.Identity/Probe\001')" application/grpc 0000000000
want UNIMPLEMENTED "a path that is not printable"
call "$sock" raw POST /csi.v1.Identity/Probe application/grpc 0100000000
want UNIMPLEMENTED "a compressed message"
call "$sock" raw POST /csi.v1.Identity/Probe application/grpc 00000000
want INTERNAL "a cut prefix"
call "$sock" raw POST /csi.v1.Identity/Probe application/grpc 00000000050801
want INTERNAL "a prefix announcing more than is sent"
call "$sock" raw POST /csi.v1.Node/NodePublishVolume application/grpc 00000000020801
want INVALID_ARGUMENT "a volume id that is not a string"
call "$sock" raw POST /csi.v1.Identity/Probe application/grpc 0000000002ffff
want INVALID_ARGUMENT "a request that is not protobuf"
call "$sock" big /csi.v1.Identity/Probe 5000000
want RESOURCE_EXHAUSTED "a message over the limit"
call "$sock" probe
want OK "probe after all that"

# ---- the daemon's restart and a reclaim pass keep the volume's tensors ----
kill -KILL "$RECLAIMER_PID"
wait "$RECLAIMER_PID" 2>/dev/null || true
"$BIN/tetris-reclaimer" --store "$store" --listen "" --keep-alive 0 --once >>"$WORK/once.log" 2>&1 ||
    fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
jq -r '.tensors[] | select(.shared) | .file' "$ix" | sort -u | while read -r f; do
    [ -f "$store/public/$f" ] || fail "the reclaimer freed $f, which a volume holds"
done
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600

# ---- the plugin's restart: recovered from what is mounted ----
# An unfinished publish left by a crash: a volume without record, and a
# kept holder of a volume that is gone.
orphan=$(printf 'orphan' | sha256sum | cut -c1-64)
mkdir -p "$store/private/volumes/$orphan/view"
lost=$(printf 'lost' | sha256sum | cut -c1-64)
printf 'tetris-holder 1\npid 0\nlabel lost\n' >"$store/private/holders/csi-$lost.keep"
kill -KILL "$CSI_PID"
wait "$CSI_PID" 2>/dev/null || true
mountpoint -q "$target" || fail "the volume's mount went with the plugin"
csi_start 1
grep -q "event=volume-recovered volume=\"vol-1\"" "$WORK/csi.log" || fail "vol-1 not recovered"
[ -e "$store/private/volumes/$orphan" ] && fail "an unfinished publish survived the restart"
[ -e "$store/private/holders/csi-$lost.keep" ] && fail "an orphan kept holder survived"
[ "$(keeps)" = 1 ] || fail "vol-1's kept holder is gone after the restart"
# shellcheck disable=SC2086
call "$sock" publish vol-1 "$target" $ctx
want OK "publish after the restart"

# ---- a full store: RESOURCE_EXHAUSTED, nothing left behind ----
reclaimer_stop
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600 --capacity 4096
refused RESOURCE_EXHAUSTED "a full store" publish vol-3 "$t2" "model=$models/other.onnx"
reclaimer_stop
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600

# ---- unpublish ----
call "$sock" unpublish vol-1 "$target"
want OK unpublish
mountpoint -q "$target" 2>/dev/null && fail "still mounted after unpublish"
[ -e "$target" ] && fail "the target directory is still there"
[ "$(keeps)" = 0 ] || fail "the kept holder is still there"
[ "$(volumes)" = 0 ] || fail "the volume's directory is still there"
call "$sock" unpublish vol-1 "$target"
want OK "unpublish again"
# The tensors are the reclaimer's again.
reclaimer_stop
"$BIN/tetris-reclaimer" --store "$store" --listen "" --keep-alive 0 --once >>"$WORK/once.log" 2>&1 ||
    fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
[ "$(find "$store/public/tensors" -type f | wc -l)" = 0 ] ||
    fail "tensors of an unpublished volume stay: $(find "$store/public/tensors" -type f | head -3)"

# ---- a clean stop ----
kill -TERM "$CSI_PID"
rc=0
wait "$CSI_PID" || rc=$?
[ $rc = 0 ] || fail "tetris-csi exited $rc on SIGTERM"
[ -e "$sock" ] && fail "the CSI socket is still there"
[ -e "$regsock" ] && fail "the registration socket is still there"
note "ok: $n_shared shared tensors in the volume"
