#!/bin/sh
# test-gateway-trust.sh - the autoscaler trusts only the gateway. A real
# Prometheus scrapes the gateway's invocation counter (1 rps for fn,
# served by autoscaler-gateway-counter as job openfaas-gateway) and a
# second target that lies: the same metric name at 11,150 rps for fn, as a
# function pod with scrape annotations can export (job kubernetes-pods).
#   - the default query counts the gateway's job only: fn gets 1 instance
#     (before, it summed every target and asked for over a hundred);
#   - when a lying series does get in (a job regex that lets it in), the
#     rate is clamped to twice what the instances could serve
#     (event=rate-clamped) and the instances to --max-instances;
#   - bad --gateway-job values and --min-instances above --max-instances
#     are usage errors.
set -eu
. "$(dirname "$0")/../lib/common.sh"
here="$ROOT/tests/autoscaler"
command -v prometheus >/dev/null || skip "prometheus not installed"
profile="$here/two-configs.profile.yaml"

# start_counter NAME=RPS OUT: a counter, its port in COUNTER_PORT (not in a
# command substitution: its subshell would lose KILL_ON_EXIT, and the
# counter would outlive the test).
start_counter() {
    "$BIN/autoscaler-gateway-counter" "$1" >"$WORK/$2.out" 2>"$WORK/$2.log" &
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    wait_until 10 "grep -q '^port=' '$WORK/$2.out'" || fail "counter $2 did not start"
    COUNTER_PORT=$(sed -n 's/^port=//p' "$WORK/$2.out")
}
start_counter fn=1 gateway
gw_port=$COUNTER_PORT
start_counter fn=11150 liar
liar_port=$COUNTER_PORT
cat >"$WORK/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
- job_name: openfaas-gateway
  static_configs:
  - targets: ['127.0.0.1:$gw_port']
- job_name: kubernetes-pods
  static_configs:
  - targets: ['127.0.0.1:$liar_port']
YAML
prometheus_start "$WORK/prometheus.yml"
prom() {
    curl -sf "$PROM_URL/api/v1/query" --data-urlencode "query=$1" |
        jq -r '.data.result[0].value[1] // "0"'
}
# Both series are in Prometheus, and the lie dwarfs the truth.
wait_until 60 "[ \"\$(prom 'sum(rate(gateway_function_invocation_total{function_name=\"fn\"}[1m]))' |
    awk '{ print (\$1 > 1000) }')\" = 1 ]" || fail "prometheus never saw the lying series"
wait_until 60 "[ \"\$(prom 'sum(rate(gateway_function_invocation_total{job=\"openfaas-gateway\"}[1m]))' |
    awk '{ print (\$1 > 0.2 && \$1 < 3) }')\" = 1 ]" || fail "prometheus never saw the gateway's 1 rps"

run() { # ARGS...: one decision round in a dry run; actions in $WORK/actions
    "$BIN/tetris-autoscaler" run --slo-ms 50 --dry-run --interval 1 --duration 0.5 \
        --prometheus "$PROM_URL" --function fn="$profile" "$@" >"$WORK/actions" 2>"$WORK/log" ||
        fail "run $*: exit $? $(cat "$WORK/log")"
}
actions() { jq -r '"\(.action) \(.reason) \(.replicas.from) \(.replicas.to)"' "$WORK/actions"; }

# ---- the default query: the gateway's series only ----
run
[ "$(actions)" = "create scale-out 0 1" ] ||
    fail "default query: $(actions) (rate $(jq -r .rate_rps "$WORK/actions")), want one instance for 1 rps"
rate=$(jq -r .rate_rps "$WORK/actions")
awk -v r="$rate" 'BEGIN { exit !(r > 0.2 && r < 3) }' || fail "rate $rate, want about 1 (the gateway's)"
grep -q 'event=rate-clamped' "$WORK/log" && fail "an honest rate was clamped"
note "default query: the lying target is ignored, rate $rate rps, 1 instance"

# ---- a lie that gets in is clamped, and capped ----
# No instances yet: the ceiling is twice the largest config's 200 rps.
run --gateway-job 'openfaas-gateway|kubernetes-pods'
grep -q 'event=rate-clamped function=fn rate_rps=[0-9]\{4,\}\.[0-9]* ceiling_rps=400\.000 instances=0' "$WORK/log" ||
    fail "the lying rate was not clamped: $(cat "$WORK/log")"
[ "$(jq -r .rate_rps "$WORK/actions")" = 400 ] || fail "decided on $(jq -r .rate_rps "$WORK/actions") rps, want 400"
[ "$(jq -s 'map(.replicas.to) | add' "$WORK/actions")" -le 5 ] ||
    fail "clamped rate still asks for $(jq -s 'map(.replicas.to) | add' "$WORK/actions") instances"
run --gateway-job 'openfaas-gateway|kubernetes-pods' --max-instances 3
[ "$(actions)" = "create max-instances 0 3" ] || fail "--max-instances 3: $(actions)"
note "a lying series that gets in: rate clamped to 400 rps, instances capped at --max-instances"

# ---- usage ----
for bad in '--gateway-job a"b' '--gateway-instance=' '--min-instances 5 --max-instances 2' '--max-instances 0'; do
    # shellcheck disable=SC2086 # the words are the options
    st=$(status "$BIN/tetris-autoscaler" run --slo-ms 50 --dry-run --prometheus "$PROM_URL" \
        --function fn="$profile" $bad)
    [ "$st" = 2 ] || fail "$bad: exit $st, want 2"
done
echo "ok: the autoscaler trusts only the gateway"
