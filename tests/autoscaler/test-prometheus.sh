#!/bin/sh
# test-prometheus.sh - `tetris-autoscaler run --prometheus`: a real
# Prometheus server scrapes the gateway's invocation counter (served by
# autoscaler-gateway-counter, since no OpenFaaS gateway runs here, growing at
# 250 rps for function fn and 0 for idle), and the autoscaler reads the rate
# through Prometheus's HTTP API and scales by it: 250*1.1 = 275 rps needs 3
# instances of 100 rps. A Prometheus that is not there gives a logged
# warning and no action, not a crash. Skips when prometheus is not installed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${TETRIS_BIN:?}
command -v prometheus >/dev/null || { echo "SKIP: prometheus not installed" >&2; exit 0; }
tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/prom.log" ] && tail -5 "$tmp/prom.log" >&2; exit 1; }

"$bin/autoscaler-gateway-counter" fn=250 idle=0 >"$tmp/gw.out" 2>"$tmp/gw.log" &
pids="$pids $!"
i=0
until grep -q '^port=' "$tmp/gw.out"; do
    i=$((i + 1)); [ $i -lt 100 ] || fail "gateway counter did not start: $(cat "$tmp/gw.log")"
    sleep 0.1
done
gw_port=$(sed -n 's/^port=//p' "$tmp/gw.out")

cat >"$tmp/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
- job_name: gateway
  static_configs:
  - targets: ['127.0.0.1:$gw_port']
YAML
# A free port for Prometheus: try a few random ones.
started=0
for attempt in 1 2 3 4 5; do
    prom_port=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 40000 ))
    prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
        --web.listen-address="127.0.0.1:$prom_port" >"$tmp/prom.log" 2>&1 &
    prom_pid=$!
    i=0
    while [ $i -lt 100 ] && kill -0 $prom_pid 2>/dev/null; do
        if curl -sf "http://127.0.0.1:$prom_port/-/ready" >/dev/null 2>&1; then started=1; break; fi
        i=$((i + 1)); sleep 0.2
    done
    if [ $started = 1 ]; then pids="$pids $prom_pid"; break; fi
    kill $prom_pid 2>/dev/null || true; wait $prom_pid 2>/dev/null || true
done
[ $started = 1 ] || fail "prometheus did not start"
url="http://127.0.0.1:$prom_port"

# rate() needs its window filled with samples: wait until the query settles
# near the counter's rate (a condition, not a timing: 60 s is a hang guard).
query='sum(rate(gateway_function_invocation_total{function_name="{function}"}[5s]))'
q=$(echo "$query" | sed 's/{function}/fn/')
i=0
until curl -sf "$url/api/v1/query" --data-urlencode "query=$q" |
    jq -e '.data.result[0].value[1] | tonumber | . > 240 and . < 260' >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 120 ] || fail "prometheus's rate did not reach 250 rps in 60 s"
    sleep 0.5
done

"$bin/tetris-autoscaler" run --slo-ms 50 --dry-run --interval 1 --duration 0.5 \
    --prometheus "$url" --query "$query" \
    --function fn="$here/two-configs.profile.yaml" --function idle="$here/two-configs.profile.yaml" \
    >"$tmp/actions" 2>"$tmp/log" || fail "run: $(cat "$tmp/log")"
got=$(jq -r '"\(.function) \(.action) \(.reason) \(.replicas.from) \(.replicas.to)"' "$tmp/actions")
want="fn create scale-out 0 3
idle create minimum 0 1"
[ "$got" = "$want" ] || fail "actions from prometheus rates:
$got
$(cat "$tmp/log")"
rate=$(jq -r 'select(.function == "fn") | .rate_rps' "$tmp/actions")
awk -v r="$rate" 'BEGIN { exit !(r > 200 && r < 300) }' || fail "rate $rate, expected about 250"

# A bad query: Prometheus answers 400; logged, no action, exit 0.
"$bin/tetris-autoscaler" run --slo-ms 50 --dry-run --interval 1 --duration 0.5 \
    --prometheus "$url" --query 'sum(rate(' --function fn="$here/two-configs.profile.yaml" \
    >"$tmp/actions" 2>"$tmp/log" || fail "bad query: exit $?"
[ ! -s "$tmp/actions" ] || fail "bad query acted: $(cat "$tmp/actions")"
grep -q 'event=rate-unavailable function=fn' "$tmp/log" || fail "bad query not logged: $(cat "$tmp/log")"

# Nothing listening: the same.
"$bin/tetris-autoscaler" run --slo-ms 50 --dry-run --interval 1 --duration 0.5 \
    --prometheus "http://127.0.0.1:$gw_port/nothing-here" --function fn="$here/two-configs.profile.yaml" \
    >"$tmp/actions" 2>"$tmp/log" || fail "no prometheus: exit $?"
[ ! -s "$tmp/actions" ] || fail "acted without a rate: $(cat "$tmp/actions")"
grep -q 'event=rate-unavailable' "$tmp/log" || fail "missing prometheus not logged"
echo "ok: prometheus"
