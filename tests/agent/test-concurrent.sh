#!/bin/sh
# One copy: several instances start the same model at once on an empty
# store (direct mode, random ingest order). All compute the same output as
# a private run, the store ends up with exactly one file per distinct
# tensor, and it verifies clean.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
store="$WORK/store"
mkdir -p "$store"
model="$MODELS/ch_PP-OCRv4_det_infer.onnx"
n=6
"$BIN/tetris-agent" index "$model" -o "$WORK/manifest.json" 2>/dev/null || fail "index failed"
want=$("$BIN/tetris-onnx-run" "$model" --private 2>/dev/null | jq -r .sha256)
i=1
pids=""
while [ $i -le $n ]; do
    "$BIN/tetris-onnx-run" "$model" --store "$store" --direct --manifest "$WORK/manifest.json" \
        >"$WORK/out.$i" 2>"$WORK/err.$i" &
    pids="$pids $!"
    i=$((i + 1))
done
KILL_ON_EXIT="$KILL_ON_EXIT $pids"
for p in $pids; do wait "$p" || fail "an instance failed: $(cat "$WORK"/err.*)"; done
ingested=0
for i in $(seq 1 $n); do
    [ "$(jq -r .sha256 "$WORK/out.$i")" = "$want" ] || fail "instance $i: output differs"
    [ "$(jq -r .fell_back "$WORK/out.$i")" = false ] || fail "instance $i fell back"
    ingested=$((ingested + $(jq -r .ingested_bytes "$WORK/out.$i")))
done
distinct=$(jq -r '[.tensors[] | select(.nbytes > 0) | .digest] | unique | length' "$WORK/manifest.json")
distinct_bytes=$(jq -r '[.tensors[] | select(.nbytes > 0) | {digest, nbytes}] | unique | map(.nbytes) | add' "$WORK/manifest.json")
files=$(find "$store/public/tensors" -type f | wc -l)
[ "$files" -eq "$distinct" ] || fail "$files tensor files for $distinct distinct tensors"
[ "$ingested" -eq "$distinct_bytes" ] || fail "instances ingested $ingested bytes in all, want $distinct_bytes (one copy)"
"$BIN/tetris-agent" verify --store "$store" >/dev/null 2>&1 || fail "store does not verify"
echo "ok $n concurrent cold starts: one copy of $distinct tensors, identical outputs"
