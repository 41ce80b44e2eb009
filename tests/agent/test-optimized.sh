#!/bin/sh
# Optimise once, share the result: a model saved after ONNX Runtime's full
# graph optimisation (--save-optimized) computes what the original computes
# with --graph-opt all, and in store mode its fused weights are mapped from
# the store like any others, with identical outputs.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
store="$WORK/store"
mkdir -p "$store"
src="$MODELS/ch_PP-OCRv4_det_infer.onnx"
opt="$WORK/det.opt.onnx"
want=$("$BIN/tetris-onnx-run" "$src" --private --graph-opt all --save-optimized "$opt" 2>"$WORK/err" |
    jq -r .sha256) || fail "optimising: $(cat "$WORK/err")"
[ -s "$opt" ] || fail "no optimised model written"
private=$("$BIN/tetris-onnx-run" "$opt" --private 2>"$WORK/err") || fail "private: $(cat "$WORK/err")"
[ "$(json_get "$private" sha256)" = "$want" ] || fail "optimised model computes something else"
for pass in cold warm; do
    out=$("$BIN/tetris-onnx-run" "$opt" --store "$store" --direct 2>"$WORK/err") ||
        fail "store $pass: $(cat "$WORK/err")"
    assert_shared "$out" "store $pass"
    [ "$(json_get "$out" sha256)" = "$want" ] || fail "store $pass: output differs"
done
echo "ok optimised model: $(json_get "$out" shared_tensors) fused tensors shared, output $want"
