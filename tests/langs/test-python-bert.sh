#!/bin/sh
# test-python-bert.sh - slow tier: the PyTorch example function on the
# paper's BERT-base (random weights, 438 MB; scripts/models/paper-models.sh
# exports it with PyTorch once, minutes, and caches it). N instances under
# `tetris-agent exec` with the real node daemon answer OIP requests with
# exactly the outputs of N private instances (the safetensors file read
# into private memory), share the store's pages, and take less memory by
# at least half of the N-1 copies of the weights one shared copy saves.
# Then a Node.js instance on the ONNX export's view, next to them in the
# same store, ingests only the tensors whose digests the safetensors file
# does not have (those, the embeddings, biases and norms, are one copy for
# both languages), and answers exactly as tetris-onnx-run --private.
# SKIPs when PyTorch cannot be installed.
set -eu
. "$(dirname "$0")/lib.sh"
need_numpy
need_node
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"

paper_model bert-base
dir=$PAPER_MODEL_DIR
"$PY" -c 'import torch' 2>/dev/null || skip "PyTorch is not importable by $PY"

N=3
FN="$ROOT/function/python/index.py"
MODEL="$dir/bert-base.safetensors"
ONNX="$dir/bert-base.onnx"
NAME=bert-base
STORE="$WORK/store"
mkdir "$STORE"
W=$(stat -c %s "$MODEL")
i=1
while [ $i -le $N ]; do
    "$BIN/tetris-onnx-run" "$ONNX" --private --dim 32 --seed $i --oip-request "$WORK/req.$i.json" \
        >"$WORK/onnx.$i.json" 2>>"$WORK/onnx-run.log" || fail "tetris-onnx-run --seed $i"
    i=$((i + 1))
done

# ---- N private instances ----
private_kb=0 pids=""
i=1
while [ $i -le $N ]; do
    inst_start "private$i" env TETRIS_MODEL="$MODEL" port=0 "$PY" "$FN"
    oip_sha "http://127.0.0.1:$INST_PORT" "$NAME" "$WORK/req.$i.json" "$WORK/private.$i.resp" >"$WORK/want.$i"
    pids="$pids $INST_PID"
    i=$((i + 1))
done
for p in $pids; do private_kb=$((private_kb + $(pss_kb "$p"))); done
for p in $pids; do kill -TERM "$p"; done
for p in $pids; do wait "$p" || fail "private instance $p: exit status $? on SIGTERM"; done
note "$N private instances: PSS $private_kb kB"

# ---- N instances on views ----
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600
inst_pids="" launchers=""
i=1
while [ $i -le $N ]; do
    inst_start "view$i" env port=0 "$BIN/tetris-agent" exec --store "$STORE" --model "$MODEL" -- "$PY" "$FN"
    grep -q 'prog=tetris-agent event=view .*shared=true fallback=none' "$WORK/view$i.log" ||
        fail "instance $i: the view is not the store's: $(grep 'event=view' "$WORK/view$i.log")"
    got=$(oip_sha "http://127.0.0.1:$INST_PORT" "$NAME" "$WORK/req.$i.json" "$WORK/view.$i.resp")
    [ "$got" = "$(cat "$WORK/want.$i")" ] || fail "instance $i: outputs $got, a private instance gives $(cat "$WORK/want.$i")"
    inst_pids="$inst_pids $INST_PID"
    launchers="$launchers $INST_LAUNCHER"
    i=$((i + 1))
done
note "$N view instances: outputs byte-identical to private instances"

view_kb=0
for p in $inst_pids; do
    s=$(pss_kb "$p" "$STORE/")
    r=$(rss_kb "$p" "$STORE/")
    # every Linear weight (77% of the bytes) was read through the store
    [ "$r" -ge $((W / 1024 / 2)) ] || fail "instance $p computes on only $r kB of the store (weights: $((W / 1024)) kB)"
    [ $((s * N)) -le $((r + r / 10)) ] ||
        fail "instance $p: store PSS $s kB of RSS $r kB: the pages are not shared by the $N instances"
    [ "$(rollup_kb "$p" Pss_Shmem)" -ge "$s" ] || fail "instance $p: Pss_Shmem below its store PSS"
    view_kb=$((view_kb + $(pss_kb "$p") - s))
done
sup_kb=0
for p in $launchers; do sup_kb=$((sup_kb + $(pss_kb "$p"))); done
daemon_kb=$(pss_kb "$RECLAIMER_PID")
skb=$(store_kb "$STORE")
total_kb=$((view_kb + skb + daemon_kb + sup_kb))
note "$N view instances: PSS without the store $view_kb kB + store $skb kB + daemon $daemon_kb kB + exec $sup_kb kB = $total_kb kB (private: $private_kb kB; weights $((W / 1024)) kB)"
inst_saved=$((private_kb - view_kb - skb))
[ $inst_saved -ge $(((N - 1) * W / 1024 / 2)) ] ||
    fail "$N view instances and the store save $inst_saved kB over $N private ones: less than half of $((N - 1)) copies of the $((W / 1024)) kB weights"
[ $SANITIZED = 1 ] || [ $total_kb -lt $private_kb ] || fail "$N view instances with the daemon and supervisors take $total_kb kB, private ones $private_kb kB"

# ---- the ONNX export, from Node.js, in the same store ----
shared=$(jq -n --slurpfile o "$dir/bert-base.manifest.json" --slurpfile s "$dir/bert-base.safetensors.manifest.json" '
    ($s[0].tensors | map({key: .digest, value: 1}) | from_entries) as $in
    | [$o[0].tensors[] | select($in[.digest]) | .nbytes] | add // 0')
onnx_bytes=$(jq -r .tensor_bytes "$dir/bert-base.manifest.json")
inst_start node env port=0 "$BIN/tetris-agent" exec --store "$STORE" --model "$ONNX" -- node "$ROOT/function/node/index.js"
ingested=$(sed -n 's/.*prog=tetris-agent event=load .* ingested_bytes=\([0-9]*\).*/\1/p' "$WORK/node.log")
[ -n "$ingested" ] || fail "no load line from the Node.js instance's exec"
# (a store file may hold a few bytes more than its tensor: varints)
[ "$ingested" -le $((onnx_bytes - shared + 1048576)) ] ||
    fail "the ONNX model ingested $ingested of its $onnx_bytes bytes: the $shared bytes the safetensors file has were not shared"
got=$(oip_sha "http://127.0.0.1:$INST_PORT" "$NAME" "$WORK/req.1.json" "$WORK/node.1.resp")
[ "$got" = "$(jq -r '"\(.sha256) \(.output_bytes)"' "$WORK/onnx.1.json")" ] || fail "Node.js on the ONNX view: outputs differ from tetris-onnx-run --private"
note "ONNX export next to it: $shared of $onnx_bytes tensor bytes have the safetensors file's digests; the Node.js instance ingested $ingested bytes"

kill -TERM "$INST_LAUNCHER"
wait "$INST_LAUNCHER" || fail "the Node.js instance's exec exited $? after SIGTERM"
for p in $launchers; do kill -TERM "$p"; done
for p in $launchers; do wait "$p" || fail "tetris-agent exec $p: exit status $? after SIGTERM"; done
reclaimer_stop
echo "ok PyTorch BERT-base: $N instances share $skb kB of weights: $total_kb kB against $private_kb kB private"
