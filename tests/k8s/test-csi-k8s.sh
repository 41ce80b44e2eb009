#!/bin/sh
# test-csi-k8s.sh - tetris-csi with the local cluster's real kubelet: the
# pods' model views as inline CSI volumes, end to end.
#  1. The plugin registers itself with the kubelet (its registration
#     socket in the kubelet's plugins_registry; the node's CSINode lists
#     the driver), and the chart's CSIDriver object is what the kubelet
#     reads (ephemeral, podInfoOnMount).
#  2. tetris-webhook in --volume csi mode gives function pods the volume;
#     each admitted pod passes the "restricted" profile's rules
#     (tests/lib/pod_security.jq); N pods of tenant alpha's namespace start,
#     their runtime (ONNX Runtime, tetris-onnx-run as uid 65532) loads the
#     view and computes the model's outputs; the tenant's store holds one
#     copy, mapped by all N (each one's PSS of it about 1/N of its RSS).
#  3. A pod of tenant beta's namespace sees beta's tensors only (the files
#     its volume shows, listed from inside the pod), none of alpha's; a
#     namespace the tenant map does not name gets no volume.
#  4. The plugin and the node daemon killed (SIGKILL) and restarted: the
#     volumes are recovered from their mounts and a reclaim pass frees
#     nothing they hold; killed again in the middle of a publish (the
#     daemon stopped, the load waiting on it): the kubelet's retry
#     publishes the volume, nothing is left of the broken attempt.
#  5. Deleting the pods, one of them forced (--grace-period=0 --force),
#     unpublishes every volume (NodeUnpublishVolume):
#     no mount, record or kept holder is left, and a reclaim pass frees
#     every tensor.
# The plugin and the daemon run on the host (as the chart's DaemonSet
# would, with the kubelet's directories); the pods are real containers.
. "$(dirname "$0")/../lib/k8s.sh"
. "$ROOT/tests/lib/csi-k8s.sh"

k8s_skip_unless_possible
k8s_release_only "$BIN/tetris-onnx-run"
need_models
k8s_cluster_up
k8s_image
k8s_namespace csi-manifests
mns="$K8S_NS"
k8s_namespace csi-alpha
ans="$K8S_NS"
k8s_namespace csi-beta
bns="$K8S_NS"
k8s_namespace csi-nobody
nns="$K8S_NS"
N=3
store="$WORK/store"
models="$WORK/models"
map="$WORK/tenant-map"
mkdir -p "$store" "$models"
cp "$MODELS/silero_vad_v5.onnx" "$models/vad.onnx"
cp "$MODELS/hello_deepa.onnx" "$models/other.onnx"
printf '%s * tenant:alpha\n%s * tenant:beta\n' "$ans" "$bns" >"$map"
A="$store/tenants/alpha"
B="$store/tenants/beta"

# ---- the node's two programs, restartable ----
daemon_start() {
    reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600 --tenants alpha,beta
}
plugin_start() { csi_start "$store" "$models" --tenant-map "$map"; }
# kill_both: SIGKILL to the plugin and the daemon, both gone on return.
kill_both() {
    kill -KILL "$CSI_PID" "$RECLAIMER_PID"
    wait "$RECLAIMER_PID" 2>/dev/null || true
    wait_until 30 "! kill -0 $CSI_PID 2>/dev/null" || fail "tetris-csi survived SIGKILL"
}
keeps() { csi_keeps "$1"; }
all_keeps() { find "$store" -path '*/private/holders/csi-*.keep' | wc -l; }
volumes() { csi_volumes "$store"; }

# At exit, before the namespaces go: the pods are deleted while the plugin
# still answers, so that the kubelet unpublishes their volumes; then the
# programs stop and whatever is still mounted from the store goes.
csi_cleanup_at_exit "$store" "$ans $bns $nns"

daemon_start
plugin_start

# ---- 1. registration and the CSIDriver ----
csi_register
echo "ok the plugin registered itself with the kubelet; the node lists $CSI_DRIVER"

# ---- 2. N pods of tenant alpha through the webhook ----
k8s_manifest "$mns" vad "$models/vad.onnx" "$WORK/vad.json"
k8s_manifest "$mns" other "$models/other.onnx" "$WORK/other.json"
sel=tetris.io/csi-test
for n in $ans $bns $nns; do kc label namespace "$n" "$sel=$mns" >/dev/null; done
k8s_webhook "tetris-csi-test-$mns" "$sel" "$mns" "$WORK/webhook.log" --volume csi \
    --namespace "$ans" --namespace "$bns" --namespace "$nns" --manifest-namespace "$mns" --scheduler ""
# pod NS NAME MODEL: a function pod as faas-netes makes one, on the real
# node; its container lists the tensor files its volume shows, then runs
# the view's graph and holds the session (stdin stays open).
pod() {
    kc -n "$1" create -o json -f - >"$WORK/$2.json" <<YAML || fail "cannot create pod $2"
apiVersion: v1
kind: Pod
metadata: { name: $2, annotations: { tetris.io/model: $3 }, labels: { faas_function: $2 } }
spec:
  nodeName: $NODE_NAME
  terminationGracePeriodSeconds: 5
  securityContext: { runAsUser: 65532, runAsGroup: 65532 }
  containers:
  - name: fn
    image: tetris:latest
    imagePullPolicy: Never
    stdin: true
    command:
    - /bin/sh
    - -c
    - for f in "\$TETRIS_MODEL_VIEW"/tensors/*/*; do echo "tensor \${f##*/}"; done;
      exec /usr/local/bin/tetris-onnx-run "\$TETRIS_MODEL_VIEW/model.onnx" --private --seed 1 --hold
YAML
}
# ran NS NAME MODEL: NAME is Running and printed what the model computes.
ran() {
    k8s_wait_phase "$1" "$2" Running
    wait_until 60 "k8s_pod_log '$1' '$2' | grep -q sha256" ||
        fail "$2 printed no result: $(k8s_pod_log "$1" "$2" | tail -n 5)"
    _got=$(k8s_pod_log "$1" "$2" | grep sha256 | jq -r .sha256)
    [ "$_got" = "$(cat "$WORK/want.$3")" ] || fail "$2: ONNX Runtime on the volume gives $_got, want $(cat "$WORK/want.$3")"
}
for m in vad other; do
    "$BIN/tetris-onnx-run" "$models/$m.onnx" --private --seed 1 | jq -r .sha256 >"$WORK/want.$m"
done
i=1
while [ $i -le $N ]; do
    pod "$ans" "fn-$i" vad
    i=$((i + 1))
done
i=1
while [ $i -le $N ]; do
    ran "$ans" "fn-$i" vad
    admitted="$(kc -n "$ans" get pod "fn-$i" -o json)"
    printf '%s' "$admitted" | jq -e --arg d "$CSI_DRIVER" --arg m "$models/vad.onnx" '[.spec.volumes[] | select(.csi != null)] |
        length == 1 and .[0].csi == {driver: $d, readOnly: true, volumeAttributes: {model: $m}}' >/dev/null ||
        fail "fn-$i: not the webhook's CSI volume: $(printf '%s' "$admitted" | jq -c .spec.volumes)"
    v="$(printf '%s' "$admitted" | jq -c -L "$ROOT/tests/lib" 'include "pod_security"; restricted_violations')"
    [ "$v" = "[]" ] || fail "fn-$i breaks the restricted profile: $v"
    i=$((i + 1))
done
[ "$(volumes)" = $N ] && [ "$(keeps "$A")" = $N ] && [ "$(keeps "$store")" = 0 ] ||
    fail "volumes $(volumes), alpha's kept holders $(keeps "$A"), shared $(keeps "$store")"
copy=$(find "$A/public/tensors" -type f | wc -l)
[ "$copy" = "$(jq '[.tensors[].digest] | unique | length' "$WORK/vad.json")" ] ||
    fail "alpha's store holds $copy tensor files, not one copy of vad's"
[ "$(find "$store/public/tensors" -type f | wc -l)" = 0 ] || fail "alpha's model went into the shared store"
# Every process that maps alpha's tensor files: the N runtimes, each with
# its 1/N share of the pages.
store_mappers "$A/public/tensors" "$WORK/mappers"
[ "$(wc -l <"$WORK/mappers")" = $N ] || fail "want $N processes mapping alpha's tensors: $(cat "$WORK/mappers")"
while read -r p r s; do
    [ $((s * N)) -le $((r + r / 10 + 8)) ] || fail "$p: PSS $s kB of RSS $r kB of the store: not shared by $N pods"
done <"$WORK/mappers"
echo "ok $N pods through the webhook: restricted, the model's outputs, one copy of $copy tensors mapped by all"

# ---- 3. tenant beta sees beta's tensors only; an unmapped namespace none ----
pod "$bns" fn-beta other
ran "$bns" fn-beta other
k8s_pod_log "$bns" fn-beta | sed -n 's/^tensor //p' | sort >"$WORK/beta.seen"
find "$B/public/tensors" -type f -printf '%f\n' | sort >"$WORK/beta.files"
find "$A/public/tensors" -type f -printf '%f\n' | sort >"$WORK/alpha.files"
[ -s "$WORK/beta.seen" ] && cmp -s "$WORK/beta.seen" "$WORK/beta.files" ||
    fail "beta's pod sees $(wc -l <"$WORK/beta.seen") files, beta's store holds $(wc -l <"$WORK/beta.files")"
# Both models may share a tensor or two (each store has its own copy):
# what alpha holds and beta does not must stay out of beta's sight.
comm -23 "$WORK/alpha.files" "$WORK/beta.files" >"$WORK/alpha.only"
[ -s "$WORK/alpha.only" ] || fail "alpha holds nothing beta lacks: the check shows nothing"
[ -z "$(comm -12 "$WORK/beta.seen" "$WORK/alpha.only")" ] || fail "beta's pod sees alpha's tensors"
k8s_pod_log "$ans" fn-1 | sed -n 's/^tensor //p' | sort >"$WORK/alpha.seen"
cmp -s "$WORK/alpha.seen" "$WORK/alpha.files" || fail "alpha's pod does not see exactly alpha's store"
pod "$nns" fn-nobody vad
wait_until 60 "grep -q 'event=publish-refused .*code=PERMISSION_DENIED .*namespace' '$WORK/csi.log'" ||
    fail "a pod of an unmapped namespace was not refused: $(tail -n 3 "$WORK/csi.log")"
[ "$(kc -n "$nns" get pod fn-nobody -o jsonpath='{.status.phase}')" = Pending ] || fail "fn-nobody runs without its volume"
kc -n "$nns" delete pod fn-nobody --grace-period=0 --force >/dev/null 2>&1
[ "$(volumes)" = $((N + 1)) ] || fail "volumes: $(volumes), want $((N + 1))"
echo "ok tenant beta's pod sees its $(wc -l <"$WORK/beta.seen") tensors, none of alpha's; an unmapped namespace gets no volume"

# ---- 4. the plugin and the daemon killed, and killed mid-publish ----
kill_both
"$BIN/tetris-reclaimer" --store "$store" --listen "" --tenants alpha,beta --keep-alive 0 --once \
    >>"$WORK/once.log" 2>&1 || fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
[ "$(find "$A/public/tensors" -type f | wc -l)" = "$copy" ] || fail "a reclaim pass freed tensors the volumes hold"
daemon_start
plugin_start
[ "$(grep -c 'event=volume-recovered' "$WORK/csi.log")" = $((N + 1)) ] ||
    fail "after the restart: $(grep -c 'event=volume-recovered' "$WORK/csi.log") volumes recovered, want $((N + 1))"
wait_until 60 "[ \$(grep -c 'event=registered driver=$CSI_DRIVER' '$WORK/csi.log') -ge 2 ]" ||
    fail "the restarted plugin did not register again"
# A publish in flight: the daemon stopped, the load waits on it. The load
# opens alpha's store again and connects to its socket: more descriptors
# into alpha's store and more sockets than the idle plugin holds.
loading() { find "/proc/$CSI_PID/fd" \( -lname "$A*" -o -lname 'socket:*' \) 2>/dev/null | wc -l; }
base=$(loading)
kill -STOP "$RECLAIMER_PID"
pod "$ans" fn-late vad
wait_until 60 "[ \$(loading) -ge $((base + 2)) ]" || fail "the kubelet did not call the plugin for fn-late"
sleep 1
kill_both
daemon_start
plugin_start
ran "$ans" fn-late vad
[ "$(volumes)" = $((N + 2)) ] && [ "$(keeps "$A")" = $((N + 1)) ] && [ "$(keeps "$B")" = 1 ] ||
    fail "after the killed publish: volumes $(volumes), alpha's holders $(keeps "$A"), beta's $(keeps "$B")"
i=1
while [ $i -le $N ]; do
    [ "$(kc -n "$ans" get pod "fn-$i" -o jsonpath='{.status.phase}')" = Running ] || fail "fn-$i stopped"
    i=$((i + 1))
done
echo "ok the plugin and the daemon killed twice (once mid-publish): volumes recovered, fn-late published by the retry"

# ---- 5. deleting the pods unpublishes every volume ----
# A pod force-deleted first: its API object goes at once and the kubelet
# cleans up after it, unpublishing its volume all the same.
forced="$(kc -n "$ans" get pods -o jsonpath='{.items[0].metadata.name}')"
before="$(volumes)"
kc -n "$ans" delete pod "$forced" --grace-period=0 --force >/dev/null 2>&1
wait_until 120 "[ \$(volumes) = $((before - 1)) ]" ||
    fail "pod $forced force-deleted: $(volumes) volumes left, want $((before - 1))"
for n in $ans $bns; do kc -n "$n" delete pods --all --grace-period=1 --wait=false >/dev/null; done
wait_until 120 "[ \$(volumes) = 0 ] && [ -z \"\$(kc -n $ans get pods -o name)\$(kc -n $bns get pods -o name)\" ]" ||
    fail "after deleting the pods: $(volumes) volumes left; $(grep -c event=unpublished "$WORK/csi.log") unpublished"
[ "$(all_keeps)" = 0 ] || fail "kept holders left: $(find "$store" -name 'csi-*.keep')"
[ "$(csi_mounts)" = 0 ] || fail "mounts left under the kubelet's pods directory"
[ "$(grep -c 'event=unpublished .*known=true' "$WORK/csi.log")" -ge $((N + 2)) ] ||
    fail "$(grep -c 'event=unpublished .*known=true' "$WORK/csi.log") volumes unpublished, want $((N + 2))"
reclaimer_stop
"$BIN/tetris-reclaimer" --store "$store" --listen "" --tenants alpha,beta --keep-alive 0 --once \
    >>"$WORK/once.log" 2>&1 || fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
[ "$(find "$A/public/tensors" "$B/public/tensors" -type f | wc -l)" = 0 ] ||
    fail "tensors left after the volumes went: $(find "$A/public/tensors" "$B/public/tensors" -type f | head -n 3)"
daemon_start
echo "ok the pods deleted: $((N + 2)) volumes unpublished, nothing mounted, held or left in the store"
