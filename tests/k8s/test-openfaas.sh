#!/bin/sh
# test-openfaas.sh - tetris plugged into an unmodified OpenFaaS CE: the real
# faas-netes and gateway (built from their 2023 MIT sources by
# scripts/cluster/build-openfaas.sh) run against the local cluster, and
#  1. a function deployed with POST /system/functions and the annotation
#     tetris.io/model gets the read-only store mount from tetris-webhook;
#  2. a kube-scheduler calling the tetris extender binds it to the node
#     whose store holds its tensors (the real node, not the empty API-only
#     one);
#  3. it answers through the gateway's /function/NAME with the outputs
#     tetris-onnx-run computes, its weights mapped from the node's store;
#  4. tetris-autoscaler, reading the gateway's own
#     gateway_function_invocation_total through a real Prometheus, adds
#     sibling Deployments whose pods map the same tensors: one copy in the
#     store for all instances;
#  5. DELETE /system/functions leaves nothing behind.
# SKIPs where the OpenFaaS sources and binaries are both absent (a user's
# clone). Traffic goes only to this cluster's pods and loopback.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
k8s_release_only tetris-function
need_models
k8s_openfaas_bin
k8s_cluster_up
k8s_api_nodes 1
k8s_namespace openfaas-fn
ns="$K8S_NS"
work="$WORK"
store="$(mktemp -d /dev/shm/tetris-openfaas-store.XXXXXX)"
K8S_CLEANUP_PATHS="$store"
chmod 755 "$store"
model=ch_PP-OCRv4_det_infer.onnx
fn=ocr-det
sel=tetris.io/openfaas-test

# The function's image as docs/OPENFAAS.md builds it: tetris-function is
# the entrypoint, on OpenFaaS's port 8080, the model inside.
fn_image="tetris-openfaas-$fn:latest"
"$ROOT/deploy/images/build.sh" -b "$BIN" -n "$fn_image" -m "$MODELS/$model" 2>"$work/image.log" ||
    fail "function image: $(tail -3 "$work/image.log")"

# The real node's store holds the model; the API-only node's is empty.
# The real node's daemon serves where its Node's tetris.io/inventory-url says.
inv_url="$(kc get node "$NODE_NAME" -o jsonpath='{.metadata.annotations.tetris\.io/inventory-url}')"
inv_addr="${inv_url#http://}"
inv_addr="${inv_addr%%/*}"
inv_port="${inv_addr##*:}"
[ -n "$inv_port" ] || fail "$NODE_NAME has no tetris.io/inventory-url"
! ss -Hltn "sport = :$inv_port" | grep -q . || fail "$NODE_NAME's inventory port $inv_port is in use"
reclaimer_start "$store" "$work/reclaimer.log" --listen "$inv_addr" --interval 0.5s \
    --node-name "$NODE_NAME" --keep-alive 86400
"$BIN/tetris-agent" load --direct --store "$store" "$MODELS/$model" >/dev/null 2>"$work/agent.log" ||
    fail "cannot fill the node's store: $(tail -3 "$work/agent.log")"
mkdir "$work/empty"
k8s_api_node_reclaimer 1 "$work/empty" "$work/reclaimer-api.log" --interval 0.5s

# The manifest (its paths are the image's), an extender reading the real
# node's inventory on the port its annotation names, a scheduler calling
# it, and the webhook sending function pods to it.
k8s_manifest "$ns" "$fn" "$MODELS/$model" "$work/manifest.json" "/models/$model"
ext_port="$(free_port)"
TETRIS_RECLAIMER_PORT="$inv_port"
k8s_extender "$ns" "$ext_port" "$work/extender.log" 1 2
sched="tetris-e2e-openfaas-${ns##*-}"
k8s_scheduler "$sched" "$ext_port" true "$work/scheduler.log"

kc label namespace "$ns" "$sel=$ns" >/dev/null
k8s_webhook "tetris-webhook-openfaas-$ns" "$sel" "$ns" "$work/webhook.log" \
    --namespace "$ns" --manifest-namespace "$ns" --store "$store" --scheduler "$sched"

# OpenFaaS CE as its chart runs it: faas-netes (the provider) and the gateway.
k8s_openfaas "$ns"
gw="$OF_GW"
echo "ok faas-netes and gateway (OpenFaaS CE) serve"

# 1. faas-cli deploy, as a request: the annotation opts the function in.
curl -fsS --max-time 30 -X POST "$gw/system/functions" -H 'Content-Type: application/json' \
    --data-binary @- >"$work/deploy.out" 2>&1 <<JSON || fail "deploy: $(cat "$work/deploy.out")"
{"service": "$fn", "image": "$fn_image", "namespace": "$ns",
 "envVars": {"TETRIS_MODEL": "/models/$model"},
 "annotations": {"tetris.io/model": "$fn"}}
JSON
wait_until "$K8S_TIMEOUT" "[ -n \"\$(kc -n $ns get pods -l faas_function=$fn -o name)\" ]" ||
    fail "faas-netes made no pod: $(tail -5 "$work/faas-netes.log")"
pod="$(kc -n "$ns" get pods -l faas_function="$fn" -o jsonpath='{.items[0].metadata.name}')"
kc -n "$ns" get pod "$pod" -o json >"$work/pod.json"
jq -e --arg s "$store/public" --arg sched "$sched" '
    (.spec.volumes[] | select(.name == "tetris-store") | .hostPath.path) == $s
    and (.spec.containers[0].volumeMounts[] | select(.name == "tetris-store")
         | .readOnly == true and .mountPath == $s)
    and .spec.schedulerName == $sched
    and .metadata.labels["tetris.io/model"] == "'"$fn"'"' "$work/pod.json" >/dev/null ||
    fail "the function's pod lacks the webhook's mutation: $(jq -c .spec "$work/pod.json")"
echo "ok 1. deployed through the gateway; the webhook gave its pod the read-only store"

# 2. Bound by tetris' scheduler to the node holding its tensors.
k8s_wait_bound "$ns" "$pod"
[ "$K8S_NODE" = "$NODE_NAME" ] || fail "pod bound to $K8S_NODE, want $NODE_NAME (holds its tensors)"
echo "ok 2. $sched bound it to $NODE_NAME, whose store holds its tensors"

# 3. It answers through the gateway with the weights from the store.
if ! kc -n "$ns" wait --for=condition=Ready "pod/$pod" --timeout="${K8S_TIMEOUT}s" >/dev/null; then
    k8s_describe "$ns" "$pod"
    k8s_pod_log "$ns" "$pod" >&2
    fail "function pod not Ready"
fi
# A Ready pod reaches the gateway once the endpoints controller and
# faas-netes's informer have seen it; until then the gateway answers 503
# "No endpoints available" (seen once in CI).
wait_until 60 "curl -fsS --max-time 5 -o /dev/null $gw/function/$fn/v2/health/ready" ||
    fail "the gateway never routed to the Ready pod: $(curl -sS --max-time 5 "$gw/function/$fn/v2/health/ready" 2>&1)"
for seed in 4 9; do
    curl -sS --max-time 60 --data-binary "{\"seed\":$seed}" "$gw/function/$fn" >"$work/answer" 2>&1
    got=$(jq -r .sha256 "$work/answer" 2>/dev/null)
    want=$("$BIN/tetris-onnx-run" "$MODELS/$model" --private --seed $seed 2>/dev/null | jq -r .sha256)
    [ -n "$want" ] && [ "$got" = "$want" ] ||
        fail "seed $seed: gateway answered '$(head -c 300 "$work/answer")', want sha256 $want"
done
k8s_pod_log "$ns" "$pod" >"$work/pod.log"
grep '^{"event":"ready"' "$work/pod.log" | jq -e '.mode == "store" and .fell_back == false and .shared_bytes > 0' \
    >/dev/null || fail "the function does not serve from the node's store: $(cat "$work/pod.log")"
node_metric() { metric_at "http://$inv_addr" "$1"; }
wait_until 30 '[ "$(node_metric tetris_store_holders)" = 1 ]' ||
    fail "the node's daemon sees $(node_metric tetris_store_holders) holders, want 1 (the pod)"
resident_one="$(node_metric tetris_store_resident_bytes)"
echo "ok 3. /function/$fn answers as tetris-onnx-run; weights mapped from the store"

# 4. tetris-autoscaler scales it from the gateway's own metric, through a
# real Prometheus scraping the gateway. The profile is the test's: one
# config whose pods serve 1 request/s each, so that the load below needs
# more pods than faas-netes's one.
cat >"$work/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: openfaas-gateway
    static_configs: [{targets: ['127.0.0.1:8082']}]
YAML
prometheus_start "$work/prometheus.yml"
cat >"$work/$fn.profile.yaml" <<YAML
tetris_profile: 1
model: $fn
model_file: $model
measured: false
configs:
- {c: 0.1, m_mib: 64, b: 1, p: 1, latency_ms: {mean: 1000, p95: 1000, p99: 1000}}
YAML
# Requests one after another, about 2-3 per second: more than one pod's 1.
# Each request's latency through the gateway is kept for the report below.
( while :; do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 30 \
        --data-binary '{"seed":1}' "$gw/function/$fn" >>"$work/latencies"
    sleep 0.3
done ) &
load_pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $load_pid"
query='sum(rate(gateway_function_invocation_total{job=~"{job}",function_name=~"{function}(\\.{namespace})?",code="200"}[15s]))'
concrete="$(printf '%s' "$query" | sed -e "s/{function}/$fn/" -e "s/{namespace}/$ns/" -e "s/{job}/openfaas-gateway/")"
prom_value() {
    curl -sS -G "$PROM_URL/api/v1/query" --data-urlencode "query=$1" | jq -r '.data.result[0].value[1] // "0"'
}
wait_until 120 '[ "$(prom_value "$concrete" | awk "{ print (\$1 > 1) }")" = 1 ]' ||
    fail "Prometheus never saw more than 1 request/s at the gateway"
"$BIN/tetris-autoscaler" run --kubeconfig "$KUBECONFIG_FILE" --namespace "$ns" \
    --prometheus "$PROM_URL" --query "$query" --openfaas "$fn=$work/$fn.profile.yaml" \
    --slo-ms 3000 --interval 2 --window 20 >"$work/autoscaler.out" 2>"$work/autoscaler.log" &
KILL_ON_EXIT="$KILL_ON_EXIT $!"
wait_until "$K8S_TIMEOUT" "grep -q 'event=create' '$work/autoscaler.log'" ||
    fail "the autoscaler created no sibling: $(tail -5 "$work/autoscaler.log")"
sibling="$(kc -n "$ns" get deployments -l "tetris.io/openfaas-function=$fn" -o jsonpath='{.items[0].metadata.name}')"
[ -n "$sibling" ] || fail "no sibling Deployment labelled tetris.io/openfaas-function=$fn"
kc -n "$ns" get deployment "$sibling" -o json >"$work/sibling.json"
jq -e --arg fn "$fn" '.metadata.ownerReferences[0].name == $fn
    and .spec.template.metadata.labels.faas_function == $fn
    and (.metadata.labels.faas_function == null)' "$work/sibling.json" >/dev/null ||
    fail "sibling $sibling is not owned by $fn or mislabelled: $(jq -c .metadata "$work/sibling.json")"
want_pods=$((1 + $(jq -r .spec.replicas "$work/sibling.json")))
wait_until "$K8S_TIMEOUT" "[ \"\$(kc -n $ns get pods -l faas_function=$fn -o json |
    jq '[.items[] | select(.status.conditions[]? | .type == \"Ready\" and .status == \"True\")] | length')\" -ge $want_pods ]" ||
    fail "the function's $want_pods pods never became Ready: $(kc -n "$ns" get pods -o wide)"
kc -n "$ns" get pods -l "faas_function=$fn" -o json >"$work/pods.json"
jq -e --arg s "$store/public" --arg n "$NODE_NAME" 'all(.items[];
    .spec.nodeName == $n and
    (.spec.volumes[] | select(.name == "tetris-store") | .hostPath.path) == $s)' "$work/pods.json" \
    >/dev/null || fail "a sibling pod lacks the store or runs elsewhere: $(jq -c '[.items[] | [.metadata.name, .spec.nodeName]]' "$work/pods.json")"
wait_until 60 "[ \"\$(node_metric tetris_store_holders)\" -ge $want_pods ]" ||
    fail "the node's daemon sees $(node_metric tetris_store_holders) holders, want $want_pods"
[ "$(node_metric tetris_store_resident_bytes)" = "$resident_one" ] ||
    fail "the store holds $(node_metric tetris_store_resident_bytes) bytes for $want_pods pods, $resident_one for one"
kill "$load_pid"
# Measured, not asserted: what the gateway's uniform routing over the pods
# gave the client against the SLO (3000 ms).
n_req=$(wc -l <"$work/latencies")
n_bad=$(awk '$1 != 200 || $2 * 1000 > 3000' "$work/latencies" | wc -l)
pct() { awk '{ print $2 * 1000 }' "$work/latencies" | sort -n | sed -n "$(($1 * n_req / 100 + 1))p"; }
note "through the gateway: requests=$n_req over_slo_or_failed=$n_bad p50_ms=$(pct 50) p95_ms=$(pct 95)"
echo "ok 4. the autoscaler added $sibling from the gateway's metric; $want_pods pods map one copy ($resident_one bytes)"

# 5. Deleting through the gateway removes everything tetris added too.
curl -fsS --max-time 30 -X DELETE "$gw/system/functions" -H 'Content-Type: application/json' \
    --data-binary "{\"functionName\": \"$fn\"}" >"$work/delete.out" 2>&1 ||
    fail "delete: $(cat "$work/delete.out")"
wait_until "$K8S_TIMEOUT" "[ -z \"\$(kc -n $ns get deployments,services,pods -o name)\" ]" ||
    fail "left behind: $(kc -n "$ns" get deployments,services,pods -o name | tr '\n' ' ')"
echo "ok 5. deleted through the gateway: no Deployment, Service or pod left"
echo "OpenFaaS CE with tetris: ok" >&2
