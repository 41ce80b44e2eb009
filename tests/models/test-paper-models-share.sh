#!/bin/sh
# test-paper-models-share.sh - slow tier: BERT-base (random weights) and a
# fine-tuned variant from scripts/models/paper-models.sh run in ONNX Runtime
# with their weights mapped from one tensor store, compute exactly what a
# private session does, and the variant's frozen bottom layers are stored
# once: the store holds less than the two models' tensor bytes, by the
# bytes their manifests share. Exports the models the first time (minutes,
# PyTorch); SKIPs only without PyTorch.
set -eu
. "$(dirname "$0")/../lib/common.sh"
release_only tetris-onnx-run "runs a 440 MB model several times"
paper_model bert-base:3
dir=$PAPER_MODEL_DIR
STORE="$WORK/store"
mkdir "$STORE"

for m in bert-base bert-base-ft1; do
    "$BIN/tetris-agent" index "$dir/$m.onnx" -o "$WORK/$m.manifest.json" 2>>"$WORK/agent.log" ||
        fail "tetris-agent index $m"
    "$BIN/tetris-onnx-run" "$dir/$m.onnx" --private --dim 16 >"$WORK/$m.private.json" 2>>"$WORK/run.log" ||
        fail "private session of $m"
    "$BIN/tetris-onnx-run" "$dir/$m.onnx" --store "$STORE" --direct --manifest "$WORK/$m.manifest.json" \
        --dim 16 >"$WORK/$m.store.json" 2>>"$WORK/run.log" || fail "store session of $m"
    [ "$(jq -r .sha256 "$WORK/$m.private.json")" = "$(jq -r .sha256 "$WORK/$m.store.json")" ] ||
        fail "$m: store session's outputs differ from a private session's"
    [ "$(jq -r .fell_back "$WORK/$m.store.json")" = false ] || fail "$m: store session fell back"
done
[ "$(jq -r .sha256 "$WORK/bert-base.private.json")" != "$(jq -r .sha256 "$WORK/bert-base-ft1.private.json")" ] ||
    fail "the fine-tuned variant computes exactly what the base does: its top layers were not trained"

# distinct digests of both manifests, in bytes: what one copy of each costs
distinct=$(jq -s '[.[].tensors[] | {digest, nbytes}] | unique_by(.digest) | map(.nbytes) | add' \
    "$WORK/bert-base.manifest.json" "$WORK/bert-base-ft1.manifest.json")
shared=$(jq -n --slurpfile b "$WORK/bert-base.manifest.json" --slurpfile v "$WORK/bert-base-ft1.manifest.json" '
    ($b[0].tensors | map({key: .digest, value: 1}) | from_entries) as $in
    | [$v[0].tensors[] | select($in[.digest]) | .nbytes] | add // 0')
total=$(jq -s 'map(.tensor_bytes) | add' "$WORK/bert-base.manifest.json" "$WORK/bert-base-ft1.manifest.json")
vbytes=$(jq -r .tensor_bytes "$WORK/bert-base-ft1.manifest.json")
# embeddings + 8 of 12 layers frozen: about 73% of the variant's bytes
[ "$shared" -gt $((vbytes * 7 / 10)) ] || fail "only $shared of $vbytes bytes shared between bert-base and its variant"
stored=$(find "$STORE/public/tensors" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
# (a store file may hold a little more than the tensor: alignment, varints)
[ "$stored" -le $((distinct + 1048576)) ] || fail "store holds $stored bytes, more than the $distinct distinct tensor bytes"
[ "$stored" -lt $((total * 2 / 3)) ] || fail "store holds $stored of $total bytes: the bottom layers are not shared"
ingested=$(jq -r .ingested_bytes "$WORK/bert-base-ft1.store.json")
[ "$ingested" -le $((vbytes - shared + 4096 * 600)) ] || fail "the variant ingested $ingested bytes: more than what it does not share"
note "base + variant: $total tensor bytes, the variant shares $shared bytes, store holds $stored bytes"
