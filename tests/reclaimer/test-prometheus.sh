#!/bin/sh
# test-prometheus.sh - tetris-reclaimer's /metrics as Prometheus sees it:
# `promtool check metrics` passes on the daemon's output (idle and busy),
# and a real Prometheus server (Debian's), configured here to scrape the
# daemon every second on loopback, reports through its HTTP API
# (/api/v1/query) exactly the saved bytes this test computes from the
# models it loads: 3 instances of A and 1 of B save 2 copies of A.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
command -v prometheus >/dev/null && command -v promtool >/dev/null ||
    fail "prometheus/promtool not installed (scripts/deps.sh installs them)"

start_daemon --interval 200ms --scrub-rate 1Mi
http_get /metrics >"$WORK/idle.prom"
promtool check metrics <"$WORK/idle.prom" || fail "promtool rejects idle metrics"

synth "$WORK/a.safetensors" 6 65536 11
synth "$WORK/b.safetensors" 3 32768 12
hold "$WORK/a.safetensors" "$WORK/a1.json"
hold "$WORK/a.safetensors" "$WORK/a2.json"
hold "$WORK/a.safetensors" "$WORK/a3.json"
# B's file name carries a quote and a backslash into a label value.
WEIRD="$WORK/b \"q\\uo\".safetensors"
cp "$WORK/b.safetensors" "$WEIRD"
hold "$WEIRD" "$WORK/b1.json"
printf '{"op":"report_fallback","label":"b","reason":"store full"}' |
    "$PROBE" send --socket "$STORE/public/ingest.sock" | grep -q '"ok":true' || fail "report_fallback"
A_BYTES=$((6 * 65536))
WANT_SAVED=$((2 * A_BYTES))
wait_until 60 '[ "$(metric tetris_store_holders)" = 4 ]' || fail "holders not seen"
http_get /metrics >"$WORK/busy.prom"
promtool check metrics <"$WORK/busy.prom" || fail "promtool rejects busy metrics"
[ "$(metric tetris_store_saved_bytes)" = $WANT_SAVED ] ||
    fail "daemon reports saved $(metric tetris_store_saved_bytes), want $WANT_SAVED"
grep -q "^tetris_model_holders{model=\"$WORK/a.safetensors\"} 3\$" "$WORK/busy.prom" ||
    fail "per-model holders missing: $(grep tetris_model_holders "$WORK/busy.prom")"
grep -q "^tetris_model_logical_bytes{model=\"$WORK/a.safetensors\"} $((3 * A_BYTES))\$" "$WORK/busy.prom" ||
    fail "per-model logical bytes missing"
note "promtool check metrics: ok; daemon saved bytes = $WANT_SAVED; per-model gauges"

# A Prometheus server on a free loopback port.
cat >"$WORK/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tetris-reclaimer
    static_configs:
      - targets: ['127.0.0.1:$RECLAIMER_PORT']
YAML
prometheus_start "$WORK/prometheus.yml"

query() {
    curl -sS --max-time 10 -G "$PROM_URL/api/v1/query" --data-urlencode "query=$1" |
        jq -r '.data.result[0].value[1] // empty'
}
wait_until 120 '[ "$(query tetris_store_saved_bytes)" = $WANT_SAVED ]' ||
    fail "Prometheus saw saved bytes '$(query tetris_store_saved_bytes)', want $WANT_SAVED"
[ "$(query 'up{job="tetris-reclaimer"}')" = 1 ] || fail "target not up"
[ "$(query tetris_store_logical_bytes)" = $((3 * A_BYTES + 3 * 32768)) ] || fail "logical bytes via Prometheus"
[ "$(query tetris_agent_fallbacks_total)" = 1 ] || fail "fallback report not counted"
[ "$(query 'tetris_ingest_duration_seconds_count')" = 4 ] || fail "ingest histogram count"
[ "$(query 'sum(tetris_model_holders)')" = 4 ] || fail "per-model holders via Prometheus"
note "Prometheus /api/v1/query: tetris_store_saved_bytes = $WANT_SAVED (computed), up = 1"

# A model label longer than the daemon keeps (127 bytes), of 3-byte code
# points, cut so that the limit falls inside one: the label keeps whole
# code points, and promtool and Prometheus still take the scrape.
pad=$(( (127 - ${#WORK} - 1 - 1) % 3 ))
EURO=$(printf '\342\202\254')
LONG="$WORK/$(head -c "$pad" /dev/zero | tr '\0' x)$(for _ in $(seq 60); do printf %s "$EURO"; done).safetensors"
cp "$WORK/b.safetensors" "$LONG"
hold "$LONG" "$WORK/b2.json"
wait_until 60 '[ "$(metric tetris_store_holders)" = 5 ]' || fail "fifth holder not seen"
http_get /metrics >"$WORK/long.prom"
promtool check metrics <"$WORK/long.prom" || fail "promtool rejects a cut multi-byte label"
label=$(sed -n 's/^tetris_model_holders{model="\([^"]*\)"} 1$/\1/p' "$WORK/long.prom" | grep -F "$EURO")
[ "$(printf '%s' "$label" | wc -c)" = 126 ] || fail "cut label is not 126 bytes: '$label'"
printf '%s' "$label" | iconv -f UTF-8 -t UTF-8 >/dev/null || fail "cut label is not UTF-8: '$label'"
wait_until 60 '[ "$(query "sum(tetris_model_holders)")" = 5 ]' ||
    fail "Prometheus did not take the scrape with the cut label"
note "a multi-byte label cut to fit stays UTF-8; promtool and Prometheus take it"

kill -TERM "$PROM_PID"
wait "$PROM_PID" 2>/dev/null
stop_daemon
echo "ok $PROG"
