#!/bin/sh
# test-install-csi.sh - `helm install` of charts/tetris with csi.enabled on
# the local cluster: tetris-csi runs as the privileged container of the
# node daemon's DaemonSet pod, with the kubelet's directories as hostPath
# volumes and its pods directory mounted with Bidirectional propagation:
#  1. the plugin registers itself with the kubelet (the node's CSINode
#     lists csi.tetris.io) and the release's CSIDriver is the kubelet's;
#  2. a pod with an inline volume of the driver (no webhook: the volume
#     written in the pod) starts, and ONNX Runtime in it (uid 65532)
#     computes the model's outputs from the view the container mounted;
#  3. deleting the pod unpublishes the volume (no record or kept holder
#     left in the release's store, nothing mounted under the kubelet's
#     pods directory);
#  4. `helm uninstall` removes the CSIDriver and stops the plugin, whose
#     sockets go with it.
# The release has its own namespace, store and port; the scheduler, the
# node-pins sidecar and the webhook are off (nothing here calls the API).
. "$(dirname "$0")/../lib/k8s.sh"
CHART="$ROOT/charts/tetris"

k8s_skip_unless_possible
k8s_release_only "$BIN/tetris-onnx-run"
need_models
HELM="$("$ROOT/scripts/helm.sh")" || fail "cannot install helm (scripts/helm.sh)"
k8s_cluster_up
k8s_image
k8s_namespace helm-csi
ns="$K8S_NS"
k8s_namespace csi-fn
fns="$K8S_NS"
release=tetris-csi
kubelet="$CLUSTER_DIR/kubelet"
store="$(mktemp -d /dev/shm/tetris-helm-csi-store.XXXXXX)"
models="$(mktemp -d /tmp/tetris-helm-csi-models.XXXXXX)"
K8S_CLEANUP_PATHS="$store $models"
cp "$MODELS/silero_vad_v5.onnx" "$models/vad.onnx"
chmod 0755 "$models"
"$BIN/tetris-onnx-run" "$models/vad.onnx" --private --seed 1 | jq -r .sha256 >"$WORK/want"
volumes() { find "$store/private/volumes" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
# Before the namespaces go: the pod first, while the plugin unpublishes.
at_exit '"$HELM" uninstall "$release" -n "$ns" >/dev/null 2>&1'
at_exit "kc -n $fns delete pods --all --grace-period=1 >/dev/null 2>&1"

cat >"$WORK/values.yaml" <<YAML
image: {repository: tetris, tag: latest, pullPolicy: Never}
reclaimer:
  store: {hostPath: "$store", tmpfs: none}
  listenHost: 127.0.0.1
  port: $(free_port)
  nodePins: {enabled: false}
scheduler: {enabled: false}
csi:
  enabled: true
  kubeletDir: "$kubelet"
  modelsDir: "$models"
YAML
diagnose() {
    for p in $(kc -n "$1" get pods -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
        k8s_describe "$1" "$p"
        for c in $(kc -n "$1" get pod "$p" -o jsonpath='{.spec.containers[*].name}'); do
            echo "--- log of $p/$c" >&2
            k8s_pod_log "$1" "$p" "$c" 2>/dev/null | tail -20 >&2
        done
    done
}

# 1. The release; the plugin in the daemon's pod registers itself.
"$HELM" install "$release" "$CHART" -n "$ns" -f "$WORK/values.yaml" >"$WORK/install.out" 2>&1 ||
    fail "helm install: $(cat "$WORK/install.out")"
if ! kc -n "$ns" rollout status daemonset/tetris-reclaimer --timeout="${K8S_TIMEOUT}s" >"$WORK/rollout.out" 2>&1; then
    diagnose "$ns"
    fail "the DaemonSet is not ready: $(cat "$WORK/rollout.out")"
fi
daemon_pod="$(kc -n "$ns" get pods -o jsonpath='{.items[0].metadata.name}')"
wait_until 60 "k8s_pod_log '$ns' '$daemon_pod' csi | grep -q 'event=registered driver=csi.tetris.io'" || {
    diagnose "$ns"
    fail "the plugin in the DaemonSet did not register with the kubelet"
}
kc get csinode "$NODE_NAME" -o json | jq -e '.spec.drivers // [] | any(.name == "csi.tetris.io")' >/dev/null ||
    fail "CSINode $NODE_NAME does not list csi.tetris.io"
kc get csidriver csi.tetris.io -o json | jq -e '.spec.podInfoOnMount == true and
    .spec.volumeLifecycleModes == ["Ephemeral"] and .spec.attachRequired == false' >/dev/null ||
    fail "the release's CSIDriver: $(kc get csidriver csi.tetris.io -o json | jq -c .spec)"
echo "ok the chart's tetris-csi registered with the kubelet from the DaemonSet's pod"

# 2. A pod with the inline volume.
kc -n "$fns" create -f - >/dev/null <<YAML || fail "cannot create the pod"
apiVersion: v1
kind: Pod
metadata: { name: fn }
spec:
  nodeName: $NODE_NAME
  terminationGracePeriodSeconds: 5
  securityContext: { runAsUser: 65532, runAsGroup: 65532, runAsNonRoot: true }
  volumes:
  - name: model
    csi: { driver: csi.tetris.io, readOnly: true, volumeAttributes: { model: "$models/vad.onnx" } }
  containers:
  - name: fn
    image: tetris:latest
    imagePullPolicy: Never
    stdin: true
    command: [/usr/local/bin/tetris-onnx-run, /var/run/tetris/model/model.onnx, --private, --seed, "1", --hold]
    volumeMounts: [{ name: model, mountPath: /var/run/tetris/model, readOnly: true }]
YAML
if ! (k8s_wait_phase "$fns" fn Running); then
    diagnose "$ns"
    fail "the pod with the CSI volume does not run"
fi
wait_until 60 "k8s_pod_log '$fns' fn | grep -q sha256" || fail "the pod printed no result: $(k8s_pod_log "$fns" fn)"
got="$(k8s_pod_log "$fns" fn | grep sha256 | jq -r .sha256)"
[ "$got" = "$(cat "$WORK/want")" ] || fail "ONNX Runtime on the volume gives $got, want $(cat "$WORK/want")"
[ "$(volumes)" = 1 ] && [ "$(find "$store/private/holders" -name 'csi-*.keep' | wc -l)" = 1 ] ||
    fail "the release's store does not hold the volume"
echo "ok a pod with the inline volume runs the model's view: the model's outputs"

# 3. Its deletion unpublishes the volume.
kc -n "$fns" delete pod fn --grace-period=1 >/dev/null || fail "cannot delete the pod"
wait_until 90 "[ \$(volumes) = 0 ]" || fail "the volume is still published: $(k8s_pod_log "$ns" "$daemon_pod" csi | tail -n 3)"
[ "$(find "$store/private/holders" -name 'csi-*.keep' | wc -l)" = 0 ] || fail "a kept holder is left"
! grep -q " $kubelet/pods/[^ ]*/kubernetes.io~csi/" /proc/self/mountinfo || fail "a volume is still mounted"
echo "ok the pod deleted: its volume unpublished, nothing held or mounted"

# 4. Uninstall.
"$HELM" uninstall "$release" -n "$ns" >"$WORK/uninstall.out" 2>&1 || fail "helm uninstall: $(cat "$WORK/uninstall.out")"
wait_until 60 "! kc get csidriver csi.tetris.io >/dev/null 2>&1 && [ ! -e '$kubelet/plugins_registry/csi.tetris.io-reg.sock' ]" ||
    fail "after uninstall: the CSIDriver or the registration socket is still there"
# The plugin's directory (the hostPath made it) holds nothing once it stopped.
rmdir "$kubelet/plugins/csi.tetris.io" || fail "the plugin left files: $(ls -A "$kubelet/plugins/csi.tetris.io")"
echo "ok helm uninstall: the CSIDriver and the plugin's sockets are gone"
