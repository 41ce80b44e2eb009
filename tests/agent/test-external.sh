#!/bin/sh
# Models whose weights live in an external data file: the agent maps them
# from the store and ONNX Runtime computes on the mappings, with the same
# output as a private run. When the store can serve only part of them (a
# full store), the session falls back to reading the files, still correct.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
mkdir -p "$WORK/model" "$WORK/store" "$WORK/small"
src="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
model="$WORK/model/rec.onnx"
"$BIN/tetris-test-externalize" "$src" "$model" >/dev/null || fail "cannot externalize $src"
want=$("$BIN/tetris-onnx-run" "$src" --private 2>/dev/null | jq -r .sha256)

out=$("$BIN/tetris-onnx-run" "$model" --private 2>"$WORK/err") || fail "private: $(cat "$WORK/err")"
[ "$(json_get "$out" sha256)" = "$want" ] || fail "externalized model computes something else"

out=$("$BIN/tetris-onnx-run" "$model" --store "$WORK/store" --direct 2>"$WORK/err") ||
    fail "store: $(cat "$WORK/err")"
[ "$(json_get "$out" sha256)" = "$want" ] || fail "store: output differs"
[ "$(json_get "$out" shared_tensors)" -gt 0 ] || fail "store: no tensor shared"
assert_shared "$out" "store"
echo "ok external data mapped from the store: $(json_get "$out" shared_bytes) bytes shared"

reclaimer_start "$WORK/small" "$WORK/daemon.log" --listen "" --capacity 1048576 --interval 3600
out=$("$BIN/tetris-onnx-run" "$model" --store "$WORK/small" 2>"$WORK/err") ||
    fail "full store: $(cat "$WORK/err")"
[ "$(json_get "$out" fell_back)" = true ] || fail "full store: no fallback"
[ "$(json_get "$out" fallback_reason)" = store-full ] || fail "full store: reason $(json_get "$out" fallback_reason)"
[ "$(json_get "$out" sha256)" = "$want" ] || fail "full store: output differs"
grep -q "event=ort-no-sharing" "$WORK/err" || fail "full store: no ort-no-sharing log line"
echo "ok partly served external data: ONNX Runtime reads the files, output unchanged"
