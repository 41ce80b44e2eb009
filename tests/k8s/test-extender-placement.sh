#!/bin/sh
# test-extender-placement.sh - tensor-similarity placement end to end on the
# local cluster, with the real kube-scheduler configured from
# deploy/scheduler/kube-scheduler-v1beta1.yaml:
#  - three API-only nodes, each with its own tensor store served by its own
#    tetris-reclaimer: node 1 holds model "vad", node 2 model "ocr-cls",
#    node 3 nothing and a store of capacity 1 byte (full);
#  - the models' manifests are ConfigMaps (label tetris.io/model);
#  - pods of each model are bound by kube-scheduler to the node holding it,
#    with nodeCacheCapable false (full Node objects) and true (names only);
#  - a pod that can only go to node 3 stays Pending and its events carry the
#    extender's reason;
#  - with the extender down (ignorable: true) pods still schedule.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
[ -x "$BIN/tetris-reclaimer" ] || skip "needs tetris-reclaimer"
k8s_cluster_up
k8s_api_nodes 3

MODELS="$ROOT/.deps/models"
work="$(mktemp -d /tmp/tetris-ext-e2e.XXXXXX)"
stores="$(mktemp -d /dev/shm/tetris-ext-e2e.XXXXXX)"
k8s_namespace placement
ns="$K8S_NS"
K8S_CLEANUP_PATHS="$work $stores"

# 1. Stores, filled directly by the agent, each served by a reclaimer on the
# port its Node's tetris.io/inventory-url annotation names.
for i in 1 2 3; do mkdir "$stores/s$i"; done
"$BIN/tetris-agent" load --direct --store "$stores/s1" "$MODELS/silero_vad_v5.onnx" >/dev/null 2>>"$work/agent.log" ||
    fail "cannot fill store 1"
"$BIN/tetris-agent" load --direct --store "$stores/s2" "$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx" >/dev/null 2>>"$work/agent.log" ||
    fail "cannot fill store 2"
for i in 1 2 3; do
    cap=0
    [ "$i" = 3 ] && cap=1
    k8s_api_node_reclaimer "$i" "$stores/s$i" "$work/reclaimer-$i.log" --capacity "$cap" \
        --interval 3600 --keep-alive 86400
done

# 2. Manifests as ConfigMaps.
k8s_manifest "$ns" vad "$MODELS/silero_vad_v5.onnx" "$work/vad.json"
k8s_manifest "$ns" ocr-cls "$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx" "$work/ocr-cls.json"

# 3. The extender.
ext_port="$(free_port)"
k8s_extender "$ns" "$ext_port" "$work/extender.log" 2 3

# pod NAME MODEL SCHEDULER [HOSTNAME]: a function pod for MODEL on API-only nodes.
pod() {
    selector="tetris.io/node-kind: api-only"
    [ -n "${4:-}" ] && selector="kubernetes.io/hostname: $4"
    kc -n "$ns" create -f - >/dev/null <<YAML || fail "cannot create pod $1"
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels: { tetris.io/model: "$2" }
spec:
  schedulerName: $3
  nodeSelector: { $selector }
  containers:
  - name: fn
    image: tetris-test-tools:latest
    imagePullPolicy: Never
YAML
}

expect_node() { # POD NODE
    k8s_wait_bound "$ns" "$1"
    [ "$K8S_NODE" = "$2" ] || {
        tail -20 "$work/extender.log" >&2
        fail "pod $1 bound to $K8S_NODE, want $2 (the node holding its model)"
    }
}

# 4. A kube-scheduler from the deployable configuration, one for each
# nodeCacheCapable setting, binds each pod to the node holding its model.
for mode in false true; do
    sched="tetris-e2e-cache-$mode"
    k8s_scheduler "$sched" "$ext_port" "$mode" "$work/$sched.log"
    for k in 1 2; do
        pod "vad-$mode-$k" vad "$sched"
        expect_node "vad-$mode-$k" tetris-api-node-1
        pod "ocr-$mode-$k" ocr-cls "$sched"
        expect_node "ocr-$mode-$k" tetris-api-node-2
    done
    [ "$mode" = true ] || { kill "$K8S_SCHEDULER_PID"; wait "$K8S_SCHEDULER_PID" 2>/dev/null; }
done

# 5. Node 3's store is full: a pod that may only go there stays Pending and
# says why.
pod vad-full vad "$sched" tetris-api-node-3
reason=""
i=0
while [ $i -lt $((K8S_TIMEOUT * 2)) ]; do
    reason="$(kc -n "$ns" get events --field-selector involvedObject.name=vad-full,reason=FailedScheduling \
        -o jsonpath='{.items[*].message}' 2>/dev/null)"
    case "$reason" in *"tensor store cannot take model vad"*) break ;; esac
    sleep 0.5
    i=$((i + 1))
done
case "$reason" in
*"tensor store cannot take model vad"*) ;;
*) k8s_describe "$ns" vad-full; fail "no FailedScheduling event with the extender's reason (got: $reason)" ;;
esac
[ -z "$(kc -n "$ns" get pod vad-full -o jsonpath='{.spec.nodeName}')" ] || fail "vad-full was bound"
curl -fsS "http://127.0.0.1:$ext_port/metrics" | grep '^tetris_extender_nodes_filtered_total [1-9]' >/dev/null ||
    fail "extender metrics do not count the filtered node"

# 6. Extender down, ignorable: scheduling goes on without it.
kill "$K8S_EXTENDER_PID"
wait "$K8S_EXTENDER_PID" 2>/dev/null
pod vad-down vad "$sched"
k8s_wait_bound "$ns" vad-down
case "$K8S_NODE" in
tetris-api-node-[0-9]*) ;;
*) fail "vad-down bound to unexpected node $K8S_NODE" ;;
esac
echo "extender placement: ok (θ placement with and without node cache, full store filtered, ignorable when down)" >&2
