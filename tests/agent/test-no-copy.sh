#!/bin/sh
# ONNX Runtime computes on the store mappings and keeps no copy of the
# weights: after one inference, the instance has touched (nearly) all of
# its shared weight pages through the r--s mappings, and its anonymous
# memory is lower than a private instance's by more than half the weight
# bytes it shares (what a copy would cost back). Nor does anything read the weights from the model file on a
# warm start: the session's image (the graph rewritten around the store's
# files) and a model view's graph are built from a mapping of the file
# that touches only the graph's bytes, so the process's read() bytes
# (/proc/PID/io rchar) stay far below the file, whose weights are inline.
# An instance whose load fell back holds one copy, not two.
# (Memory and bytes, not time: deterministic for one model and build.)
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
asan_memory_as_release
store="$WORK/store"
mkdir -p "$store"
model="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
"$BIN/tetris-agent" load --direct --store "$store" "$model" >/dev/null 2>&1 || fail "seeding the store"

# hold ARGS...: starts an instance that holds the model after one inference;
# sets $pid and leaves its result in $WORK/inst.out.
hold() {
    held_start inst "$BIN/tetris-onnx-run" "$model" "$@" --hold
    pid=$HELD_PID
}
release() { held_end inst; }
anon_kb() { awk '/^RssAnon:/ { print $2 }' /proc/$1/status; }

hold --private
private_anon=$(anon_kb $pid)
release

hold --store "$store" --direct
store_anon=$(anon_kb $pid)
shared_bytes=$(jq -r .shared_bytes "$WORK/inst.out")
touched_kb=$(awk -v pre="$store/public/tensors/" '/^[0-9a-f]+-[0-9a-f]+ / { in_store = index($6, pre) == 1 }
                                          /^Rss:/ && in_store { kb += $2 } END { print kb + 0 }' /proc/$pid/smaps)
release

[ "$shared_bytes" -gt 0 ] || fail "nothing shared"
# every shared weight page was read through the mapping (pages round up)
[ $((touched_kb * 1024)) -ge "$shared_bytes" ] ||
    fail "only $touched_kb kB of $shared_bytes shared bytes touched through the store mappings"
saved=$(((private_anon - store_anon) * 1024))
# A copy of the weights would cost all the shared bytes back. The two
# processes' other anonymous memory (arenas, thread stacks) differs by a
# few MB from run to run on a busy machine, so half the shared bytes is
# the line: above it no copy fits.
[ $((saved * 2)) -ge "$shared_bytes" ] ||
    fail "anonymous memory only $saved bytes lower than private ($shared_bytes bytes shared): a copy?"
echo "ok weights read through the mappings ($touched_kb kB); anonymous memory $private_anon kB private vs $store_anon kB shared"

# No read of the weights from the model file: warm, then a view, both with
# the model's manifest (without one the agent reads and hashes the bytes).
"$BIN/tetris-agent" index "$model" -o "$WORK/manifest.json" 2>/dev/null || fail "index"
hold --store "$store" --direct --manifest "$WORK/manifest.json"
read_bytes=$(awk '/^rchar:/ { print $2 }' /proc/$pid/io)
release
file_bytes=$(stat -c %s "$model")
[ "$read_bytes" -lt $((file_bytes / 4)) ] ||
    fail "a warm instance read $read_bytes bytes; the model file is $file_bytes bytes, nearly all weights"
held_start view "$BIN/tetris-agent" view --store "$store" --direct --manifest "$WORK/manifest.json" \
    --hold "$model" "$WORK/view"
view_read=$(awk '/^rchar:/ { print $2 }' /proc/$HELD_PID/io)
[ "$(jq -r .shared "$WORK/view.out")" = true ] || fail "the view is not the store's: $(cat "$WORK/view.out")"
held_end view
[ "$view_read" -lt $((file_bytes / 4)) ] ||
    fail "writing a view read $view_read bytes; the model file is $file_bytes bytes"
echo "ok the weights are not read from the model file: $read_bytes bytes read by a warm instance, $view_read by a view, of a $file_bytes-byte file"

# An instance whose load fell back (no store) holds one copy of the
# weights, the session's from the model file: the agent makes none of its
# own. Its anonymous memory is a private instance's, within less than half
# the model's bytes (a second copy would add all of them).
hold --store "$WORK/missing"
fallback_anon=$(anon_kb $pid)
[ "$(jq -r .fell_back "$WORK/inst.out")" = true ] || fail "no fallback: $(cat "$WORK/inst.out")"
model_bytes=$(jq -r .bytes "$WORK/inst.out")
release
[ $(((fallback_anon - private_anon) * 1024 * 2)) -lt "$model_bytes" ] ||
    fail "a fallen-back instance holds $fallback_anon kB anonymous, a private one $private_anon kB: a second copy of the $model_bytes-byte model?"
echo "ok a fallen-back instance holds one copy: $fallback_anon kB anonymous against $private_anon kB private"
