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
. "$(dirname "$0")/../lib/csi.sh"

registry="$WORK/registry"
regsock="$registry/csi.tetris.io-reg.sock"
mkdir -p "$PODS/uid-1/volumes" "$PODS/uid-2/volumes" "$registry" "$WORK/elsewhere"
cp "$MODELS/silero_vad_v5.onnx" "$MODELS_DIR/vad.onnx"
cp "$MODELS/hello_deepa.onnx" "$MODELS_DIR/other.onnx"
head -c 4096 /dev/urandom >"$MODELS_DIR/not-a-model.onnx"
target="$PODS/uid-1/volumes/model"

reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600
csi_start --registry-dir "$registry" --max-volumes 4

# ---- identity, node, registration ----
csi plugin-info
want OK plugin-info
[ "$(field 1)" = '"csi.tetris.io"' ] || fail "plugin name: $(cat "$WORK/reply")"
csi probe
want OK probe
[ "$(field 1)" = 0x0801 ] || fail "probe is not ready=true: $(cat "$WORK/reply")"
csi plugin-caps
want OK plugin-caps
csi node-caps
want OK node-caps
csi node-info
want OK node-info
[ "$(field 1)" = '"node-a"' ] && [ "$(field 2)" = 4 ] || fail "node info: $(cat "$WORK/reply")"
call "$regsock" reg-info
want OK reg-info
[ "$(field 1)" = '"CSIPlugin"' ] && [ "$(field 2)" = '"csi.tetris.io"' ] &&
    [ "$(field 3)" = "\"$CSI_SOCK\"" ] && [ "$(field 4)" = '"1.0.0"' ] ||
    fail "registration info: $(cat "$WORK/reply")"
call "$regsock" notify true
want OK notify
grep -q "event=registered driver=csi.tetris.io" "$WORK/csi.log" || fail "registration not logged"
call "$regsock" notify false "driver name taken"
grep -q 'event=registration-refused.*driver name taken' "$WORK/csi.log" ||
    fail "refused registration not logged"

# ---- publish ----
ctx="model=$MODELS_DIR/vad.onnx csi.storage.k8s.io/ephemeral=true csi.storage.k8s.io/pod.name=fn-1
csi.storage.k8s.io/pod.namespace=team-a csi.storage.k8s.io/pod.uid=uid-1
csi.storage.k8s.io/serviceAccount.name=default"
# shellcheck disable=SC2086
csi publish vol-1 "$target" $ctx
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
    [ "$(stat -c %d:%i "$target/$f")" = "$(stat -c %d:%i "$STORE/public/$f")" ] ||
        fail "$f is not the store's file"
done
[ "$(keeps)" = 1 ] || fail "want one kept holder, have $(keeps)"
kept=$(find "$STORE/private/holders" -name 'csi-*.keep')
[ "$(grep -c '^[0-9a-f]\{64\} ' "$kept")" -eq "$(jq '[.tensors[] | select(.digest != null) | .digest] | unique | length' "$ix")" ] ||
    fail "the kept holder does not hold every tensor of the model"
grep -q 'event=published volume="vol-1" .*namespace="team-a" pod="fn-1" service_account="default"' \
    "$WORK/csi.log" || fail "the pod's identity is not logged"
# A runtime on the volume alone computes what the model computes.
want_sha=$("$BIN/tetris-onnx-run" "$MODELS_DIR/vad.onnx" --private --seed 7 | jq -r .sha256)
got_sha=$("$BIN/tetris-onnx-run" "$target/model.onnx" --private --seed 7 2>"$WORK/run.err" | jq -r .sha256)
[ -n "$want_sha" ] && [ "$got_sha" = "$want_sha" ] ||
    fail "ONNX Runtime on the volume: $got_sha, want $want_sha ($(cat "$WORK/run.err"))"

# Idempotent: the same publish again is OK and mounts nothing more.
# shellcheck disable=SC2086
csi publish vol-1 "$target" $ctx
want OK "publish again"
[ "$(mounts_under "$target")" = 2 ] || fail "publish again mounted twice"

# ---- refusals: status, message, and nothing left behind ----
t2="$PODS/uid-2/volumes/model"
refused ALREADY_EXISTS "the volume at another target" csi publish vol-1 "$t2" "model=$MODELS_DIR/vad.onnx"
[ -e "$t2" ] && fail "a refused publish made the target"
refused ALREADY_EXISTS "the volume with another model" csi publish vol-1 "$target" "model=$MODELS_DIR/other.onnx"
refused INVALID_ARGUMENT "no volume id" csi publish "" "$t2" "model=$MODELS_DIR/vad.onnx"
refused INVALID_ARGUMENT "no target" csi publish vol-2 "" "model=$MODELS_DIR/vad.onnx"
refused INVALID_ARGUMENT "no capability" csi publish-nocap vol-2 "$t2" "model=$MODELS_DIR/vad.onnx"
refused INVALID_ARGUMENT "a block volume" csi publish-block vol-2 "$t2" "model=$MODELS_DIR/vad.onnx"
refused INVALID_ARGUMENT "no model" csi publish vol-2 "$t2"
refused INVALID_ARGUMENT "an unknown attribute" csi publish vol-2 "$t2" "model=$MODELS_DIR/vad.onnx" colour=red
refused INVALID_ARGUMENT "a persistent volume" csi publish vol-2 "$t2" "model=$MODELS_DIR/vad.onnx" \
    csi.storage.k8s.io/ephemeral=false
refused INVALID_ARGUMENT "a model outside the models directory" csi publish vol-2 "$t2" \
    "model=$MODELS/silero_vad_v5.onnx"
refused INVALID_ARGUMENT "a relative model" csi publish vol-2 "$t2" "model=vad.onnx"
refused INVALID_ARGUMENT "a registry the daemon may not reach" csi publish vol-2 "$t2" \
    "model=oci://reg.example:5000/m:v1"
refused NOT_FOUND "a missing model" csi publish vol-2 "$t2" "model=$MODELS_DIR/missing.onnx"
refused INVALID_ARGUMENT "a file that is not a model" csi publish vol-2 "$t2" "model=$MODELS_DIR/not-a-model.onnx"
refused INVALID_ARGUMENT "a target outside the pods directory" csi publish vol-2 "$WORK/elsewhere/t" \
    "model=$MODELS_DIR/vad.onnx"
ln -s "$WORK/elsewhere" "$PODS/uid-2/volumes/link"
refused INVALID_ARGUMENT "a target through a link out of the pods directory" csi publish vol-2 \
    "$PODS/uid-2/volumes/link/t" "model=$MODELS_DIR/vad.onnx"
refused INVALID_ARGUMENT "the pods directory itself" csi publish vol-2 "$PODS" "model=$MODELS_DIR/vad.onnx"
refused NOT_FOUND "unpublish at another target" csi unpublish vol-1 "$t2"
refused INVALID_ARGUMENT "unpublish without a target" csi unpublish vol-1 ""
refused INVALID_ARGUMENT "unpublish without a volume id" csi unpublish "" "$target"
ls "$WORK/elsewhere" | grep -q . && fail "a refused publish wrote outside the pods directory"

# ---- the gRPC layer: garbage, refused calls, limits ----
csi garbage
grep -q connection-closed "$WORK/reply" || fail "garbage did not end its connection"
grep -q "event=grpc-bad-connection server=csi" "$WORK/csi.log" || fail "garbage not logged"
csi raw POST /csi.v1.Identity/Probe text/plain 0000000000
grep -q '^http=415' "$WORK/reply" || fail "a wrong content-type: $(cat "$WORK/reply")"
csi raw GET /csi.v1.Identity/Probe application/grpc 0000000000
grep -q '^http=405' "$WORK/reply" || fail "a GET: $(cat "$WORK/reply")"
csi raw POST /csi.v1.Controller/CreateVolume application/grpc 0000000000
want UNIMPLEMENTED "an unknown method"
csi raw POST "$(printf '/csi.v1.Identity/Probe\001')" application/grpc 0000000000
want UNIMPLEMENTED "a path that is not printable"
csi raw POST /csi.v1.Identity/Probe application/grpc 0100000000
want UNIMPLEMENTED "a compressed message"
csi raw POST /csi.v1.Identity/Probe application/grpc 00000000
want INTERNAL "a cut prefix"
csi raw POST /csi.v1.Identity/Probe application/grpc 00000000050801
want INTERNAL "a prefix announcing more than is sent"
csi raw POST /csi.v1.Node/NodePublishVolume application/grpc 00000000020801
want INVALID_ARGUMENT "a volume id that is not a string"
csi raw POST /csi.v1.Identity/Probe application/grpc 0000000002ffff
want INVALID_ARGUMENT "a request that is not protobuf"
csi big /csi.v1.Identity/Probe 5000000
want RESOURCE_EXHAUSTED "a message over the limit"
csi probe
want OK "probe after all that"

# ---- the daemon's restart and a reclaim pass keep the volume's tensors ----
kill -KILL "$RECLAIMER_PID"
wait "$RECLAIMER_PID" 2>/dev/null || true
"$BIN/tetris-reclaimer" --store "$STORE" --listen "" --keep-alive 0 --once >>"$WORK/once.log" 2>&1 ||
    fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
jq -r '.tensors[] | select(.shared) | .file' "$ix" | sort -u | while read -r f; do
    [ -f "$STORE/public/$f" ] || fail "the reclaimer freed $f, which a volume holds"
done
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600

# ---- the plugin's restart: recovered from what is mounted ----
# An unfinished publish left by a crash: a volume without record, and a
# kept holder of a volume that is gone.
orphan=$(printf 'orphan' | sha256sum | cut -c1-64)
mkdir -p "$STORE/private/volumes/$orphan/view"
lost=$(printf 'lost' | sha256sum | cut -c1-64)
printf 'tetris-holder 1\npid 0\nlabel lost\n' >"$STORE/private/holders/csi-$lost.keep"
kill -KILL "$CSI_PID"
wait "$CSI_PID" 2>/dev/null || true
mountpoint -q "$target" || fail "the volume's mount went with the plugin"
csi_start --registry-dir "$registry" --max-volumes 4
grep -q "event=volume-recovered volume=\"vol-1\"" "$WORK/csi.log" || fail "vol-1 not recovered"
[ -e "$STORE/private/volumes/$orphan" ] && fail "an unfinished publish survived the restart"
[ -e "$STORE/private/holders/csi-$lost.keep" ] && fail "an orphan kept holder survived"
[ "$(keeps)" = 1 ] || fail "vol-1's kept holder is gone after the restart"
# shellcheck disable=SC2086
csi publish vol-1 "$target" $ctx
want OK "publish after the restart"

# ---- a full store: RESOURCE_EXHAUSTED, nothing left behind ----
reclaimer_stop
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600 --capacity 4096
refused RESOURCE_EXHAUSTED "a full store" csi publish vol-3 "$t2" "model=$MODELS_DIR/other.onnx"
reclaimer_stop
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600

# ---- unpublish ----
csi unpublish vol-1 "$target"
want OK unpublish
mountpoint -q "$target" 2>/dev/null && fail "still mounted after unpublish"
[ -e "$target" ] && fail "the target directory is still there"
[ "$(keeps)" = 0 ] || fail "the kept holder is still there"
[ "$(volumes)" = 0 ] || fail "the volume's directory is still there"
csi unpublish vol-1 "$target"
want OK "unpublish again"
# The tensors are the reclaimer's again.
reclaimer_stop
"$BIN/tetris-reclaimer" --store "$STORE" --listen "" --keep-alive 0 --once >>"$WORK/once.log" 2>&1 ||
    fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
[ "$(find "$STORE/public/tensors" -type f | wc -l)" = 0 ] ||
    fail "tensors of an unpublished volume stay: $(find "$STORE/public/tensors" -type f | head -3)"

# ---- a clean stop ----
kill -TERM "$CSI_PID"
rc=0
wait "$CSI_PID" || rc=$?
[ $rc = 0 ] || fail "tetris-csi exited $rc on SIGTERM"
[ -e "$CSI_SOCK" ] && fail "the CSI socket is still there"
[ -e "$regsock" ] && fail "the registration socket is still there"
note "ok: $n_shared shared tensors in the volume"
