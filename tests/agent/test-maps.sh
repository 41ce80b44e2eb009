#!/bin/sh
# A function process's weights are read-only shared mappings (r--s) of the
# store's tensor files, never writable ones, and its references are
# recorded while it holds the model and released when it lets go.
. "$(dirname "$0")/lib.sh"
store="$WORK/store"
mkdir -p "$store"
model="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
mkfifo "$WORK/stdin"
"$BIN/tetris-onnx-run" "$model" --store "$store" --direct --hold <"$WORK/stdin" \
    >"$WORK/out" 2>"$WORK/err" &
pid=$!
KILL_ON_EXIT=$pid
exec 3>"$WORK/stdin" # hold the fifo open: the process holds the model
i=0
while [ ! -s "$WORK/out" ]; do
    kill -0 $pid 2>/dev/null || fail "tetris-onnx-run died: $(cat "$WORK/err")"
    i=$((i + 1)); [ $i -lt 600 ] || fail "no result from tetris-onnx-run"
    sleep 0.1
done
shared=$(jq -r .shared_tensors "$WORK/out")
ro=$(grep -c " r--s .*$store/tensors/" /proc/$pid/maps || true)
rw=$(grep "$store/tensors/" /proc/$pid/maps | grep -vc " r--s " || true)
[ "$ro" -ge "$shared" ] || fail "$ro r--s store mappings for $shared shared tensors"
[ "$rw" -eq 0 ] || fail "$rw store mappings that are not r--s"
"$BIN/tetris-agent" inspect --store "$store" | grep -q " live " || fail "no live holder listed"
exec 3>&-                             # close stdin: the process lets go
wait $pid || fail "tetris-onnx-run exited non-zero after release"
KILL_ON_EXIT=
"$BIN/tetris-agent" inspect --store "$store" | grep -q " live " && fail "holder not released"
echo "ok $ro read-only shared mappings, none writable; holder released"
