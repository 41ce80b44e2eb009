#!/bin/sh
# Manifests work from any working directory: `index` records every source
# (external data files included) as an absolute path with symlinks
# resolved; a manifest whose sources are relative resolves them against
# its own directory, so it can move along with its model.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
A="$BIN/tetris-agent"
mkdir -p "$WORK/models" "$WORK/elsewhere" "$WORK/moved" "$WORK/store"
"$BIN/tetris-test-externalize" "$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx" \
    "$WORK/models/cls.onnx" >/dev/null || fail "cannot externalize the model"
ln -s models "$WORK/via-link"
real=$(cd "$WORK/models" && pwd -P)

# Index by a relative path through a symlinked directory.
(cd "$WORK" && "$A" index via-link/cls.onnx -o m.json) 2>"$WORK/err" ||
    fail "index: $(cat "$WORK/err")"
jq -e --arg d "$real" '.model == $d + "/cls.onnx" and
    ([.tensors[].source] | unique | sort) == ([$d + "/cls.onnx", $d + "/cls.onnx.data"] | sort)' \
    "$WORK/m.json" >/dev/null || fail "sources are not absolute real paths: $(jq -c '[.model, ([.tensors[].source] | unique)]' "$WORK/m.json")"
want=$("$A" load --private "$WORK/models/cls.onnx" 2>/dev/null | jq -r .bytes)
out=$(cd "$WORK/elsewhere" && "$A" load --private --manifest ../m.json "$WORK/models/cls.onnx" 2>"$WORK/err") ||
    fail "load with the manifest from elsewhere: $(cat "$WORK/err")"
[ "$(json_get "$out" bytes)" = "$want" ] || fail "manifest load read $(json_get "$out" bytes) bytes, want $want"
echo "ok index writes absolute sources; the manifest loads from another directory"

# Relative sources, next to the model: resolved against the manifest's
# directory wherever the reader runs, also after moving both together.
jq '.model = "cls.onnx" | .tensors[].source |= sub(".*/"; "")' "$WORK/m.json" \
    >"$WORK/models/rel.json"
for dir in models moved; do
    [ $dir = moved ] && cp "$WORK/models/cls.onnx" "$WORK/models/cls.onnx.data" \
        "$WORK/models/rel.json" "$WORK/moved/"
    out=$(cd / && "$A" load --private --manifest "$WORK/$dir/rel.json" cls.onnx 2>"$WORK/err") ||
        fail "relative manifest in $dir: $(cat "$WORK/err")"
    [ "$(json_get "$out" bytes)" = "$want" ] || fail "relative manifest in $dir: wrong bytes"
    grep -q "model=$WORK/$dir/cls.onnx" "$WORK/err" || fail "relative manifest in $dir: model path not resolved: $(cat "$WORK/err")"
done
# Through the store too: the daemonless direct mode publishes from the
# resolved sources.
out=$(cd / && "$A" load --store "$WORK/store" --direct --manifest "$WORK/moved/rel.json" cls.onnx 2>"$WORK/err") ||
    fail "direct load with a relative manifest: $(cat "$WORK/err")"
[ "$(json_get "$out" ingested_bytes)" -gt 0 ] || fail "direct load ingested nothing: $out"
rm "$WORK/moved/cls.onnx.data"
rc=0
(cd / && "$A" load --private --manifest "$WORK/moved/rel.json" cls.onnx) >/dev/null 2>"$WORK/err" || rc=$?
[ $rc -ne 0 ] || fail "a manifest whose source is gone loaded"
grep -q "$WORK/moved/cls.onnx.data" "$WORK/err" || fail "the error does not name the missing source: $(cat "$WORK/err")"
echo "ok relative sources resolve against the manifest's directory, also after a move"
