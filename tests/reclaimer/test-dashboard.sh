#!/bin/sh
# test-dashboard.sh - the chart's Grafana dashboard against a real
# Prometheus, and the start metrics it draws on. No Grafana server runs
# here, so every panel query (each "expr" of the dashboard JSON, as
# `helm template` renders it with the dashboard on) goes to Prometheus's
# HTTP API after it has scraped a real node daemon and two real
# tetris-function instances of a real model (the first a cold start, a
# store miss; the second warm, a hit) serving requests: a query that
# errors, or returns no series, fails the test. Also: promtool takes both
# expositions; the daemon counts one miss and one hit for the model, each
# function labels its start as the daemon answered it; the dashboard is
# off by default.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$ROOT/scripts/lib/serving.sh"
command -v prometheus >/dev/null && command -v promtool >/dev/null ||
    fail "prometheus/promtool not installed (scripts/deps.sh installs them)"
need_models
HELM="$("$ROOT/scripts/helm.sh")" || fail "cannot install helm (scripts/helm.sh)"
MODEL="$MODELS/ch_PP-OCRv4_det_infer.onnx"

# The dashboard as the chart ships it (the SLO filled in from the values).
"$HELM" template t "$ROOT/charts/tetris" --show-only templates/grafana-dashboard.yaml \
    --set metrics.grafanaDashboard.enabled=true --set autoscaler.sloMs=250 >"$WORK/cm.yaml" ||
    fail "helm template with the dashboard on"
grep -q '^    grafana_dashboard: "1"$' "$WORK/cm.yaml" || fail "no grafana_dashboard label"
awk 'on { sub(/^    /, ""); print } /^  tetris.json: \|-$/ { on = 1 }' "$WORK/cm.yaml" >"$WORK/dashboard.json"
jq -e '.panels | length > 0' "$WORK/dashboard.json" >/dev/null || fail "the dashboard is not JSON with panels"
jq -r '.. | objects | .expr? // empty' "$WORK/dashboard.json" >"$WORK/exprs"
[ "$(wc -l <"$WORK/exprs")" -ge 8 ] || fail "too few queries: $(cat "$WORK/exprs")"
grep -qF 'vector(0.25)' "$WORK/exprs" || fail "the SLO (250 ms) is not in the dashboard"
if "$HELM" template t "$ROOT/charts/tetris" 2>/dev/null | grep -q grafana_dashboard; then
    fail "the dashboard renders with the default values"
fi

start_daemon --interval 1s
"$BIN/tetris-agent" index "$MODEL" -o "$WORK/det.manifest.json" 2>/dev/null || fail "index"
# serve_fn NAME: a tetris-function of MODEL on the daemon's store; sets
# NAME_PORT.
serve_fn() {
    serve_start "$WORK/$1" "$BIN/tetris-function" --store "$STORE" \
        --manifest "$WORK/det.manifest.json" --listen 127.0.0.1:0 --model "$MODEL" ||
        fail "$1: $SERVE_ERROR"
    KILL_ON_EXIT="$KILL_ON_EXIT $SERVE_LAUNCHER"
    eval "${1}_PORT=$SERVE_PORT"
}
serve_fn cold
serve_fn warm
grep -q 'event=ready .* store=miss ' "$WORK/cold.log" || fail "first start not a miss: $(grep event=ready "$WORK/cold.log")"
grep -q 'event=ready .* store=hit ' "$WORK/warm.log" || fail "second start not a hit: $(grep event=ready "$WORK/warm.log")"
grep -q 'event=start-steps .* register_ms=' "$WORK/warm.log" || fail "no start-steps line"

ask() { curl -sf --max-time 30 -d '{"seed": 1}' "http://127.0.0.1:$1/" >/dev/null; }
ask "$cold_PORT" && ask "$warm_PORT" || fail "inference request failed"
for f in cold warm; do
    eval "port=\$${f}_PORT"
    curl -sf "http://127.0.0.1:$port/metrics" >"$WORK/$f.prom" || fail "$f: /metrics"
    promtool check metrics <"$WORK/$f.prom" || fail "promtool rejects $f's metrics"
done
grep -q '^tetris_function_start_seconds_count{start="cold",store="miss"} 1$' "$WORK/cold.prom" ||
    fail "cold start not counted: $(grep tetris_function_start_seconds_count "$WORK/cold.prom")"
grep -q '^tetris_function_first_answer_seconds_count{start="warm",store="hit"} 1$' "$WORK/warm.prom" ||
    fail "warm first answer not counted: $(grep first_answer_seconds_count "$WORK/warm.prom")"
http_get /metrics >"$WORK/daemon.prom"
promtool check metrics <"$WORK/daemon.prom" || fail "promtool rejects the daemon's metrics"
for s in miss hit; do
    grep -q "^tetris_model_starts_total{model=\"ch_PP-OCRv4_det_infer.onnx\",store=\"$s\"} 1\$" "$WORK/daemon.prom" ||
        fail "daemon: no $s start: $(grep '^tetris_model_starts_total' "$WORK/daemon.prom")"
done
note "starts: cold/miss and warm/hit on both sides; promtool takes all three expositions"

cat >"$WORK/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tetris-reclaimer
    static_configs:
      - targets: ['127.0.0.1:$RECLAIMER_PORT']
  - job_name: tetris-function
    static_configs:
      - targets: ['127.0.0.1:$cold_PORT', '127.0.0.1:$warm_PORT']
YAML
prometheus_start "$WORK/prometheus.yml"
up() { curl -sS --max-time 10 -G "$PROM_URL/api/v1/query" --data-urlencode 'query=sum(up)' | jq -r '.data.result[0].value[1] // 0'; }
wait_until 60 '[ "$(up)" = 3 ]' || fail "Prometheus does not see the three targets up"
# Requests across several scrapes, so rate() has samples to work on.
end=$(( $(date +%s) + 6 ))
while [ "$(date +%s)" -lt "$end" ]; do ask "$cold_PORT"; ask "$warm_PORT"; sleep 0.2; done

n=0
while IFS= read -r expr; do
    n=$((n + 1))
    curl -sS --max-time 10 -G "$PROM_URL/api/v1/query" --data-urlencode "query=$expr" >"$WORK/q.json" ||
        fail "query $n did not answer: $expr"
    [ "$(jq -r .status "$WORK/q.json")" = success ] ||
        fail "query $n failed: $expr: $(jq -r .error "$WORK/q.json")"
    [ "$(jq '.data.result | length' "$WORK/q.json")" -gt 0 ] ||
        fail "query $n returned no series: $expr"
done <"$WORK/exprs"
note "all $n dashboard queries answer with series from a real daemon and functions"

kill -TERM "$PROM_PID"
wait "$PROM_PID" 2>/dev/null
stop_daemon
echo "ok $PROG"
