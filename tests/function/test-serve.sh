#!/bin/sh
# tetris-function serves the same outputs as tetris-onnx-run for the same
# model and seed, with its weights private and mapped from the store through
# the real node daemon (cold: ingested, then warm: mapped), for a model that
# batches by concatenation and one that cannot; health endpoints answer.
set -eu
. "$(dirname "$0")/../lib/function.sh"
store="$WORK/store"
mkdir -p "$store"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600

check() { # NAME MODEL BATCHING
    url=$(eval echo "\$FN_URL_$1")
    ready="$WORK/$1.ready"
    [ "$(jq -r .batching "$ready")" = "$3" ] || fail "$1: batching $(jq -r .batching "$ready"), want $3"
    for seed in 3 11; do
        got=$(fn_post "$url" "{\"seed\":$seed}")
        [ "${got%% *}" = 200 ] || fail "$1 seed $seed: $got"
        sha=$(printf '%s' "${got#* }" | jq -r .sha256)
        want=$(want_sha "$2" $seed)
        [ -n "$want" ] && [ "$sha" = "$want" ] || fail "$1 seed $seed: sha256 $sha, tetris-onnx-run $want"
    done
    # An empty body is seed 1, like tetris-onnx-run's default.
    got=$(fn_post "$url" "")
    [ "$(printf '%s' "${got#* }" | jq -r .sha256)" = "$(want_sha "$2" 1)" ] ||
        fail "$1: empty body is not seed 1: $got"
    for path in /_/health /healthz; do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$url$path")" = 200 ] || fail "$1: $path not 200"
    done
    echo "ok $1 $(basename "$2") mode=$(jq -r .mode "$ready") batching=$3 outputs equal tetris-onnx-run"
}

for m in ch_PP-OCRv4_det_infer.onnx:concat silero_vad_v5.onnx:sequential; do
    model="$MODELS/${m%%:*}"
    batching=${m#*:}
    fn_start private --model "$model" --private
    check private "$model" "$batching"
    # Cold through options, warm through the environment the autoscaler sets.
    fn_start cold --model "$model" --store "$store"
    export TETRIS_STORE="$store" TETRIS_MODEL="$model"
    fn_start warm
    unset TETRIS_STORE TETRIS_MODEL
    for pass in cold warm; do
        jq -e '.mode == "store" and .fell_back == false and .shared_bytes > 0' \
            "$WORK/$pass.ready" >/dev/null || fail "$pass: not served from the store: $(cat "$WORK/$pass.ready")"
        check $pass "$model" "$batching"
    done
    for name in private cold warm; do
        pid=$(eval echo "\$FN_PID_$name")
        kill -TERM "$pid"
        wait "$pid" || fail "$name: exit status $? after SIGTERM"
    done
done
