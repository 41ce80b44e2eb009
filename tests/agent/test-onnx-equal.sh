#!/bin/sh
# Every real model gives the same output bytes with its weights mapped from
# the store as with a private load, cold (ingesting) and warm (all mapped),
# and the warm load maps everything (but tiny tensors) and ingests nothing.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
store="$WORK/store"
mkdir -p "$store"
n=0
for m in "$MODELS"/*.onnx; do
    name=$(basename "$m")
    private=$("$BIN/tetris-onnx-run" "$m" --private --seed 7 2>"$WORK/err") ||
        fail "$name: private run failed: $(cat "$WORK/err")"
    cold=$("$BIN/tetris-onnx-run" "$m" --store "$store" --direct --seed 7 2>"$WORK/err") ||
        fail "$name: cold store run failed: $(cat "$WORK/err")"
    warm=$("$BIN/tetris-onnx-run" "$m" --store "$store" --direct --seed 7 2>"$WORK/err") ||
        fail "$name: warm store run failed: $(cat "$WORK/err")"
    want=$(json_get "$private" sha256)
    [ "$(json_get "$cold" sha256)" = "$want" ] || fail "$name: cold store output differs"
    [ "$(json_get "$warm" sha256)" = "$want" ] || fail "$name: warm store output differs"
    assert_shared "$cold" "$name cold"
    assert_shared "$warm" "$name warm"
    [ "$(json_get "$warm" ingested_bytes)" = 0 ] || fail "$name: warm load ingested"
    [ "$(json_get "$warm" shared_tensors)" -gt 0 ] || fail "$name: ORT shares no tensor"
    echo "ok $name sha256=$want shared_bytes=$(json_get "$warm" shared_bytes)"
    n=$((n + 1))
done
[ "$n" -ge 9 ] || fail "expected the 9 real models, found $n"
"$BIN/tetris-agent" verify --store "$store" >/dev/null || fail "store does not verify"
