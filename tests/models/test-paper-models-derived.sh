#!/bin/sh
# test-paper-models-derived.sh - slow tier: the paper's models (BERT-base,
# ResNet-152, VGG19: real architectures, random weights, from
# scripts/models/paper-models.sh) on their derived forms compute exactly
# what stock ONNX Runtime computes at its defaults (optimisation `all`,
# pre-packing on), byte for byte: the node daemon makes each form once
# (tetris-derive), an instance opens it with optimisation off and
# pre-packing on, its packs mapped from the store. Exports the models the
# first time (minutes, PyTorch); SKIPs only without PyTorch.
set -eu
. "$(dirname "$0")/../lib/common.sh"
release_only tetris-onnx-run "runs models of 230 to 550 MB several times"
[ -x "$BIN/tetris-derive" ] || fail "tetris-derive not built in $BIN"
STORE="$WORK/store"
mkdir "$STORE"
# The derivation child (uid 65534) reads the store's public directory by
# its name, as on a node, where the store's parents are 0755.
chmod 0711 "$WORK"
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600

for name in bert-base resnet152 vgg19; do
    paper_model "$name"
    model="$PAPER_MODEL_DIR/$name.onnx"
    dim=""
    [ "$name" != bert-base ] || dim="--dim 16"
    # shellcheck disable=SC2086
    "$BIN/tetris-onnx-run" "$model" --private --graph-opt all --prepack $dim \
        >"$WORK/$name.stock.json" 2>>"$WORK/run.log" || fail "$name: stock session"
    # shellcheck disable=SC2086
    "$BIN/tetris-onnx-run" "$model" --store "$STORE" --derived make $dim \
        >/dev/null 2>"$WORK/$name.make.log" || fail "$name: --derived make: $(tail -n 2 "$WORK/$name.make.log")"
    grep -q 'event=derive-requested .*result=made' "$WORK/$name.make.log" ||
        fail "$name: no form made: $(grep -i derive "$WORK/$name.make.log" "$WORK/daemon.log" | tail -n 3)"
    # shellcheck disable=SC2086
    "$BIN/tetris-onnx-run" "$model" --store "$STORE" --derived use $dim \
        >"$WORK/$name.derived.json" 2>>"$WORK/run.log" || fail "$name: a session on the form"
    jq -e '.derived == true and .fell_back == false' "$WORK/$name.derived.json" >/dev/null ||
        fail "$name: not on the form: $(cat "$WORK/$name.derived.json")"
    want=$(jq -r .sha256 "$WORK/$name.stock.json")
    [ "$(jq -r .sha256 "$WORK/$name.derived.json")" = "$want" ] ||
        fail "$name: the form's outputs differ from stock ONNX Runtime's at all with pre-packing"
    echo "ok $name: the derived form's outputs are stock ONNX Runtime's ($want)"
done
