#!/bin/sh
# test-eval-validate.sh - the evaluation's prediction against the real
# control plane: the same traces at small scale give the same instance
# counts and placements on the local cluster as tetris-eval predicts.
#
#  - three API-only nodes of 8 CPUs / 32 GiB, each with a real
#    tetris-reclaimer serving its store: node 1's holds model vad, node 2's
#    model ocr, node 3's nothing;
#  - two functions, fa (vad) and fb (ocr), one config of 3 CPUs each (too
#    big for tetris-node-0, so only the API-only nodes can take them), with
#    traces that scale each out past its node's room and back in;
#  - tetris-eval --function/--rate-trace/--node predicts every decision and
#    the node of every new and released instance;
#  - tetris-autoscaler run --trace (same traces, profiles, mode, headroom,
#    interval; simulated time) acts on the cluster through a kube-scheduler
#    configured from deploy/scheduler/ and the extender; --step-file stops
#    it after each round until the Deployments' pods are bound (and the
#    released ones gone), and the test compares, per round, each function's
#    Deployment replicas and the nodes its pods are bound to with the
#    prediction, and fails with both.
# The nodes' stores stay as they start (nothing runs on API-only nodes):
# the traces are chosen so that no placement depends on a store a running
# instance would have filled. Rounds are at least a second apart, so pods of
# different rounds have different creation times, which the ReplicaSet
# controller's scale-in order uses.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
need_models
k8s_cluster_up
k8s_api_nodes 3
[ "$(kc get nodes -l tetris.io/node-kind=api-only -o name | wc -l)" = 3 ] ||
    skip "the prediction covers 3 API-only nodes; the cluster has more"
for i in 1 2 3; do
    [ "$(kc get node "tetris-api-node-$i" -o jsonpath='{.status.allocatable.cpu} {.status.allocatable.memory}')" = \
        "8 32Gi" ] || skip "the prediction's nodes have 8 CPUs and 32 GiB; tetris-api-node-$i differs"
done
kc get nodes -o json | jq -e '[.items[] | select(.metadata.labels["tetris.io/node-kind"] != "api-only")
    | .status.allocatable.cpu | if endswith("m") then rtrimstr("m") | tonumber / 1000 else tonumber end
    | select(. >= 3)] | length == 0' >/dev/null ||
    skip "a node other than the API-only ones could take a 3-CPU pod"
[ -z "$(kc get pods -A --field-selector spec.nodeName=tetris-api-node-1 -o name)$(kc get pods -A \
    --field-selector spec.nodeName=tetris-api-node-2 -o name)$(kc get pods -A \
    --field-selector spec.nodeName=tetris-api-node-3 -o name)" ] ||
    fail "pods of another test are bound to the API-only nodes; their allocation would skew placement"
k8s_namespace eval-validate
ns="$K8S_NS"
work="$WORK"

# 1. Stores and their daemons.
for i in 1 2 3; do mkdir "$work/s$i"; done
"$BIN/tetris-agent" load --direct --store "$work/s1" "$MODELS/silero_vad_v5.onnx" >/dev/null 2>>"$work/agent.log" ||
    fail "cannot fill store 1"
"$BIN/tetris-agent" load --direct --store "$work/s2" "$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx" \
    >/dev/null 2>>"$work/agent.log" || fail "cannot fill store 2"
for i in 1 2 3; do
    k8s_api_node_reclaimer "$i" "$work/s$i" "$work/reclaimer-$i.log" --interval 3600 --keep-alive 86400
done

# 2. Manifests, the extender and a scheduler that calls it.
k8s_manifest "$ns" vad "$MODELS/silero_vad_v5.onnx" "$work/vad.json"
k8s_manifest "$ns" ocr "$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx" "$work/ocr.json"
ext_port="$(free_port)"
k8s_extender "$ns" "$ext_port" "$work/extender.log" 2 3
sched="tetris-e2e-eval-${ns##*-}"
k8s_scheduler "$sched" "$ext_port" true "$work/scheduler.log"

# 3. Profiles (synthetic: 100 rps per instance in paper mode) and traces.
#   fa: 50 rps, 250 at 10 (3 instances: 2 on node 1, the third does not fit
#       there: node 3, less allocated than node 2), back to 50 at 80 (after
#       the cool-down and window: 3 -> 1, node 1's two pods first).
#   fb: 50 rps, 250 at 40 (node 2 takes one more, then node 3, the only
#       node with room), back to 50 at 120 (3 -> 1, node 2's two first).
#   Then fa rises again at 220: node 1 (its store holds vad) has room.
for m in vad ocr; do
    cat >"$work/$m.profile.yaml" <<YAML
tetris_profile: 1
model: $m
measured: false
configs:
- {c: 3, m_mib: 64, b: 1, p: 1, latency_ms: {mean: 10, p95: 10, p99: 10}, private_bytes: 33554432, shared_bytes: 2097152}
YAML
done
printf '0 50\n10 250\n80 50\n220 150\n260 150\n' >"$work/fa.trace"
printf '0 50\n40 250\n120 50\n260 50\n' >"$work/fb.trace"
common="--mode paper --headroom 0.1 --interval 10 --slo-ms 50"

# 4. The prediction.
# shellcheck disable=SC2086 # common is several options
"$BIN/tetris-eval" $common --function fa="$work/vad.profile.yaml" --rate-trace fa="$work/fa.trace" \
    --function fb="$work/ocr.profile.yaml" --rate-trace fb="$work/fb.trace" \
    --node tetris-api-node-1=8,32768,vad --node tetris-api-node-2=8,32768,ocr \
    --node tetris-api-node-3=8,32768 --decisions "$work/predicted.tsv" 2>"$work/eval.log" ||
    fail "tetris-eval: $(cat "$work/eval.log")"
spills=$(awk -F'\t' 'NR > 1 && $11 ~ /tetris-api-node-3/' "$work/predicted.tsv" | wc -l)
scale_ins=$(awk -F'\t' 'NR > 1 && $12 != "-"' "$work/predicted.tsv" | wc -l)
if [ "$spills" -lt 2 ] || [ "$scale_ins" -lt 2 ]; then
    fail "the traces no longer spill to node 3 and scale in: $(cat "$work/predicted.tsv")"
fi

# expected T: "function node pods" lines after the round at time T.
expected() {
    awk -F'\t' -v t="$1" 'NR > 1 && $1 + 0 <= t + 0 {
            n = split($11, p, ","); for (i = 1; i <= n; i++) if (p[i] != "-") c[$5 " " p[i]]++
            n = split($12, r, ","); for (i = 1; i <= n; i++) if (r[i] != "-") c[$5 " " r[i]]--
        } END { for (k in c) if (c[k] > 0) print k, c[k] }' "$work/predicted.tsv" | sort
}
# replicas_expected T FUNCTION
replicas_expected() {
    awk -F'\t' -v t="$1" -v f="$2" 'NR > 1 && $1 + 0 <= t + 0 && $5 == f { r = $10 }
        END { print r + 0 }' "$work/predicted.tsv"
}
# actual: the same lines from the cluster's live pods.
actual() {
    kc -n "$ns" get pods -o json | jq -r '.items[] | select(.metadata.deletionTimestamp == null)
        | "\(.metadata.labels.faas_function) \(.spec.nodeName // "unbound")"' | sort | uniq -c |
        awk '{ print $2, $3, $1 }'
}
replicas() { # FUNCTION
    kc -n "$ns" get deployments -l faas_function="$1" -o jsonpath='{.items[*].spec.replicas}'
}
# settled: every Deployment has its replicas as pods, all bound, none going.
settled() {
    kc -n "$ns" get deployments,pods -o json | jq -e '. as $all
        | ([$all.items[] | select(.kind == "Deployment") | {key: .metadata.name, value: .spec.replicas}]
            | from_entries) as $want
        | [$all.items[] | select(.kind == "Pod")] as $pods
        | ($pods | all(.metadata.deletionTimestamp == null and .spec.nodeName != null))
          and ($want | to_entries | all(.key as $d | .value ==
                ([$pods[] | select(.metadata.ownerReferences[0].name | startswith($d + "-"))] | length)))' \
        >/dev/null 2>&1
}

# 5. The autoscaler, one round at a time.
step="$work/step"
# shellcheck disable=SC2086
"$BIN/tetris-autoscaler" run $common --sharing --kubeconfig "$KUBECONFIG_FILE" --namespace "$ns" \
    --scheduler-name "$sched" --image tetris-test-tools:latest --image-pull-policy Never \
    --function fa="$work/vad.profile.yaml" --trace fa="$work/fa.trace" \
    --function fb="$work/ocr.profile.yaml" --trace fb="$work/fb.trace" \
    --step-file "$step" >/dev/null 2>"$work/autoscaler.log" &
as_pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $as_pid"
rounds=0
while :; do
    wait_until 60 "[ -f '$step' ] || ! kill -0 $as_pid" || fail "the autoscaler hangs: $(tail -3 "$work/autoscaler.log")"
    [ -f "$step" ] || break
    t="$(cat "$step")"
    i=0
    until settled; do
        i=$((i + 1))
        [ $i -lt $((K8S_TIMEOUT * 2)) ] || {
            kc -n "$ns" get deployments,pods -o wide >&2
            fail "round t=$t: the cluster did not settle"
        }
        sleep 0.5
    done
    want="$(expected "$t")"
    got="$(actual)"
    for f in fa fb; do
        r="$(replicas "$f")"
        [ "${r:-0}" = "$(replicas_expected "$t" "$f")" ] ||
            fail "round t=$t: $f has ${r:-no} replicas, the evaluation predicts $(replicas_expected "$t" "$f")"
    done
    [ "$got" = "$want" ] || fail "round t=$t: placements (function node pods) differ
cluster:
$got
evaluation:
$want"
    rounds=$((rounds + 1))
    sleep 1 # the next round's pods are created in a later second
    rm "$step"
done
wait "$as_pid" || fail "the autoscaler failed: $(tail -5 "$work/autoscaler.log")"
[ "$rounds" = 27 ] || fail "$rounds rounds, want 27 (0..260 every 10 s)"
echo "eval validate: ok ($rounds rounds, $(($(wc -l <"$work/predicted.tsv") - 1)) decisions as predicted)" >&2
