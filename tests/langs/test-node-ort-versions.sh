#!/bin/sh
# test-node-ort-versions.sh - the Node.js example function on a model view
# the agent writes (`tetris-agent exec`, whose tensors/ links lead into the
# store) with onnxruntime-node 1.26.0 beside the build's 1.22.0: 1.24 to
# 1.27 refuse, by path, external data that resolves (links followed)
# outside the model's folder even with the view's folder entry set, so the
# function opens a view's graph from its bytes. With each release the
# function serves the view, answers OIP requests with exactly
# `tetris-onnx-run --private`'s outputs, and maps the store's files (the
# weights stay shared).
set -eu
. "$(dirname "$0")/lib.sh"
need_models
need_node
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"
ORT_126="$ROOT/.deps/node_modules/onnxruntime-node-1.26"
[ -d "$ORT_126" ] || fail "onnxruntime-node 1.26 is not installed as onnxruntime-node-1.26 (scripts/deps.sh)"

MODEL="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
NAME=ch_PP-OCRv4_rec_infer
FN="$ROOT/function/node/index.js"
STORE="$WORK/store"
mkdir "$STORE"
"$BIN/tetris-onnx-run" "$MODEL" --private --seed 3 --oip-request "$WORK/req.json" >"$WORK/want.json" \
    2>"$WORK/onnx-run.log" || fail "tetris-onnx-run --private"
want="$(jq -r .sha256 "$WORK/want.json") $(jq -r .output_bytes "$WORK/want.json")"
# A module path where onnxruntime-node is 1.26 (first on NODE_PATH).
mkdir -p "$WORK/ort-1.26/node_modules"
ln -s "$ORT_126" "$WORK/ort-1.26/node_modules/onnxruntime-node"

reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600
for version in 1.22.0 1.26.0; do
    case $version in
    1.26.0) path="$WORK/ort-1.26/node_modules:$NODE_PATH" ;;
    *) path="$NODE_PATH" ;;
    esac
    inst_start "v$version" env NODE_PATH="$path" port=0 "$BIN/tetris-agent" exec --store "$STORE" \
        --model "$MODEL" -- node "$FN"
    grep 'prog=tetris-node-function' "$WORK/v$version.log" |
        grep -q "event=serving.* mode=view .*ort=$version" ||
        fail "$version: not serving the view: $(grep 'prog=tetris-node-function' "$WORK/v$version.log")"
    got=$(oip_sha "http://127.0.0.1:$INST_PORT" "$NAME" "$WORK/req.json" "$WORK/v$version.resp")
    [ "$got" = "$want" ] || fail "$version: outputs $got, tetris-onnx-run --private gives $want"
    mapped=$(grep -c "$STORE/public/tensors/" "/proc/$INST_PID/maps" || true)
    [ "$mapped" -gt 0 ] || fail "$version: the function maps none of the store's files"
    kill -TERM "$INST_LAUNCHER"
    wait "$INST_LAUNCHER" || fail "$version: exec exited $? after SIGTERM"
    note "onnxruntime-node $version: serves the agent's view, outputs equal tetris-onnx-run --private's, $mapped store mappings"
done
echo "ok the Node.js function serves an agent's model view on onnxruntime-node 1.22.0 and 1.26.0"
