#!/bin/sh
# Command-line contract: --help/--version exit 0; bad usage exits 2 with a
# message; a malformed model exits 3; a missing store exits 4.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
expect() { # rc cmd...
    want=$1; shift
    rc=0
    "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
    [ $rc -eq "$want" ] || fail "$*: exit $rc, want $want"
    if [ "$want" -ne 0 ]; then
        [ -s "$WORK/err" ] || fail "$*: no message on stderr"
        grep -q "Segmentation\|Aborted\|AddressSanitizer" "$WORK/err" && fail "$*: crashed"
    fi
    return 0
}
A="$BIN/tetris-agent"
R="$BIN/tetris-onnx-run"
m="$MODELS/hello_deepa.onnx"
expect 0 "$A" --help
grep -q "Exit status" "$WORK/out" || fail "--help lacks exit codes"
expect 0 "$A" --version
expect 0 "$R" --help
expect 0 "$R" --version
expect 2 "$A"
expect 2 "$A" frobnicate
expect 2 "$A" load
expect 2 "$A" load --direct --private "$m"
expect 2 "$A" load --no-such-option "$m"
expect 2 "$A" verify --manifest x
expect 2 "$A" index "$m" extra
expect 2 "$A" load --timeout-ms nan "$m"
expect 2 "$R"
expect 2 "$R" "$m" --runs 0
expect 2 "$R" "$m" --private --store "$WORK"
expect 2 "$R" "$m" --graph-opt turbo
printf 'not a model at all' >"$WORK/garbage.onnx"
expect 3 "$A" index "$WORK/garbage.onnx"
expect 3 "$A" load --private "$WORK/garbage.onnx"
expect 3 "$A" inspect "$WORK/nonexistent.onnx"
expect 3 "$R" "$WORK/garbage.onnx" --private
head -c 1000 "$m" >"$WORK/truncated.onnx"
expect 3 "$A" index "$WORK/truncated.onnx"
expect 3 "$R" "$WORK/truncated.onnx" --store "$WORK/s" --direct
expect 4 "$A" verify --store "$WORK/no-store"
expect 4 "$A" inspect --store "$WORK/no-store"
# --batch N: N requests per run, concatenated; only for a batchable model,
# and not with --oip-request (one request).
rec="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
expect 0 "$R" "$rec" --private --batch 1
one=$(jq -r .output_bytes "$WORK/out")
expect 0 "$R" "$rec" --private --batch 3
[ "$(jq -r .batch "$WORK/out")" = 3 ] && [ "$(jq -r .output_bytes "$WORK/out")" = $((one * 3)) ] ||
    fail "--batch 3: $(cat "$WORK/out")"
expect 1 "$R" "$MODELS/silero_vad_v5.onnx" --private --batch 2
grep -q "no dynamic first dimension" "$WORK/err" || fail "--batch on a fixed batch: $(cat "$WORK/err")"
expect 2 "$R" "$rec" --private --batch 2 --oip-request "$WORK/req.json"
expect 2 "$R" "$rec" --private --batch 0
echo "ok command-line contract"
