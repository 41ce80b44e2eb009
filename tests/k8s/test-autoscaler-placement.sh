#!/bin/sh
# test-autoscaler-placement.sh - the autoscaler's instances are the tensor
# store's: a pod of a Deployment that tetris-autoscaler creates carries its
# model's label (tetris.io/model, the profile's model name, as the manifest
# ConfigMap is labelled), so that
#  - the extender scores it by its model: /prioritize gives the API-only node
#    whose store holds the model's tensors the top score and the other 0, and
#    a kube-scheduler configured from deploy/scheduler/ (the chart's
#    configuration) binds the pod there;
#  - tetris-node-pins finds it on that node and writes its model's digests
#    to the pin file, which the node's tetris-reclaimer loads.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
need_models
k8s_cluster_up
k8s_api_nodes 2
k8s_namespace autoscaler-placement
ns="$K8S_NS"
work="$WORK"
model_file="$MODELS/hello_deepa.onnx"

# 1. Node 2's store holds the model, node 1's nothing; each node's daemon
# reads the pin file tetris-node-pins writes for it.
mkdir "$work/s1" "$work/s2"
"$BIN/tetris-agent" load --direct --store "$work/s2" "$model_file" >/dev/null 2>"$work/agent.log" ||
    fail "cannot fill store 2: $(tail -3 "$work/agent.log")"
for i in 1 2; do
    : >"$work/pins-$i"
    k8s_api_node_reclaimer "$i" "$work/s$i" "$work/reclaimer-$i.log" --interval 0.2s \
        --keep-alive 86400 --pin-file "$work/pins-$i"
done

# 2. The model's manifest, an extender and a scheduler that calls it.
k8s_manifest "$ns" hello "$model_file" "$work/hello.json"
ext_port="$(free_port)"
k8s_extender "$ns" "$ext_port" "$work/extender.log" 1
sched="tetris-e2e-autoscaler-${ns##*-}"
k8s_scheduler "$sched" "$ext_port" true "$work/scheduler.log"

# 3. The autoscaler creates one instance for a steady 5 requests/s.
cat >"$work/hello.profile.yaml" <<YAML
tetris_profile: 1
model: hello
model_file: hello_deepa.onnx
measured: false
configs:
- {c: 0.1, m_mib: 64, b: 1, p: 1, latency_ms: {mean: 10, p95: 10, p99: 10}}
YAML
printf '0 5\n' >"$work/steady.trace"
"$BIN/tetris-autoscaler" run --kubeconfig "$KUBECONFIG_FILE" --namespace "$ns" \
    --scheduler-name "$sched" --image tetris-test-tools:latest --image-pull-policy Never \
    --slo-ms 50 --function hello="$work/hello.profile.yaml" --trace hello="$work/steady.trace" \
    >/dev/null 2>"$work/autoscaler.log" || fail "autoscaler: $(cat "$work/autoscaler.log")"
grep -q 'event=create function=hello deployment=hello-c100-m64-b1-p1 replicas=1' "$work/autoscaler.log" ||
    fail "autoscaler created no instance: $(cat "$work/autoscaler.log")"

i=0
while pod="$(kc -n "$ns" get pods -l faas_function=hello -o jsonpath='{.items[0].metadata.name}' 2>/dev/null)" &&
    [ -z "$pod" ]; do
    i=$((i + 1))
    [ $i -lt $((K8S_TIMEOUT * 2)) ] || fail "the Deployment made no pod"
    sleep 0.5
done
[ "$(kc -n "$ns" get pod "$pod" -o jsonpath='{.metadata.labels.tetris\.io/model}')" = hello ] ||
    fail "pod $pod is not labelled tetris.io/model=hello"

# 4. The extender scores the pod as the cluster has it by its model.
kc -n "$ns" get pod "$pod" -o json |
    jq -c '{Pod: ., NodeNames: ["tetris-api-node-1", "tetris-api-node-2"]}' >"$work/args.json"
curl -fsS --max-time 10 -H 'Content-Type: application/json' --data-binary @"$work/args.json" \
    "http://127.0.0.1:$ext_port/prioritize" >"$work/scores.json" || fail "prioritize failed"
[ "$(jq -c 'map({(.Host): .Score}) | add' "$work/scores.json")" = \
    '{"tetris-api-node-1":0,"tetris-api-node-2":10}' ] ||
    fail "prioritize does not prefer the node holding the model: $(cat "$work/scores.json")"
k8s_wait_bound "$ns" "$pod"
[ "$K8S_NODE" = tetris-api-node-2 ] ||
    fail "pod $pod bound to $K8S_NODE, want tetris-api-node-2 (the node holding its model)"
[ "$(kc -n "$ns" get pod "$pod" -o jsonpath='{.spec.schedulerName}')" = "$sched" ] ||
    fail "pod $pod was not scheduled by $sched"

# 5. tetris-node-pins pins the model's tensors on that node; its daemon loads them.
"$BIN/tetris-node-pins" --kubeconfig "$KUBECONFIG_FILE" --namespace "$ns" --node "$K8S_NODE" \
    --pin-file "$work/pins-2" --once 2>"$work/pins.log" || fail "tetris-node-pins: $(tail -3 "$work/pins.log")"
jq -r '.tensors[].digest | sub("^sha256:"; "")' "$work/hello.json" | sort -u >"$work/want"
sort "$work/pins-2" >"$work/got"
cmp -s "$work/want" "$work/got" ||
    fail "pins of $K8S_NODE are not hello's digests: $(diff "$work/want" "$work/got" | head -5)"
n="$(wc -l <"$work/want")"
wait_until 30 "grep -q 'event=pins-loaded file=$work/pins-2 digests=$n' '$work/reclaimer-2.log'" ||
    fail "the daemon of $K8S_NODE did not load $n pins: $(tail -3 "$work/reclaimer-2.log")"
echo "autoscaler placement: ok (model label, extender score, binding, pins)" >&2
