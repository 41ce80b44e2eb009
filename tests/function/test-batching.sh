#!/bin/sh
# Batching batches: with b=4, concurrent requests run together (the batch
# size histogram in /metrics shows batches of more than one request, and
# answers say so), each request still gets exactly the output it gets
# alone (one ONNX Runtime run over concatenated inputs), and a model that
# cannot be concatenated batches sequentially. /metrics passes promtool.
set -eu
. "$(dirname "$0")/../lib/function.sh"

burst() { # URL FIRST_SEED COUNT: COUNT concurrent requests, answers in $WORK/r.SEED
    s=$2
    pids=""
    while [ $s -lt $(($2 + $3)) ]; do
        curl -s -o "$WORK/r.$s" -w '%{http_code}' --data-binary "{\"seed\":$s}" "$1/" \
            >"$WORK/status.$s" &
        pids="$pids $!"
        s=$((s + 1))
    done
    for p in $pids; do wait "$p" || fail "curl failed"; done
}

for m in ch_PP-OCRv4_det_infer.onnx:concat silero_vad_v5.onnx:sequential; do
    model="$MODELS/${m%%:*}"
    # A long maximum wait so that a burst fills batches however slow the
    # machine is; the test never looks at times.
    fn_start batch --model "$model" --private --batch 4 --concurrency 2 --max-wait-ms 3000
    url=$FN_URL_batch
    burst "$url" 100 8
    multi=0
    for s in $(seq 100 107); do
        [ "$(cat "$WORK/status.$s")" = 200 ] || fail "seed $s: $(cat "$WORK/status.$s") $(cat "$WORK/r.$s")"
        [ "$(jq -r .sha256 "$WORK/r.$s")" = "$(want_sha "$model" $s)" ] ||
            fail "$m seed $s: batched output differs from tetris-onnx-run: $(cat "$WORK/r.$s")"
        [ "$(jq -r .batching "$WORK/r.$s")" = "${m#*:}" ] || fail "$m: $(cat "$WORK/r.$s")"
        [ "$(jq -r .batch_size "$WORK/r.$s")" -gt 1 ] && multi=$((multi + 1))
    done
    [ $multi -gt 0 ] || fail "$m: no request ran in a batch of more than one"
    count=$(metric_at "$url" tetris_function_batch_size_count)
    singles=$(metric_at "$url" 'tetris_function_batch_size_bucket{le="1"}')
    sum=$(metric_at "$url" tetris_function_batch_size_sum)
    [ "$sum" = 8 ] || fail "$m: batch size sum $sum, want 8 requests"
    [ "$singles" -lt "$count" ] || fail "$m: histogram shows only single-request batches"
    [ "$(metric_at "$url" 'tetris_function_requests_total{code="200"}')" = 8 ] || fail "$m: requests_total"
    [ "$(metric_at "$url" tetris_function_inflight_requests)" = 0 ] || fail "$m: inflight not 0"
    [ "$(metric_at "$url" tetris_function_queue_depth)" = 0 ] || fail "$m: queue not empty"
    curl -s "$url/metrics" >"$WORK/metrics.txt"
    promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.log" 2>&1 ||
        fail "promtool: $(cat "$WORK/promtool.log")"
    grep -q "tetris_function_info{model=\"${m%%:*}\",mode=\"private\",batching=\"${m#*:}\"} 1" \
        "$WORK/metrics.txt" || fail "$m: no info line"
    kill -TERM "$FN_PID_batch"
    wait "$FN_PID_batch" || fail "exit status $? after SIGTERM"
    echo "ok $m: 8 concurrent requests in $count batches ($multi in batches > 1), outputs equal, promtool ok"
done
