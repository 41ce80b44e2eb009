#!/bin/sh
# test-trace-dry-run.sh - `tetris-autoscaler run` in local mode: a trace with
# a rising and falling rate drives the dry-run actions, which must follow DTS
# (scale out by the residual at once, scale in only after the cool-down and
# against the window's peak), not oscillate on a swinging rate, and describe
# Deployments the cluster can run (labels, env, resources, store volume) and
# whose pods the extender and tetris-node-pins know by their model's label.
set -eu
. "$(dirname "$0")/../lib/common.sh"
here="$ROOT/tests/autoscaler"
bin="$BIN/tetris-autoscaler"

run() {
    "$bin" run --slo-ms 50 --dry-run --interval 10 "$@" 2>"$WORK/log" >"$WORK/actions" ||
        fail "run $*: exit $? $(cat "$WORK/log")"
}
steps() {
    jq -r '"\(.time_s) \(.action) \(.reason) \(.deployment) \(.replicas.from) \(.replicas.to)"' "$WORK/actions"
}

# Profile A serves 100 rps per instance (DTS's pick at this SLO); headroom
# 10%, scale-in headroom 30%, cool-down and window 60 s (the defaults).
#   t=0   50 rps  -> 55 needed: 1 instance
#   t=20  250     -> 275 needed, 100 there: 2 more
#   t=40  450     -> 495 needed, 300 there: 2 more (500)
#   t=60..70 430-450: 473-495 <= 500, nothing; t=80 falls to 100 but the
#   window still holds 450 until t=130: then 5 -> 2 (200 >= 100*1.3)
#   t=220 0 rps; the window holds 100 until t=270: 2 -> 1 (the minimum)
run --function fn="$here/two-configs.profile.yaml" --trace fn="$here/rise-and-fall.trace"
got=$(steps)
want="0 create scale-out fn-c1000-m100-b1-p1 0 1
20 scale scale-out fn-c1000-m100-b1-p1 1 3
40 scale scale-out fn-c1000-m100-b1-p1 3 5
130 scale scale-in fn-c1000-m100-b1-p1 5 2
270 scale scale-in fn-c1000-m100-b1-p1 2 1"
[ "$got" = "$want" ] || fail "rise and fall:
$got
want:
$want"
grep -q "event=state function=fn time_s=40.000 rate_rps=450.000 capacity_rps=500.000 instances=5 memory_mib=500.0" "$WORK/log" ||
    fail "state log: $(cat "$WORK/log")"

# The Deployment created at t=0.
m=$(head -1 "$WORK/actions" | jq -c .manifest)
check() {
    v=$(echo "$m" | jq -r "$1")
    [ "$v" = "$2" ] || fail "manifest $1 = $v, want $2"
}
check .kind Deployment
check .metadata.name fn-c1000-m100-b1-p1
check .metadata.namespace openfaas-fn
check '.metadata.labels.faas_function' fn
check .spec.replicas 1
check '.spec.template.metadata.labels.faas_function' fn
check '.spec.selector.matchLabels["tetris.io/config"]' c1000-m100-b1-p1
# The pods name the profile's model, as its manifest ConfigMap is labelled.
check '.spec.template.metadata.labels["tetris.io/model"]' two-configs
check '.spec.template.metadata.annotations["prometheus.io/scrape"]' true
check '.spec.template.spec.containers[0].readinessProbe.httpGet.path' /_/health
check .spec.template.spec.schedulerName tetris-scheduler
check '.spec.template.spec.containers[0].env | map("\(.name)=\(.value)") | join(",")' \
    "TETRIS_BATCH=1,TETRIS_CONCURRENCY=1,TETRIS_THREADS=1,TETRIS_MODEL=/models/two-configs,TETRIS_STORE=/dev/shm/tetris,TETRIS_PORT=8080"
check '.spec.template.spec.containers[0].resources.requests.cpu' 1000m
check '.spec.template.spec.containers[0].resources.limits.memory' 100Mi
check '.spec.template.spec.containers[0].volumeMounts[0].readOnly' true
check '.spec.template.spec.containers[0].volumeMounts[0].mountPath' /dev/shm/tetris
check '.spec.template.spec.volumes[0].hostPath.path' /dev/shm/tetris/public

# With sharing the pod asks for its private memory only (40 MiB, not 100).
run --function fn="$here/two-configs.profile.yaml" --trace fn="$here/rise-and-fall.trace" --sharing
[ "$(head -1 "$WORK/actions" | jq -r '.manifest.spec.template.spec.containers[0].resources.requests.memory')" = 40Mi ] ||
    fail "sharing memory request: $(head -1 "$WORK/actions")"

# Sharing-aware scale-out: the first instance pays the tensors and is X; once
# they are resident the next ones are the small Y (see test-plan.sh).
printf '0 150\n60 150\n' >"$WORK/steady.trace"
"$bin" run --slo-ms 100 --dry-run --interval 10 --headroom 0 --sharing \
    --function sh="$here/sharing.profile.yaml" --trace sh="$WORK/steady.trace" 2>"$WORK/log" >"$WORK/actions"
got=$(steps)
want="0 create scale-out sh-c1000-m400-b1-p4 0 1
0 create scale-out sh-c1000-m320-b1-p1 0 1"
[ "$got" = "$want" ] || fail "sharing-aware scale-out:
$got"

# A rate swinging between 300 and 420 every 10 s: with hysteresis the
# autoscaler scales out once (to cover 420*1.1) and then holds still.
run --function fn="$here/two-configs.profile.yaml" --trace fn="$here/oscillating.trace"
[ "$(steps)" = "0 create scale-out fn-c1000-m100-b1-p1 0 4
10 scale scale-out fn-c1000-m100-b1-p1 4 5" ] || fail "oscillating, hysteresis: $(steps)"
# Without it (no cool-down, no window, equal headrooms) it flaps every tick.
run --function fn="$here/two-configs.profile.yaml" --trace fn="$here/oscillating.trace" \
    --cooldown 0 --window 0 --scale-in-headroom 0.1
n=$(wc -l <"$WORK/actions")
[ "$n" -ge 20 ] || fail "without hysteresis expected flapping, got $n actions"

# Bad input: clear errors, exit 1 (2 bad options, 3 an SLO no config meets).
expect() {
    want_rc=$1; shift
    rc=0
    "$bin" run --dry-run "$@" >/dev/null 2>"$WORK/err" || rc=$?
    [ $rc -eq "$want_rc" ] || fail "$*: exit $rc, want $want_rc: $(cat "$WORK/err")"
    [ -s "$WORK/err" ] || fail "$*: no message"
}
printf '0 10\n5 x\n' >"$WORK/bad.trace"
expect 1 --slo-ms 50 --function fn="$here/two-configs.profile.yaml" --trace fn="$WORK/bad.trace"
grep -q "bad.trace:2: expected two numbers" "$WORK/err" || fail "bad trace: $(cat "$WORK/err")"
printf '10 1\n5 1\n' >"$WORK/backwards.trace"
expect 1 --slo-ms 50 --function fn="$here/two-configs.profile.yaml" --trace fn="$WORK/backwards.trace"
grep -q "not after the previous" "$WORK/err" || fail "backwards trace: $(cat "$WORK/err")"
expect 2 --slo-ms 50 --function fn="$here/two-configs.profile.yaml"
expect 2 --slo-ms 50 --trace fn="$here/rise-and-fall.trace"
expect 2 --slo-ms 50 --function Bad_Name="$here/two-configs.profile.yaml" --trace Bad_Name="$here/rise-and-fall.trace"
expect 2 --slo-ms 50 --function fn="$here/two-configs.profile.yaml" --trace fn="$here/rise-and-fall.trace" --headroom 0.5
sed -n '1,/^configs:/p' "$here/two-configs.profile.yaml" >"$WORK/dup.yaml"
grep '^- ' "$here/two-configs.profile.yaml" | head -1 >>"$WORK/dup.yaml"
grep '^- ' "$here/two-configs.profile.yaml" | head -1 >>"$WORK/dup.yaml"
expect 1 --slo-ms 50 --function fn="$WORK/dup.yaml" --trace fn="$here/rise-and-fall.trace"
grep -q "configs 0 and 1 are both c1000-m100-b1-p1" "$WORK/err" || fail "duplicate configs: $(cat "$WORK/err")"
# A model name that cannot be a label value cannot label the pods.
sed 's/^model: .*/model: "not a label"/' "$here/two-configs.profile.yaml" >"$WORK/badmodel.yaml"
expect 1 --slo-ms 50 --function fn="$WORK/badmodel.yaml" --trace fn="$here/rise-and-fall.trace"
grep -q "model name 'not a label' is not a valid label value" "$WORK/err" || fail "bad model name: $(cat "$WORK/err")"
expect 3 --slo-ms 5 --function fn="$here/two-configs.profile.yaml" --trace fn="$here/rise-and-fall.trace"
grep -q "no config meets the SLO" "$WORK/err" || fail "infeasible: $(cat "$WORK/err")"
echo "ok: trace dry-run"
