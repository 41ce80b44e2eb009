#!/bin/sh
# tetris-function makes its model's derived form without anyone waiting
# (protocol/derived.h, --derived auto, opted into): the first instance on
# a fresh store answers on the plain weights, what tetris-onnx-run
# --private answers, and asks the real node daemon in the background; the
# index entry appears without any explicit make while it serves; a second
# instance logs that it uses the form and answers byte for byte what stock
# ONNX Runtime at `all` with pre-packing answers. (Not what the first
# answered: ONNX Runtime's fusions at `all` change the floating-point
# results of both models for some inputs, e.g. hello_deepa seed 3.)
# --derived use never asks; the default (off) neither asks nor uses one.
set -eu
. "$(dirname "$0")/../lib/function.sh"
[ -x "$BIN/tetris-derive" ] || fail "tetris-derive not built in $BIN"
store="$WORK/store"
mkdir -p "$store"
# The derivation child (uid 65534) reads the store's public directory by
# its name, as on a node, where the store's parents are 0755.
chmod 0711 "$WORK"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
pub="$store/public"
# The mode under test (common.sh sets use for the other tests).
export TETRIS_DERIVED=auto

# answers NAME: the sha256 of seeds 3 and 11, one line.
answers() {
    url=$(eval echo "\$FN_URL_$1")
    for seed in 3 11; do
        got=$(fn_post "$url" "{\"seed\":$seed}")
        [ "${got%% *}" = 200 ] || fail "$1 seed $seed: $got"
        printf '%s ' "$(printf '%s' "${got#* }" | jq -r .sha256)"
    done
}
# reference MODEL ARGS...: tetris-onnx-run's sha256 for seeds 3 and 11.
reference() {
    _m=$1
    shift
    for seed in 3 11; do
        printf '%s ' "$("$BIN/tetris-onnx-run" "$_m" --private --seed $seed "$@" 2>/dev/null |
            jq -r .sha256)"
    done
}
stop_fn() {
    pid=$(eval echo "\$FN_PID_$1")
    kill -TERM "$pid"
    wait "$pid" || fail "$1: exit status $? after SIGTERM"
}
entries() { ls "$pub/derived" 2>/dev/null | wc -l; }

# --derived use: no ask, no entry.
fn_start plain --model "$MODELS/hello_deepa.onnx" --store "$store" --derived use
answers plain >/dev/null
stop_fn plain
sleep 1
[ "$(entries)" = 0 ] || fail "--derived use asked for a form: $(ls "$pub/derived")"
! grep -q "event=derive" "$WORK/daemon.log" || fail "--derived use: $(grep event=derive "$WORK/daemon.log")"
echo "ok --derived use never asks the daemon"

n=0
for m in hello_deepa.onnx ch_PP-OCRv4_det_infer.onnx; do
    n=$((n + 1))
    fn_start first --model "$MODELS/$m" --store "$store"
    jq -e '.derived == false and .fell_back == false' "$WORK/first.ready" >/dev/null ||
        fail "$m first: $(cat "$WORK/first.ready")"
    first=$(answers first)
    [ "$first" = "$(reference "$MODELS/$m")" ] || fail "$m first: not the plain weights' answers"
    # The ask runs beside the serving instance: the entry appears while
    # the first instance keeps answering.
    i=0
    while [ "$(entries)" -lt $n ]; do
        i=$((i + 1))
        [ $i -le 600 ] || fail "$m: no derived form after 60 s: $(tail -n 3 "$WORK/daemon.log")"
        sleep 0.1
    done
    [ "$(answers first)" = "$first" ] || fail "$m: the first instance's answers changed"
    grep -q "event=derived .*label=.*$m" "$WORK/daemon.log" || fail "$m: the daemon made no form"
    i=0
    until grep -q "event=derive-requested.*wait=background.*result=made" "$WORK/first.log"; do
        i=$((i + 1))
        [ $i -le 100 ] || fail "$m first: no background ask logged: $(cat "$WORK/first.log")"
        sleep 0.1
    done
    fn_start second --model "$MODELS/$m" --store "$store"
    jq -e '.derived == true' "$WORK/second.ready" >/dev/null ||
        fail "$m second: the form was not used: $(cat "$WORK/second.ready") $(cat "$WORK/second.log")"
    grep -q "event=ready .*derived=1" "$WORK/second.log" || fail "$m second: no derived=1 in its log"
    ! grep -q "event=derive-request" "$WORK/second.log" || fail "$m second: asked again"
    second=$(answers second)
    stock=$(reference "$MODELS/$m" --graph-opt all --prepack)
    [ "$second" = "$stock" ] || fail "$m: second answered $second, stock all+prepack $stock"
    stop_fn first
    stop_fn second
    echo "ok $m: the first instance served on the plain weights and got the form made in the background; the second uses it (answers $second)"
done
[ "$(grep -c "event=derived " "$WORK/daemon.log")" = 2 ] ||
    fail "expected 2 derivations: $(grep "event=derive" "$WORK/daemon.log")"

# The default: a form in the store is neither used nor asked for.
unset TETRIS_DERIVED
fn_start dflt --model "$MODELS/hello_deepa.onnx" --store "$store"
jq -e '.derived == false' "$WORK/dflt.ready" >/dev/null ||
    fail "the default used the form: $(cat "$WORK/dflt.ready")"
[ "$(answers dflt)" = "$(reference "$MODELS/hello_deepa.onnx")" ] ||
    fail "the default did not answer what the plain weights answer"
! grep -q "event=derive-request" "$WORK/dflt.log" || fail "the default asked for a form"
stop_fn dflt
echo "ok the default (off) runs on the plain weights beside a form and asks for none"
