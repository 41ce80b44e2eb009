#!/bin/sh
# test-prometheus.sh - `tetris-autoscaler run --prometheus`: a real
# Prometheus server scrapes the gateway's invocation counter (served by
# autoscaler-gateway-counter, since no OpenFaaS gateway runs here, growing at
# 250 rps for function fn and 0 for idle), and the autoscaler reads the rate
# through Prometheus's HTTP API and scales by it: 250*1.1 = 275 rps needs 3
# instances of 100 rps. A Prometheus that is not there gives a logged
# warning and no action, not a crash. Skipped when prometheus is not
# installed.
set -eu
. "$(dirname "$0")/../lib/common.sh"
here="$ROOT/tests/autoscaler"
command -v prometheus >/dev/null || skip "prometheus not installed"

"$BIN/autoscaler-gateway-counter" fn=250 idle=0 >"$WORK/gw.out" 2>"$WORK/gw.log" &
KILL_ON_EXIT="$KILL_ON_EXIT $!"
wait_until 10 "grep -q '^port=' '$WORK/gw.out'" || fail "gateway counter did not start"
gw_port=$(sed -n 's/^port=//p' "$WORK/gw.out")

cat >"$WORK/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
- job_name: gateway
  static_configs:
  - targets: ['127.0.0.1:$gw_port']
YAML
prometheus_start "$WORK/prometheus.yml"
url="$PROM_URL"

# rate() needs its window filled with samples: wait until the query settles
# near the counter's rate (a condition, not a timing: 60 s is a hang guard).
query='sum(rate(gateway_function_invocation_total{function_name="{function}"}[5s]))'
q=$(echo "$query" | sed 's/{function}/fn/')
wait_until 60 "curl -sf '$url/api/v1/query' --data-urlencode 'query=$q' |
    jq -e '.data.result[0].value[1] | tonumber | . > 240 and . < 260'" ||
    fail "prometheus's rate did not reach 250 rps"

"$BIN/tetris-autoscaler" run --slo-ms 50 --dry-run --interval 1 --duration 0.5 \
    --prometheus "$url" --query "$query" \
    --function fn="$here/two-configs.profile.yaml" --function idle="$here/two-configs.profile.yaml" \
    >"$WORK/actions" 2>"$WORK/log" || fail "run: $(cat "$WORK/log")"
got=$(jq -r '"\(.function) \(.action) \(.reason) \(.replicas.from) \(.replicas.to)"' "$WORK/actions")
want="fn create scale-out 0 3
idle create minimum 0 1"
[ "$got" = "$want" ] || fail "actions from prometheus rates:
$got
$(cat "$WORK/log")"
rate=$(jq -r 'select(.function == "fn") | .rate_rps' "$WORK/actions")
awk -v r="$rate" 'BEGIN { exit !(r > 200 && r < 300) }' || fail "rate $rate, expected about 250"

# A bad query: Prometheus answers 400; logged, no action, exit 0.
"$BIN/tetris-autoscaler" run --slo-ms 50 --dry-run --interval 1 --duration 0.5 \
    --prometheus "$url" --query 'sum(rate(' --function fn="$here/two-configs.profile.yaml" \
    >"$WORK/actions" 2>"$WORK/log" || fail "bad query: exit $?"
[ ! -s "$WORK/actions" ] || fail "bad query acted: $(cat "$WORK/actions")"
grep -q 'event=rate-unavailable function=fn' "$WORK/log" || fail "bad query not logged: $(cat "$WORK/log")"

# Nothing listening: the same.
"$BIN/tetris-autoscaler" run --slo-ms 50 --dry-run --interval 1 --duration 0.5 \
    --prometheus "http://127.0.0.1:$gw_port/nothing-here" --function fn="$here/two-configs.profile.yaml" \
    >"$WORK/actions" 2>"$WORK/log" || fail "no prometheus: exit $?"
[ ! -s "$WORK/actions" ] || fail "acted without a rate: $(cat "$WORK/actions")"
grep -q 'event=rate-unavailable' "$WORK/log" || fail "missing prometheus not logged"
echo "ok: prometheus"
