#!/bin/sh
# test-python-function.sh - the PyTorch example function (function/python/)
# on a real BERT in seconds: BERT-tiny with random weights, exported by
# scripts/models/export.py (ONNX and the safetensors state_dict). N
# instances under `tetris-agent exec` with the real node daemon bind the
# module's parameters to the view's mapped tensors and answer OIP requests
# with exactly the outputs of N private instances (the same file read into
# private memory); the store's pages are shared and the instances take less
# memory than private ones, by at least half of the N-1 copies saved. The
# outputs agree with ONNX Runtime's on the exported ONNX model (the Node.js
# function, to 1e-4: different runtimes). Bad requests get 4xx; a view of
# another architecture, of the ONNX model, or an untrusted one, exits 3
# naming why. Installs Debian's PyTorch when missing; SKIPs only when it
# cannot, or $PY is not the Python it is for.
set -eu
. "$(dirname "$0")/lib.sh"
need_numpy
need_node
"$PY" -c 'import torch' 2>/dev/null || need_package python3-torch
"$PY" -c 'import torch' 2>/dev/null ||
    skip "PyTorch is not importable by $PY (Debian's python3-torch is for /usr/bin/python3)"
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"

N=3
FN="$ROOT/function/python/index.py"
STORE="$WORK/store"
mkdir "$STORE"
"$PY" "$FN" --version | grep -q '^tetris-python-function ' || fail "--version"
"$PY" "$FN" --help | grep -q 'TETRIS_MODEL_VIEW' || fail "--help"
"$PY" "$ROOT/scripts/models/export.py" --out "$WORK/m" bert-tiny 2>"$WORK/export.log" || fail "export.py bert-tiny"
MODEL="$WORK/m/bert-tiny.safetensors"
NAME=bert-tiny
W=$(stat -c %s "$MODEL")
export BERT_ARCH=bert-tiny
i=1
while [ $i -le $N ]; do
    "$BIN/tetris-onnx-run" "$WORK/m/bert-tiny.onnx" --private --dim 32 --seed $i \
        --oip-request "$WORK/req.$i.json" >/dev/null 2>>"$WORK/onnx-run.log" || fail "tetris-onnx-run --seed $i"
    i=$((i + 1))
done

# ---- N private instances: the baseline ----
private_kb=0 pids=""
i=1
while [ $i -le $N ]; do
    inst_start "private$i" env TETRIS_MODEL="$MODEL" port=0 "$PY" "$FN"
    grep -q 'mode=private' "$WORK/private$i.log" || fail "private instance $i: not mode=private"
    oip_sha "http://127.0.0.1:$INST_PORT" "$NAME" "$WORK/req.$i.json" "$WORK/private.$i.resp" >"$WORK/want.$i"
    pids="$pids $INST_PID"
    i=$((i + 1))
done
for p in $pids; do private_kb=$((private_kb + $(pss_kb "$p"))); done
for p in $pids; do kill -TERM "$p"; done
for p in $pids; do wait "$p" || fail "private instance $p: exit status $? on SIGTERM"; done

# ONNX Runtime on the exported model computes the same, within rounding
inst_start onnx env TETRIS_MODEL="$WORK/m/bert-tiny.onnx" port=0 node "$ROOT/function/node/index.js"
oip_sha "http://127.0.0.1:$INST_PORT" "$NAME" "$WORK/req.1.json" "$WORK/onnx.1.resp" >/dev/null
kill -TERM "$INST_PID"
wait "$INST_PID" || fail "the Node.js function exited $? on SIGTERM"
jq -e -n --slurpfile a "$WORK/private.1.resp" --slurpfile b "$WORK/onnx.1.resp" '
    [$a[0].outputs[0].data, $b[0].outputs[0].data] | transpose | map(.[0] - .[1] | fabs) | max < 1e-4' \
    >/dev/null || fail "PyTorch and ONNX Runtime disagree: $(jq -c .outputs "$WORK/private.1.resp") vs $(jq -c .outputs "$WORK/onnx.1.resp")"
note "$N private instances: PSS $private_kb kB; their logits match ONNX Runtime's to 1e-4"

# ---- N instances on views, under tetris-agent exec, through the daemon ----
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600
inst_pids="" launchers=""
i=1
while [ $i -le $N ]; do
    inst_start "view$i" env port=0 TETRIS_MAX_BODY_BYTES=8388608 "$BIN/tetris-agent" exec \
        --store "$STORE" --model "$MODEL" -- "$PY" "$FN"
    grep 'prog=tetris-python-function' "$WORK/view$i.log" | grep -q 'event=serving.* mode=view' ||
        fail "instance $i: not serving a view"
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
    [ "$r" -gt 0 ] || fail "instance $p computes on no store page"
    [ $((s * N)) -le $((r + r / 10)) ] ||
        fail "instance $p: store PSS $s kB of RSS $r kB: the pages are not shared by the $N instances"
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

url="http://127.0.0.1:$INST_PORT"
[ "$(http_status GET "$url/v2/models/$NAME")" = 200 ] || fail "model metadata: $(cat "$WORK/http.body")"
jq -e '.inputs == [{"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]}] and
       .outputs == [{"name": "logits", "datatype": "FP32", "shape": [-1, 2]}]' "$WORK/http.body" >/dev/null ||
    fail "model metadata: $(cat "$WORK/http.body")"
bad_requests "$url" "$NAME" "$WORK/req.1.json"
jq '.inputs[0].data[0] = 30522' "$WORK/req.1.json" >"$WORK/r.vocab"
[ "$(http_status POST "$url/v2/models/$NAME/infer" "$WORK/r.vocab")" = 400 ] || fail "token id 30522: not 400"
jq '.inputs[0].shape = [1, 513] | .inputs[0].data = [range(513) | 1]' "$WORK/req.1.json" >"$WORK/r.long"
[ "$(http_status POST "$url/v2/models/$NAME/infer" "$WORK/r.long")" = 400 ] || fail "513 tokens: not 400"
got=$(oip_sha "$url" "$NAME" "$WORK/req.$N.json" "$WORK/again.resp")
[ "$got" = "$(cat "$WORK/want.$N")" ] || fail "outputs changed after bad requests"
note "metadata right, bad requests answered 4xx with an error, still serving the same outputs"

# ---- views it must refuse ----
view=$(sed -n 's/.*prog=tetris-agent event=view dir="\{0,1\}\([^" ]*\).*/\1/p' "$WORK/view1.log" | head -n 1)
[ -f "$view/tensors.json" ] || fail "no view directory in the exec log ($view)"
rc=0
env BERT_ARCH=bert-base TETRIS_MODEL_VIEW="$view" port=0 "$PY" "$FN" 2>"$WORK/arch.err" || rc=$?
[ $rc -eq 3 ] && grep -q 'shape \[30522, 128\] in the weights, \[30522, 768\] in the module' "$WORK/arch.err" ||
    fail "a bert-tiny view for bert-base: exit $rc: $(cat "$WORK/arch.err")"
rc=0
"$BIN/tetris-agent" exec --store "$STORE" --model "$WORK/m/bert-tiny.onnx" -- "$PY" "$FN" 2>"$WORK/onnx-view.err" || rc=$?
[ $rc -eq 3 ] && grep -q "needs a view of the module's safetensors" "$WORK/onnx-view.err" ||
    fail "a view of the ONNX model: exit $rc: $(cat "$WORK/onnx-view.err")"
# (every kind of untrusted view: test-python-view.sh, through the same
# tetris.open_view; here the function's handling of one)
bad_views "$view" "$STORE" "$WORK/bad"
rc=0
env TETRIS_MODEL_VIEW="$WORK/bad/truncated" port=0 "$PY" "$FN" 2>"$WORK/bad.err" || rc=$?
[ $rc -eq 3 ] && grep -q 'event=untrusted-view.*shorter than' "$WORK/bad.err" ||
    fail "a truncated tensor file: exit $rc: $(cat "$WORK/bad.err")"
note "another architecture, the ONNX model's view and an untrusted view refused with exit 3"

for p in $launchers; do kill -TERM "$p"; done
for p in $launchers; do wait "$p" || fail "tetris-agent exec $p: exit status $? after SIGTERM"; done
reclaimer_stop
echo "ok PyTorch: $N BERT-tiny instances share $skb kB of weights: $total_kb kB against $private_kb kB private"
