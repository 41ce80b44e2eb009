#!/bin/sh
# bench/upgrade/run.sh - what a running function gains when it moves to the
# store's derived form (tetris-function --derived auto, fn_upgrade.c): its
# per-request latency on the plain weights, then on the form, beside
# tetris-onnx-run's steady runs of the same model on the plain weights and
# as stock ONNX Runtime runs it (optimisation `all`, pre-packing), all in
# one round.
#
# Per model and round: a node daemon on an empty store (a tmpfs of 4 KiB
# pages where this user may mount: --store-tmpfs plain); one
# tetris-function (batch 1, one worker, --derived auto) starts on it, and
# the daemon is held (SIGSTOP) from the moment it has registered the
# function's tensors, so that BENCH_REQUESTS seeded requests are answered
# on the plain weights whatever the machine's speed; then the daemon
# goes on, makes the form, the function moves to it (event=session-upgraded)
# and answers BENCH_REQUESTS more. A request's latency is the function's
# own inference_ms (its batch's run, HTTP not counted). Printed: the
# medians over the rounds of each round's median, the ratio after/before,
# the stock and plain means of tetris-onnx-run --runs BENCH_REQUESTS, the
# move's time after the daemon was let go (daemon's derivation included),
# and whether the answers after the move are stock's byte for byte.
# Environment: TETRIS_BIN, TETRIS_MODELS, BENCH_MODELS, BENCH_ROUNDS (3),
# BENCH_REQUESTS (30).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${TETRIS_BIN:-$ROOT/bin}
MODELS=${TETRIS_MODELS:-$ROOT/.deps/models}
rounds=${BENCH_ROUNDS:-3}
requests=${BENCH_REQUESTS:-30}
models=${BENCH_MODELS:-"ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx"}
say() { echo "bench/upgrade: $*" >&2; }
work=$(mktemp -d /dev/shm/tetris-bench-upgrade.XXXXXX)
# The derivation runs as an unprivileged user, who must reach the store.
chmod 0711 "$work"
daemon=""
function=""
stop() {
    [ -z "$function" ] || { kill "$function" 2>/dev/null; wait "$function" 2>/dev/null || true; }
    [ -z "$daemon" ] || { kill -CONT "$daemon" 2>/dev/null; kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true; }
    function="" daemon=""
    for mnt in $(findmnt -rn -o TARGET 2>/dev/null | grep "^$work/" | sort -r); do umount -l "$mnt" || true; done
    rm -rf "$work/store"
}
trap 'stop; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# requests_ms PORT: the median inference_ms of BENCH_REQUESTS seed-3 requests;
# the last reply's sha256 in $work/sha
requests_ms() {
    i=0
    while [ "$i" -lt "$requests" ]; do
        curl -sf --data-binary '{"seed":3}' "http://127.0.0.1:$1/" >"$work/reply" ||
            { say "a request failed"; exit 1; }
        jq -r .inference_ms "$work/reply"
        i=$((i + 1))
    done | median
    jq -r .sha256 "$work/reply" >"$work/sha"
}

echo "| model | plain weights ms | derived form ms | after / before | stock run ms | plain run ms | move ms | answers after = stock |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
for m in $models; do
    model="$MODELS/$m"
    [ -r "$model" ] || { say "$model: not readable"; exit 1; }
    : >"$work/before" && : >"$work/after" && : >"$work/move" && : >"$work/stock" && : >"$work/plain"
    same=yes
    r=1
    while [ "$r" -le "$rounds" ]; do
        "$BIN/tetris-reclaimer" --store "$work/store" --store-tmpfs plain --listen "" \
            --interval 3600 2>"$work/daemon.log" &
        daemon=$!
        until grep -q "event=serving" "$work/daemon.log"; do
            kill -0 "$daemon" 2>/dev/null || { say "the daemon died: $(tail -n 2 "$work/daemon.log")"; exit 1; }
            sleep 0.05
        done
        (
            until grep -q "event=ingest .*label=\"$m\"" "$work/daemon.log"; do sleep 0.005; done
            kill -STOP "$daemon"
        ) &
        holder=$!
        TETRIS_DERIVED=auto "$BIN/tetris-function" --model "$model" --store "$work/store" \
            --listen 127.0.0.1:0 >"$work/ready" 2>"$work/function.log" &
        function=$!
        wait "$holder"
        until [ -s "$work/ready" ]; do
            kill -0 "$function" 2>/dev/null || { say "the function died: $(tail -n 2 "$work/function.log")"; exit 1; }
            sleep 0.05
        done
        port=$(jq -r .port "$work/ready")
        requests_ms "$port" >>"$work/before"
        released=$(date +%s%N)
        kill -CONT "$daemon"
        until grep -q "event=session-upgraded" "$work/function.log"; do
            ! grep -q "event=session-upgrade-failed" "$work/function.log" ||
                { say "$m: $(grep event=session-upgrade "$work/function.log")"; exit 1; }
            sleep 0.01
        done
        echo $((($(date +%s%N) - released) / 1000000)) >>"$work/move"
        requests_ms "$port" >>"$work/after"
        after_sha=$(cat "$work/sha")
        stop
        "$BIN/tetris-onnx-run" "$model" --private --graph-opt all --prepack --seed 3 \
            --runs "$requests" 2>/dev/null >"$work/stock.json"
        jq -r .run_ms "$work/stock.json" >>"$work/stock"
        [ "$(jq -r .sha256 "$work/stock.json")" = "$after_sha" ] || same=no
        "$BIN/tetris-onnx-run" "$model" --private --seed 3 --runs "$requests" 2>/dev/null |
            jq -r .run_ms >>"$work/plain"
        r=$((r + 1))
    done
    before=$(median <"$work/before")
    after=$(median <"$work/after")
    echo "| $m | $before | $after | $(awk -v a="$after" -v b="$before" 'BEGIN { printf "%.2f", a / b }') | $(median <"$work/stock") | $(median <"$work/plain") | $(median <"$work/move") | $same |"
done
echo
echo "$rounds rounds of $requests requests per mode; 1 thread, batch 1; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)."
