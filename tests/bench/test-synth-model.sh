#!/bin/sh
# test-synth-model.sh - tetris-synth-model writes well-formed safetensors,
# byte-identical for one seed, different for another; a synthetic variant
# shares exactly its backbone with the base model; bad usage exits non-zero
# and leaves no file behind. Uses the small bert-tiny shapes (~17 MB).
set -eu
. "$(dirname "$0")/../lib/common.sh"
GEN="$BIN/tetris-synth-model"

# header_len FILE: the safetensors header length (first 8 bytes, little endian).
header_len() { od -An -tu8 --endian=little -N8 "$1" | tr -d ' '; }
# header FILE: the header's JSON.
header() { tail -c +9 "$1" | head -c "$(header_len "$1")"; }
# data_start FILE: file offset of the data section.
data_start() { echo $(( 8 + $(header_len "$1") )); }
# tensor_range FILE NAME: "begin end" offsets of NAME within the data section.
tensor_range() { header "$1" | jq -r --arg n "$2" '.[$n].data_offsets | "\(.[0]) \(.[1])"'; }

# same_tensor A B NAME: the tensor's bytes are identical in files A and B.
same_tensor() {
    set -- "$1" "$2" "$3" "$(tensor_range "$1" "$3")" "$(tensor_range "$2" "$3")"
    b1=${4% *}; e1=${4#* }; b2=${5% *}
    cmp -s -n $((e1 - b1)) -i "$(( $(data_start "$1") + b1 )):$(( $(data_start "$2") + b2 ))" "$1" "$2"
}

# --- well-formed safetensors -------------------------------------------------
"$GEN" --seed 7 -o "$WORK/a.safetensors" bert-tiny >/dev/null 2>"$WORK/log"
size=$(stat -c %s "$WORK/a.safetensors")
hl=$(header_len "$WORK/a.safetensors")
[ $((hl % 8)) -eq 0 ] || fail "header length $hl is not 8-aligned"
header "$WORK/a.safetensors" | jq -e --argjson data $((size - 8 - hl)) '
    .__metadata__.synthetic == "true" and .__metadata__.arch == "bert-tiny" and
    ([to_entries[] | select(.key != "__metadata__") | .value] | sort_by(.data_offsets[0]) as $t |
     length == 39 and
     all($t[]; .dtype == "F32" and
               (.shape | reduce .[] as $d (4; . * $d)) == (.data_offsets[1] - .data_offsets[0])) and
     $t[0].data_offsets[0] == 0 and $t[-1].data_offsets[1] == $data and
     ([range(1; length) | $t[. - 1].data_offsets[1] == $t[.].data_offsets[0]] | all))
' >/dev/null || fail "header is not a contiguous, consistent safetensors layout"
header "$WORK/a.safetensors" | jq -e '.["embeddings.word_embeddings.weight"].shape == [30522,128] and
    .["encoder.layer.1.intermediate.dense.weight"].shape == [512,128] and
    .["pooler.dense.bias"].shape == [128]' >/dev/null || fail "BERT-tiny shapes are wrong"

# --- deterministic per seed --------------------------------------------------
"$GEN" --seed 7 -o "$WORK/b.safetensors" bert-tiny >/dev/null 2>>"$WORK/log"
cmp -s "$WORK/a.safetensors" "$WORK/b.safetensors" || fail "same seed gave different bytes"
"$GEN" --seed 8 -o "$WORK/c.safetensors" bert-tiny >/dev/null 2>>"$WORK/log"
[ "$(stat -c %s "$WORK/c.safetensors")" -eq "$size" ] || fail "another seed changed the size"
same_tensor "$WORK/a.safetensors" "$WORK/c.safetensors" encoder.layer.0.attention.self.query.weight &&
    fail "another seed gave the same weights"

# --- variants share the backbone, and only it --------------------------------
"$GEN" --seed 7 --variant 3 --shared-layers 1 -o "$WORK/v.safetensors" bert-tiny >/dev/null 2>>"$WORK/log"
for t in embeddings.word_embeddings.weight embeddings.LayerNorm.weight \
         encoder.layer.0.attention.self.key.weight encoder.layer.0.output.LayerNorm.bias; do
    same_tensor "$WORK/a.safetensors" "$WORK/v.safetensors" "$t" || fail "variant differs in shared $t"
done
for t in encoder.layer.1.attention.self.key.weight encoder.layer.1.output.LayerNorm.bias \
         pooler.dense.weight; do
    same_tensor "$WORK/a.safetensors" "$WORK/v.safetensors" "$t" && fail "variant shares fine-tuned $t"
done
"$GEN" --seed 7 --variant 4 --shared-layers 1 -o "$WORK/w.safetensors" bert-tiny >/dev/null 2>>"$WORK/log"
same_tensor "$WORK/v.safetensors" "$WORK/w.safetensors" pooler.dense.weight &&
    fail "two variants have the same fine-tuned pooler"

# --- the cache: named synthetic, written once, then reused ----------------------
p1=$(TETRIS_CACHE="$WORK/cache" "$GEN" --seed 7 bert-tiny 2>>"$WORK/log")
[ "$p1" = "$WORK/cache/synthetic/synthetic-bert-tiny-seed7.safetensors" ] || fail "cache path $p1"
cmp -s "$p1" "$WORK/a.safetensors" || fail "cached file differs from -o output"
TETRIS_CACHE="$WORK/cache" "$GEN" --seed 7 bert-tiny >/dev/null 2>"$WORK/log2"
grep -q 'event=reuse' "$WORK/log2" || fail "cached file was not reused"
[ -z "$(find "$WORK/cache" -name '*.tmp.*')" ] || fail "temp file left in the cache"

# --- the agent reads it (once tetris-agent exists) --------------------------------
if [ -x "$BIN/tetris-agent" ]; then
    "$BIN/tetris-agent" inspect "$WORK/a.safetensors" >"$WORK/inspect" 2>>"$WORK/log" ||
        fail "tetris-agent inspect rejects the synthetic model"
    "$BIN/tetris-agent" index "$WORK/v.safetensors" -o "$WORK/v.json" 2>>"$WORK/log" ||
        fail "tetris-agent index rejects the synthetic variant"
    "$BIN/tetris-agent" index "$WORK/a.safetensors" -o "$WORK/a.json" 2>>"$WORK/log"
    digest() { jq -r --arg n "$2" '.tensors[] | select(.name == $n) | .digest' "$1"; }
    [ "$(jq '.tensors | length' "$WORK/a.json")" -eq 39 ] || fail "agent sees a different tensor count"
    [ "$(digest "$WORK/a.json" encoder.layer.0.output.dense.weight)" = \
      "$(digest "$WORK/v.json" encoder.layer.0.output.dense.weight)" ] || fail "shared digest differs"
    [ "$(digest "$WORK/a.json" pooler.dense.weight)" != \
      "$(digest "$WORK/v.json" pooler.dense.weight)" ] || fail "fine-tuned digest is shared"
fi

# --- bad usage: clear error, non-zero exit, nothing written ----------------------
expect_exit() {
    want=$1; shift
    set +e; "$GEN" "$@" >/dev/null 2>"$WORK/err"; got=$?; set -e
    [ "$got" -eq "$want" ] || fail "'$*' exited $got, want $want"
    grep -q 'level=error' "$WORK/err" || [ "$want" -eq 2 ] || fail "'$*' gave no error line"
}
expect_exit 2 bert-huge
expect_exit 2 --variant 1 bert-tiny
expect_exit 2 --shared-layers 1 bert-tiny
expect_exit 2 --variant 1 --shared-layers 3 bert-tiny
expect_exit 2 --seed -1 bert-tiny
expect_exit 2 --variant 0 --shared-layers 1 bert-tiny
expect_exit 2
expect_exit 1 -o "$WORK/no/such/dir/m.safetensors" bert-tiny
[ ! -e "$WORK/no" ] || fail "a failed write left something behind"
"$GEN" --help | grep -q SYNTHETIC || fail "--help does not say synthetic"
"$GEN" --version | grep -q '^tetris-synth-model ' || fail "--version"
echo "ok synthetic models"
