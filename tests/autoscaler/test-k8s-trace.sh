#!/bin/sh
# test-k8s-trace.sh - end to end on the local cluster: a trace with a rising
# and falling rate, paced in real time, makes tetris-autoscaler create and
# scale Deployments through the Kubernetes API exactly as the same trace
# decides in dry-run mode (DTS scale-out, hysteretic scale-in); the
# Deployments carry the OpenFaaS label, tetris env, resources, read-only
# store volume and the scheduler it names; their pods are created and bound
# by that scheduler (the cluster's own, $LOCAL_SCHEDULER); a restarted
# autoscaler adopts the replicas it left; a
# profile stored as a ConfigMap (as `tetris-profiler job` does) plans the same.
. "$(dirname "$0")/../lib/k8s.sh"
here="$ROOT/tests/autoscaler"

k8s_skip_unless_possible
k8s_cluster_up
k8s_api_nodes 2
k8s_namespace autoscale
ns="$K8S_NS"
tmp=$(mktemp -d)
K8S_CLEANUP_PATHS="$tmp"

profile="$here/two-configs.profile.yaml"
# Cool-down and window are not multiples of the tick, so real-time jitter
# cannot move a decision to another tick.
args="--slo-ms 50 --interval 1 --cooldown 2.5 --window 2.5 --namespace $ns
      --scheduler-name $LOCAL_SCHEDULER --image tetris-test-tools:latest --image-pull-policy Never
      --function fn=$profile --trace fn=$here/k8s-rise-and-fall.trace"

# What DTS decides for this trace (simulated time).
# shellcheck disable=SC2086
"$BIN/tetris-autoscaler" run --dry-run $args >"$tmp/dry" 2>"$tmp/dry.log" ||
    fail "dry run: $(cat "$tmp/dry.log")"
want=$(jq -r '"\(.action) \(.deployment) \(.replicas.from) \(.replicas.to)"' "$tmp/dry")
[ "$(echo "$want" | wc -l)" -ge 4 ] || fail "dry run decided too little: $want"
peak=$(jq -s 'map(.replicas.to) | max' "$tmp/dry")
final=$(jq -s 'last | .replicas.to' "$tmp/dry")

# Record what the cluster holds while the autoscaler runs.
(
    while :; do
        kc -n "$ns" get deployment fn-c1000-m100-b1-p1 -o jsonpath='{.spec.replicas}{"\n"}' 2>/dev/null
        sleep 0.3
    done
) >"$tmp/observed" &
watcher=$!
KILL_ON_EXIT="$KILL_ON_EXIT $watcher"

# shellcheck disable=SC2086
"$BIN/tetris-autoscaler" run --realtime --kubeconfig "$KUBECONFIG_FILE" $args \
    >"$tmp/out" 2>"$tmp/run.log" || { kill $watcher; fail "run: $(cat "$tmp/run.log")"; }
sleep 1
kill $watcher 2>/dev/null; wait $watcher 2>/dev/null

got=$(sed -n 's/.*event=\(create\|scale\) function=fn deployment=\([^ ]*\) \(replicas=\([0-9]*\)\|from=\([0-9]*\) to=\([0-9]*\)\).*/\1 \2 \5 \4\6/p' "$tmp/run.log" |
      awk '$1 == "create" { print "create", $2, 0, $3; next } { print }')
[ "$got" = "$want" ] || fail "cluster actions differ from the dry run:
$got
want:
$want
$(cat "$tmp/run.log")"

# The cluster followed: the peak was seen, and the end state is the final decision.
grep -qx "$peak" "$tmp/observed" || fail "never saw $peak replicas: $(sort -u "$tmp/observed" | tr '\n' ' ')"
d=$(kc -n "$ns" get deployment fn-c1000-m100-b1-p1 -o json) || fail "deployment missing"
check() {
    v=$(echo "$d" | jq -r "$1")
    [ "$v" = "$2" ] || fail "deployment $1 = $v, want $2"
}
check .spec.replicas "$final"
check '.metadata.labels.faas_function' fn
check '.spec.template.metadata.labels["tetris.io/model"]' two-configs
check '.spec.template.spec.schedulerName' "$LOCAL_SCHEDULER"
check '.spec.template.spec.containers[0].env | map("\(.name)=\(.value)") | join(",")' \
    "TETRIS_BATCH=1,TETRIS_CONCURRENCY=1,TETRIS_THREADS=1,TETRIS_MODEL=/models/two-configs,TETRIS_STORE=/dev/shm/tetris,TETRIS_PORT=8080"
check '.spec.template.spec.containers[0].resources.requests.memory' 100Mi
check '.spec.template.spec.containers[0].volumeMounts[0].readOnly' true

# The controller made the pods and the cluster's scheduler bound them.
i=0
while :; do
    pods=$(kc -n "$ns" get pods -l faas_function=fn -o json |
        jq '[.items[] | select(.metadata.deletionTimestamp == null)]')
    live=$(echo "$pods" | jq length)
    bound=$(echo "$pods" | jq '[.[] | select(.spec.nodeName != null and .spec.schedulerName == "'"$LOCAL_SCHEDULER"'")] | length')
    [ "$live" = "$final" ] && [ "$bound" = "$final" ] && break
    i=$((i + 1))
    [ $i -lt $((K8S_TIMEOUT * 2)) ] || fail "pods: $live live, $bound bound by $LOCAL_SCHEDULER, want $final"
    sleep 0.5
done

# A restarted autoscaler adopts the Deployment: a steady rate it already
# covers leads to no action at all.
printf '0 50\n3 50\n' >"$tmp/steady.trace"
"$BIN/tetris-autoscaler" run --realtime --kubeconfig "$KUBECONFIG_FILE" --slo-ms 50 \
    --interval 1 --namespace "$ns" --function fn="$profile" --trace fn="$tmp/steady.trace" \
    >/dev/null 2>"$tmp/adopt.log" || fail "adopting run: $(cat "$tmp/adopt.log")"
grep -q "event=adopt function=fn deployment=fn-c1000-m100-b1-p1 replicas=$final" "$tmp/adopt.log" ||
    fail "not adopted: $(cat "$tmp/adopt.log")"
if grep -q 'event=\(create\|scale\)' "$tmp/adopt.log"; then
    fail "adopting run acted: $(cat "$tmp/adopt.log")"
fi
# The profile from a ConfigMap's profile.yaml gives the same decisions.
kc -n "$ns" create configmap tetris-profile-two-configs --from-file=profile.yaml="$profile" >/dev/null ||
    fail "cannot create the profile ConfigMap"
# shellcheck disable=SC2086
"$BIN/tetris-autoscaler" run --dry-run --kubeconfig "$KUBECONFIG_FILE" \
    $(echo $args | sed "s|fn=$profile|fn=configmap:$ns/tetris-profile-two-configs|") \
    >"$tmp/dry-cm" 2>"$tmp/dry-cm.log" || fail "dry run from ConfigMap: $(cat "$tmp/dry-cm.log")"
cmp -s "$tmp/dry" "$tmp/dry-cm" || fail "ConfigMap profile decides differently: $(cat "$tmp/dry-cm")"
rc=0
"$BIN/tetris-autoscaler" plan --kubeconfig "$KUBECONFIG_FILE" --rps 10 --slo-ms 50 \
    --profile "configmap:$ns/no-such-profile" >/dev/null 2>"$tmp/err" || rc=$?
[ $rc -eq 1 ] || fail "missing ConfigMap: exit $rc, want 1"
grep -q "configmap:$ns/no-such-profile" "$tmp/err" || fail "missing ConfigMap message: $(cat "$tmp/err")"
echo "ok: autoscaler on the cluster"
