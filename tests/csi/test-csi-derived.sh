#!/bin/sh
# A CSI volume that carries the store's derived form of its model's graph
# (volumeAttributes derived and runtime), read by tetris-function as a
# function pod of the CSI way does:
#   - derived=use with the runtime the form was made by: the view names the
#     form (tensors.json "derived"); tetris-function opens it (ready line
#     derived=true) and answers OIP requests with stock ONNX Runtime's
#     outputs at its defaults (`all`, pre-packing), byte for byte, mapping
#     the form's data file from the volume;
#   - the volume's kept holder holds the form's two tensors too: a reclaim
#     pass with no keep-alive frees nothing the volume shows; unpublishing
#     lets the next pass free the form;
#   - derived=auto without a form: the volume is the plain one and the
#     daemon makes the form in the background; the next volume carries it;
#   - a form of another runtime (a copy of the view saying so) is not
#     opened: one event=view-derived-mismatch line, the plain graph's
#     answers;
#   - a volume for onnxruntime-node (the daemon derives with its library,
#     --derive-runtimes): the Node.js function opens the form and answers
#     as stock onnxruntime-node at its defaults;
#   - bad attributes (make, no runtime, an unknown mode) are refused with
#     INVALID_ARGUMENT and leave nothing behind; a runtime with no form
#     gives the plain view.
# Needs root (mounts).
# shellcheck disable=SC2154 # FN_PID_* and FN_URL_*: fn_start's, by eval
set -eu
. "$(dirname "$0")/../lib/csi.sh"
. "$ROOT/tests/lib/function.sh"
. "$ROOT/tests/langs/lib.sh"

# tetris-derive runs as nobody: the store's parents must let it through.
chmod 0711 "$WORK"
cp "$MODELS/ch_PP-OCRv4_rec_infer.onnx" "$MODELS_DIR/ocr.onnx"
cp "$MODELS/ch_PP-OCRv4_det_infer.onnx" "$MODELS_DIR/det.onnx"
"$BIN/tetris-onnx-run" "$MODELS_DIR/ocr.onnx" --private --graph-opt all --prepack --seed 5 \
    --oip-request "$WORK/req.json" 2>"$WORK/stock.log" | jq -r .sha256 >"$WORK/stock" ||
    fail "tetris-onnx-run, stock"
"$BIN/tetris-onnx-run" "$MODELS_DIR/ocr.onnx" --private --seed 5 2>>"$WORK/stock.log" |
    jq -r .sha256 >"$WORK/plain" || fail "tetris-onnx-run, plain"
cmp -s "$WORK/stock" "$WORK/plain" && fail "stock's and the plain graph's outputs are the same: the test cannot tell them apart"

reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600
csi_start --registry-dir ""
# The form, made once by the node daemon for this ONNX Runtime.
"$BIN/tetris-onnx-run" "$MODELS_DIR/ocr.onnx" --store "$STORE" --derived make >/dev/null 2>"$WORK/make.log" ||
    fail "--derived make: $(tail -n 3 "$WORK/make.log")"
grep -q 'event=derive-requested .*result=made' "$WORK/make.log" || fail "no form made: $(cat "$WORK/make.log")"
runtime=$(sed -n 's/.*event=derive-requested .*runtime="\([^"]*\)".*/\1/p' "$WORK/make.log" | head -n 1)
[ -n "$runtime" ] || fail "no runtime in $(cat "$WORK/make.log")"

# ---- bad attributes: refused, nothing left ----
for i in 1 2 3 4 5; do mkdir -p "$PODS/uid-$i/volumes"; done
refused INVALID_ARGUMENT "derived=make" publish vol-1 1 ocr.onnx ns sa derived=make "runtime=$runtime"
refused INVALID_ARGUMENT "derived=use without runtime" publish vol-1 1 ocr.onnx ns sa derived=use
refused INVALID_ARGUMENT "derived=sometimes" publish vol-1 1 ocr.onnx ns sa derived=sometimes "runtime=$runtime"
refused INVALID_ARGUMENT "a runtime that is no name" publish vol-1 1 ocr.onnx ns sa derived=use "runtime=a/b"
echo "ok bad derived attributes: INVALID_ARGUMENT, nothing left"

# ---- derived=use: the view carries the form ----
publish vol-1 1 ocr.onnx ns sa derived=use "runtime=$runtime"
want OK "publish with derived=use"
v1="$PODS/uid-1/volumes/model"
jq -e --arg r "$runtime" '.derived.runtime == $r and .derived.graph != null' "$v1/tensors.json" >/dev/null ||
    fail "the view carries no form: $(jq -c .derived "$v1/tensors.json")"
data=$(jq -r .derived.data.file "$v1/tensors.json")
[ -f "$v1/$data" ] || fail "the form's data file $data is not in the volume"
n_model=$(jq '[.tensors[] | select(.shared) | .file] | unique | length' "$v1/tensors.json")
keep=$(find "$STORE/private/holders" -name 'csi-*.keep')
n_kept=$(grep -cE '^[0-9a-f]{64} [0-9]+$' "$keep" || true)
[ "$n_kept" = $((n_model + 2)) ] || fail "the kept holder has $n_kept references for $n_model tensors and a form"
mv "$MODELS_DIR/ocr.onnx" "$MODELS_DIR/ocr.hidden" # the pod does not see the node's file

fn_start f1 --model-view "$v1"
jq -e '.mode == "view" and .derived == true' "$WORK/f1.ready" >/dev/null ||
    fail "not on the form: $(cat "$WORK/f1.ready")"
[ "$(oip_infer "$FN_URL_f1" ocr "$WORK/req.json" "" "$WORK/ans.1")" = 200 ] || fail "f1: $(head -c 300 "$WORK/ans.1")"
[ "$($OIP_TOOL hash "$WORK/ans.1")" = "$(cat "$WORK/stock")" ] || fail "f1 on the form: not stock ONNX Runtime's outputs"
grep -q "$v1/$data" "/proc/$FN_PID_f1/maps" || fail "f1 does not map the form's data file"
grep -q 'event=model-view-mapped .*derived=1' "$WORK/f1.log" || fail "no model-view-mapped derived=1 line"
echo "ok derived=use: tetris-function opens the form, stock's outputs byte for byte, its data file mapped from the volume"

# ---- the kept holder holds the form: a reclaim pass frees none of it ----
reclaimer_stop
"$BIN/tetris-reclaimer" --store "$STORE" --listen "" --keep-alive 0 --once >>"$WORK/once.log" 2>&1 ||
    fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
[ -f "$v1/$data" ] || fail "the reclaimer freed the form's data, which a volume holds"
jq -r '.tensors[] | select(.shared) | .file' "$v1/tensors.json" | while read -r f; do
    [ -f "$v1/$f" ] || fail "the reclaimer freed $f, which a volume holds"
done
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600
echo "ok a reclaim pass keeps the volume's form"

# ---- a form of another runtime is not opened ----
cp -a "$v1" "$WORK/copy"
jq '.derived.runtime = "onnxruntime 0.1.0"' "$v1/tensors.json" >"$WORK/copy/tensors.json"
fn_start f2 --model-view "$WORK/copy"
jq -e '.derived == false' "$WORK/f2.ready" >/dev/null || fail "a form of another runtime was opened: $(cat "$WORK/f2.ready")"
grep -q 'event=view-derived-mismatch .*reason="made by another runtime"' "$WORK/f2.log" || fail "no mismatch line: $(cat "$WORK/f2.log")"
[ "$(oip_infer "$FN_URL_f2" ocr "$WORK/req.json" "" "$WORK/ans.2")" = 200 ] || fail "f2: $(head -c 300 "$WORK/ans.2")"
[ "$($OIP_TOOL hash "$WORK/ans.2")" = "$(cat "$WORK/plain")" ] || fail "f2: not the plain graph's outputs"
echo "ok a form of another runtime: one mismatch line, the plain graph's outputs"

# ---- a runtime with no form: the plain view ----
publish vol-2 2 det.onnx ns sa derived=use "runtime=onnxruntime 0.1.0"
want OK "publish with a runtime that has no form"
jq -e '.derived == null' "$PODS/uid-2/volumes/model/tensors.json" >/dev/null || fail "a form for no runtime"

# ---- derived=auto: plain now, the form for the next volume ----
publish vol-3 3 det.onnx ns sa derived=auto "runtime=$runtime"
want OK "publish with derived=auto"
jq -e '.derived == null' "$PODS/uid-3/volumes/model/tensors.json" >/dev/null || fail "auto: a form before one was made"
wait_until 300 "grep -q 'event=derive-requested .*det.onnx.*wait=background result=made' '$WORK/csi.log'" ||
    fail "auto: the daemon made no form: $(grep -i derive "$WORK/csi.log" "$WORK/daemon.log" | tail -n 5)"
publish vol-4 4 det.onnx ns sa derived=auto "runtime=$runtime"
want OK "publish with derived=auto, the form made"
jq -e --arg r "$runtime" '.derived.runtime == $r' "$PODS/uid-4/volumes/model/tensors.json" >/dev/null ||
    fail "auto: the next volume has no form"
echo "ok derived=auto: the plain view first, the daemon makes the form, the next volume carries it"

# ---- Node.js: onnxruntime-node on a volume with its runtime's form ----
# The daemon derives with onnxruntime-node's own library (a copy where
# only root may write, as the project image carries it).
need_node
lib=$(find "$NODE_PATH/onnxruntime-node/bin" -path '*/linux/x64/libonnxruntime.so.1' | head -n 1)
[ -f "$lib" ] || fail "no linux x64 libonnxruntime.so.1 in $NODE_PATH/onnxruntime-node"
mkdir -m 0755 "$WORK/runtimes"
cp "$lib" "$WORK/runtimes/"
node_runtime="onnxruntime $(node -e "process.stdout.write(require('onnxruntime-node').env.versions.node)")"
reclaimer_stop
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600 \
    --derive-runtimes "$WORK/runtimes/libonnxruntime.so.1"
cp "$MODELS/ch_PP-OCRv4_rec_infer.onnx" "$MODELS_DIR/ocrnode.onnx"
"$BIN/tetris-agent" view --store "$STORE" --derived make --runtime "$node_runtime" \
    "$MODELS_DIR/ocrnode.onnx" "$WORK/made-view" >"$WORK/made-view.json" 2>"$WORK/made-view.err" ||
    fail "view --derived make: $(cat "$WORK/made-view.err")"
[ "$(jq -r .derived "$WORK/made-view.json")" = "$node_runtime" ] || fail "no $node_runtime form: $(cat "$WORK/made-view.err")"
publish vol-5 5 ocrnode.onnx ns sa derived=use "runtime=$node_runtime"
want OK "publish with derived=use for onnxruntime-node"
v5="$PODS/uid-5/volumes/model"
jq -e --arg r "$node_runtime" '.derived.runtime == $r' "$v5/tensors.json" >/dev/null ||
    fail "the Node.js volume carries no form: $(jq -c .derived "$v5/tensors.json")"
stock_node=$(node "$ROOT/tests/langs/node_stock.js" "$MODELS_DIR/ocrnode.onnx" "$WORK/req.json") ||
    fail "stock onnxruntime-node failed"
serve_start "$WORK/node" env TETRIS_MODEL_VIEW="$v5" port=0 node "$ROOT/function/node/index.js" ||
    fail "the Node.js function: $SERVE_ERROR"
KILL_ON_EXIT="$KILL_ON_EXIT $SERVE_LAUNCHER"
grep -q 'prog=tetris-node-function event=serving .* derived=true' "$WORK/node.log" ||
    fail "the Node.js function is not on the form: $(grep event=serving "$WORK/node.log")"
got=$(oip_answer "http://127.0.0.1:$SERVE_PORT" ocrnode "$WORK/req.json" "$WORK/node.resp") ||
    fail "the Node.js function's answer"
[ "$got" = "$stock_node" ] || fail "the Node.js function answers $got, stock onnxruntime-node $stock_node"
kill "$SERVE_LAUNCHER"
wait "$SERVE_LAUNCHER" 2>/dev/null || true
echo "ok onnxruntime-node on a volume with its runtime's form: stock onnxruntime-node's answers"

# ---- unpublish: the next pass frees the forms ----
kill "$FN_PID_f1" "$FN_PID_f2"
wait "$FN_PID_f1" "$FN_PID_f2" 2>/dev/null || true
for i in 1 2 3 4 5; do
    csi unpublish "vol-$i" "$PODS/uid-$i/volumes/model"
    want OK "unpublish vol-$i"
done
[ "$(keeps)" = 0 ] || fail "a kept holder is left"
reclaimer_stop
"$BIN/tetris-reclaimer" --store "$STORE" --listen "" --keep-alive 0 --once >>"$WORK/once.log" 2>&1 ||
    fail "reclaimer --once: $(tail -n 3 "$WORK/once.log")"
[ -e "$STORE/public/$data" ] && fail "the form's data is still there once no volume holds it"
echo "ok unpublished: a reclaim pass frees the forms"
