#!/bin/sh
# test-cluster-smoke.sh - the local cluster works end to end:
#  1. it comes up (or is up) and answers with the kubeconfig it wrote, and
#     none of its schedulers has the Helm chart's default scheduler name;
#  2. API-only nodes exist, schedulable (no not-ready taint) and say where
#     their inventory is;
#  3. with the tetris extender down and ignorable, the cluster's own tetris
#     scheduler (tetris-local-scheduler) still binds a pod to one of them,
#     and deleting it completes;
#  4. a pod that scheduler places on the real node reads a /dev/shm
#     directory mounted read-only (writes fail) and hands its findings back
#     through a hostPath file.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
k8s_cluster_up

# 1. The API through the kubeconfig, and the real node Ready.
kc get --raw /readyz >/dev/null || fail "apiserver not ready through $KUBECONFIG_FILE"
[ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ] ||
    fail "node $NODE_NAME not Ready"
if kc get node "$NODE_NAME" -o jsonpath='{.spec.taints[*].key}' | grep -q not-ready; then
    fail "$NODE_NAME still tainted not-ready"
fi
# The Helm chart's scheduler, installed here, must be the only one serving
# its default name: none of the cluster's running schedulers may take it.
chart_scheduler="$(yq -r .scheduler.name "$ROOT/charts/tetris/values.yaml")"
[ -n "$chart_scheduler" ] || fail "charts/tetris/values.yaml names no scheduler"
schedulers=0
for args in "$CLUSTER_DIR"/run/*.args; do
    daemon_running "$(basename "$args" .args)" && grep -q '/kube-scheduler$' "$args" || continue
    conf="$(sed -n '/^--config$/{n;p;}' "$args")"
    schedulers=$((schedulers + 1))
    ! grep -qx -- "- schedulerName: $chart_scheduler" "$conf" ||
        fail "the cluster's scheduler ($conf) serves $chart_scheduler, the chart's default scheduler name"
done
[ "$schedulers" -ge 1 ] || fail "no kube-scheduler of the cluster found running in $CLUSTER_DIR/run"

# 2. Three API-only nodes.
k8s_api_nodes 3
for i in 1 2 3; do
    n="tetris-api-node-$i"
    [ "$(kc get node "$n" -o jsonpath='{.metadata.labels.tetris\.io/node-kind}')" = api-only ] ||
        fail "$n lacks label tetris.io/node-kind=api-only"
    kc get node "$n" -o jsonpath='{.metadata.annotations.tetris\.io/inventory-url}' |
        grep -q '^http://127\.0\.0\.1:[0-9]*/inventory$' || fail "$n lacks its inventory URL"
    if kc get node "$n" -o jsonpath='{.spec.taints[*].key}' | grep -q not-ready; then
        fail "$n still tainted not-ready"
    fi
done

# 3. As the cluster starts it, the extender is ignorable and nothing serves
# its URL. Another test may have restarted $LOCAL_SCHEDULER differently (the
# cluster is shared, so this test does not change it back): with an extender
# answering, binding is still checked; with a non-ignorable one down, no pod
# can bind and the step is skipped.
conf="$CLUSTER_DIR/config/$LOCAL_SCHEDULER.yaml"
url="$(sed -n 's/^- urlPrefix: //p' "$conf")"
[ -n "$url" ] || fail "$LOCAL_SCHEDULER has no extender ($conf)"
extender_down=1
curl -s --max-time 2 -o /dev/null "$url/filter" && extender_down=0
ignorable=0
grep -q '^  ignorable: true$' "$conf" && ignorable=1

# bind_to_api_node NS: a pod of the cluster's own tetris scheduler lands on
# an API-only node,
# and deleting it completes.
bind_to_api_node() {
    kc -n "$1" create -f - >/dev/null <<YAML || fail "cannot create pod on-api-node"
apiVersion: v1
kind: Pod
metadata:
  name: on-api-node
spec:
  schedulerName: $LOCAL_SCHEDULER
  nodeSelector:
    tetris.io/node-kind: api-only
  containers:
  - name: c
    image: tetris-test-tools:latest
    imagePullPolicy: Never
YAML
    k8s_wait_bound "$1" on-api-node
    case "$K8S_NODE" in
    tetris-api-node-[123]) ;;
    *) fail "on-api-node bound to $K8S_NODE, not an API-only node" ;;
    esac
    # The binding is that scheduler's (events.k8s.io: reportingComponent).
    kc -n "$1" get events --field-selector involvedObject.name=on-api-node,reason=Scheduled \
        -o jsonpath='{.items[*].reportingComponent}' | grep -qw "$LOCAL_SCHEDULER" ||
        fail "no Scheduled event from $LOCAL_SCHEDULER for on-api-node"
    # No kubelet confirms the deletion of a pod on an API-only node: the
    # cluster's api-node-reaper does, so an ordinary delete completes.
    kc -n "$1" delete pod on-api-node --timeout="${K8S_TIMEOUT}s" >/dev/null ||
        fail "deleting on-api-node did not complete (api-node-reaper)"
}

k8s_namespace smoke
ns="$K8S_NS"
if [ "$extender_down" = 1 ] && [ "$ignorable" = 0 ]; then
    echo "SKIP step 3: $LOCAL_SCHEDULER was restarted with a non-ignorable extender at $url" >&2
else
    bind_to_api_node "$ns"
    echo "extender at $url $([ "$extender_down" = 1 ] && echo down || echo up): bound to $K8S_NODE" >&2
fi

# 4. Read-only store on the real node, output through a hostPath file.
k8s_tools_image
store="$(mktemp -d /dev/shm/tetris-smoke.XXXXXX)"
out="$(mktemp -d /tmp/tetris-smoke-out.XXXXXX)"
K8S_CLEANUP_PATHS="$store $out"
token="$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
echo "$token" >"$store/tensor"
kc -n "$ns" create -f - >/dev/null <<YAML || fail "cannot create pod on-real-node"
apiVersion: v1
kind: Pod
metadata:
  name: on-real-node
spec:
  schedulerName: $LOCAL_SCHEDULER
  nodeSelector:
    kubernetes.io/hostname: $NODE_NAME
  hostNetwork: true
  restartPolicy: Never
  containers:
  - name: c
    image: tetris-test-tools:latest
    imagePullPolicy: Never
    command:
    - /bin/sh
    - -c
    - |
      cat /store/tensor >/out/read
      echo "smoke log line"
      if (echo x >/store/tensor) 2>/dev/null; then echo writable; else echo read-only; fi >/out/mode
    volumeMounts:
    - { name: store, mountPath: /store, readOnly: true }
    - { name: out, mountPath: /out }
  volumes:
  - { name: store, hostPath: { path: $store, type: Directory } }
  - { name: out, hostPath: { path: $out, type: Directory } }
YAML
k8s_wait_phase "$ns" on-real-node Succeeded
[ "$(cat "$out/read" 2>/dev/null)" = "$token" ] || fail "pod read '$(cat "$out/read" 2>/dev/null)', want '$token'"
[ "$(cat "$out/mode" 2>/dev/null)" = read-only ] || fail "store mount is $(cat "$out/mode" 2>/dev/null), want read-only"
[ "$(cat "$store/tensor")" = "$token" ] || fail "the pod changed the read-only store"
k8s_pod_log "$ns" on-real-node | grep -qx "smoke log line" ||
    fail "k8s_pod_log does not show what the pod printed: $(k8s_pod_log "$ns" on-real-node)"
echo "cluster smoke: ok" >&2
