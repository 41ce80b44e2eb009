#!/bin/sh
# A function process's weights are read-only shared mappings (r--s) of the
# store's tensor files, never writable ones, and its references are
# recorded while it holds the model and released when it lets go.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
store="$WORK/store"
mkdir -p "$store"
model="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
mkfifo "$WORK/stdin"
"$BIN/tetris-onnx-run" "$model" --store "$store" --direct --hold <"$WORK/stdin" \
    >"$WORK/out" 2>"$WORK/err" &
pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $pid"
exec 3>"$WORK/stdin" # hold the fifo open: the process holds the model
wait_output $pid "$WORK/out" tetris-onnx-run "$WORK/err"
shared=$(jq -r .shared_tensors "$WORK/out")
ro=$(grep -c " r--s .*$store/public/tensors/" /proc/$pid/maps || true)
rw=$(grep "$store/public/tensors/" /proc/$pid/maps | grep -vc " r--s " || true)
[ "$ro" -ge "$shared" ] || fail "$ro r--s store mappings for $shared shared tensors"
[ "$rw" -eq 0 ] || fail "$rw store mappings that are not r--s"
"$BIN/tetris-agent" inspect --store "$store" | grep -q " live " || fail "no live holder listed"
exec 3>&-                             # close stdin: the process lets go
wait $pid || fail "tetris-onnx-run exited non-zero after release"
"$BIN/tetris-agent" inspect --store "$store" | grep -q " live " && fail "holder not released"
echo "ok $ro read-only shared mappings, none writable; holder released"
