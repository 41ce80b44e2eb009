#!/bin/sh
# The Open Inference Protocol end to end, for every real model in
# .deps/models, with the weights private and mapped from the store through
# the real node daemon:
# - GET /v2/models/NAME says what the model takes: the names, datatypes and
#   ranks of the inputs tetris-onnx-run builds, each dimension -1 or the
#   size it ran with; the outputs an answer carries;
# - the inputs tetris-onnx-run --seed N writes (--oip-request), sent as JSON
#   and as binary tensor data with binary outputs, come back as outputs
#   whose bytes hash to tetris-onnx-run's sha256;
# - picking outputs answers just those, each in JSON or binary as asked,
#   with the same bytes;
# and for every datatype (an Identity model of each, BYTES included) the
# values sent come back unchanged, in JSON and in binary.
set -eu
. "$(dirname "$0")/../lib/function.sh"
store="$WORK/store"
mkdir -p "$store"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
seed=7

# check_metadata NAME URL REQUEST: the metadata against the request
# tetris-onnx-run wrote (inputs) and an answer (outputs, in $WORK/oip.out).
check_metadata() {
    curl -s -o "$WORK/meta.json" -w '%{http_code}' "$2/v2/models/$1" >"$WORK/meta.status"
    [ "$(cat "$WORK/meta.status")" = 200 ] || fail "$1: metadata: $(cat "$WORK/meta.json")"
    jq -e --arg n "$1" '.name == $n and .platform == "onnx_onnxv1" and (has("versions") | not)' \
        "$WORK/meta.json" >/dev/null || fail "$1: metadata header: $(cat "$WORK/meta.json")"
    jq -n -e --slurpfile m "$WORK/meta.json" --slurpfile r "$3" '
        def fits($spec; $t): $spec.name == $t.name and $spec.datatype == $t.datatype
            and ($spec.shape | length) == ($t.shape | length)
            and all(range(0; $spec.shape | length); $spec.shape[.] == -1 or $spec.shape[.] == $t.shape[.]);
        ($m[0].inputs | length) == ($r[0].inputs | length)
        and all(range(0; $r[0].inputs | length); fits($m[0].inputs[.]; $r[0].inputs[.]))' \
        >/dev/null || fail "$1: metadata inputs $(jq -c .inputs "$WORK/meta.json") do not fit the request"
}

check_outputs_fit() { # NAME: the JSON answer in $WORK/oip.out against the metadata
    jq -n -e --slurpfile m "$WORK/meta.json" --slurpfile a "$WORK/oip.out" '
        ($m[0].outputs | length) == ($a[0].outputs | length)
        and all(range(0; $a[0].outputs | length); . as $i | $m[0].outputs[$i] as $s | $a[0].outputs[$i] as $t
            | $s.name == $t.name and $s.datatype == $t.datatype and ($s.shape | length) == ($t.shape | length)
            and all(range(0; $s.shape | length); $s.shape[.] == -1 or $s.shape[.] == $t.shape[.]))' \
        >/dev/null || fail "$1: outputs $(jq -c '[.outputs[] | {name, datatype, shape}]' "$WORK/oip.out") do not fit the metadata"
}

# pick NAME URL: ask for each output alone (the first in binary, the others
# in JSON); its bytes equal that output's in the full answer.
pick() {
    $OIP_TOOL tensors "$WORK/oip.out" >"$WORK/all.tensors"
    i=0
    while read -r out dt shape sha; do
        binary=$([ $i = 0 ] && echo true || echo false)
        jq --arg o "$out" --argjson b "$binary" '.outputs = [{name: $o, parameters: {binary_data: $b}}]' \
            "$WORK/$1.req.json" >"$WORK/pick.json"
        st=$(oip_infer "$2" "$1" "$WORK/pick.json" "" "$WORK/pick.out")
        [ "$st" = 200 ] || fail "$1: picking $out: $st $(cat "$WORK/pick.out")"
        got=$($OIP_TOOL tensors "$WORK/pick.out" "$(cat "$WORK/pick.out.hl")")
        [ "$got" = "$out $dt $shape $sha" ] || fail "$1: picked $out: '$got', want '$out $dt $shape $sha'"
        if [ $i = 0 ]; then
            [ -n "$(cat "$WORK/pick.out.hl")" ] || fail "$1: $out asked in binary, answered without a header length"
        fi
        i=$((i + 1))
    done <"$WORK/all.tensors"
}

n_models=0
for model in "$MODELS"/*.onnx; do
    name=$(basename "$model" .onnx)
    want=$("$BIN/tetris-onnx-run" "$model" --private --seed $seed --oip-request "$WORK/$name.req.json" \
        2>"$WORK/onnx-run.log" | jq -r .sha256)
    [ -n "$want" ] || fail "$name: tetris-onnx-run gave no hash: $(cat "$WORK/onnx-run.log")"
    hl=$($OIP_TOOL binary "$WORK/$name.req.json" "$WORK/$name.req.bin" --binary-outputs)
    for mode in private store; do
        if [ $mode = private ]; then
            fn_start fn --model "$model" --private
        else
            fn_start fn --model "$model" --store "$store"
            jq -e '.mode == "store" and .fell_back == false' "$WORK/fn.ready" >/dev/null ||
                fail "$name: not served from the store: $(cat "$WORK/fn.ready")"
        fi
        url=$FN_URL_fn
        check_metadata "$name" "$url" "$WORK/$name.req.json"

        st=$(oip_infer "$url" "$name" "$WORK/$name.req.json")
        [ "$st" = 200 ] || fail "$name $mode JSON: $st $(head -c 300 "$WORK/oip.out")"
        [ ! -s "$WORK/oip.out.hl" ] || fail "$name $mode: a JSON answer with a header length"
        grep -qi '^content-type: application/json' "$WORK/oip.out.headers" || fail "$name: JSON answer's type"
        jq -e '.model_name == "'"$name"'" and .id == "seed-'$seed'" and (has("model_version") | not)' \
            "$WORK/oip.out" >/dev/null || fail "$name: answer header: $(head -c 200 "$WORK/oip.out")"
        check_outputs_fit "$name"
        got=$($OIP_TOOL hash "$WORK/oip.out")
        [ "$got" = "$want" ] || fail "$name $mode JSON: outputs hash to $got, tetris-onnx-run $want"
        [ $mode = store ] || pick "$name" "$url"

        st=$(oip_infer "$url" "$name" "$WORK/$name.req.bin" "$hl")
        [ "$st" = 200 ] || fail "$name $mode binary: $st $(head -c 300 "$WORK/oip.out")"
        grep -qi '^content-type: application/octet-stream' "$WORK/oip.out.headers" ||
            fail "$name: binary answer's type"
        got=$($OIP_TOOL hash "$WORK/oip.out" "$(cat "$WORK/oip.out.hl")")
        [ "$got" = "$want" ] || fail "$name $mode binary: outputs hash to $got, tetris-onnx-run $want"

        kill -TERM "$FN_PID_fn"
        wait "$FN_PID_fn" || fail "$name: exit status $? after SIGTERM"
    done
    n_models=$((n_models + 1))
    echo "ok $name: metadata fits, JSON and binary answers hash to tetris-onnx-run's, private and store"
done
[ $n_models -ge 9 ] || fail "only $n_models real models"

# One model's metadata in full, as ONNX Runtime describes it.
fn_start fn --model "$MODELS/silero_vad_v5.onnx" --private --name vad --model-version 5
curl -s "$FN_URL_fn/v2/models/vad/versions/5" >"$WORK/meta.json"
[ "$(jq -c . "$WORK/meta.json")" = '{"name":"vad","versions":["5"],"platform":"onnx_onnxv1","inputs":[{"name":"input","datatype":"FP32","shape":[-1,-1]},{"name":"state","datatype":"FP32","shape":[2,-1,128]},{"name":"sr","datatype":"INT64","shape":[]}],"outputs":[{"name":"output","datatype":"FP32","shape":[-1,1]},{"name":"stateN","datatype":"FP32","shape":[-1,-1,-1]}]}' ] ||
    fail "silero_vad_v5 metadata: $(cat "$WORK/meta.json")"
st=$(curl -s -o "$WORK/v.out" -w '%{http_code}' --data-binary @"$WORK/silero_vad_v5.req.json" \
    "$FN_URL_fn/v2/models/vad/versions/5/infer")
[ "$st" = 200 ] && jq -e '.model_name == "vad" and .model_version == "5"' "$WORK/v.out" >/dev/null ||
    fail "versioned infer: $st $(head -c 200 "$WORK/v.out")"
for path in /v2 /v2/; do
    curl -s "$FN_URL_fn$path" | jq -e '.name == "tetris-function" and (.version | length > 0)
        and .extensions == ["binary_tensor_data"]' >/dev/null || fail "GET $path: server metadata"
done
[ "$(curl -s "$FN_URL_fn/v2/health/live")" = '{"live":true}' ] || fail "live"
[ "$(curl -s "$FN_URL_fn/v2/health/ready")" = '{"ready":true}' ] || fail "ready"
[ "$(curl -s "$FN_URL_fn/v2/models/vad/ready")" = '{"name":"vad","ready":true}' ] || fail "model ready"
[ "$(curl -s "$FN_URL_fn/v2/models/vad/versions/5/ready")" = '{"name":"vad","ready":true}' ] ||
    fail "versioned model ready"
kill -TERM "$FN_PID_fn"
wait "$FN_PID_fn" || fail "exit status $? after SIGTERM"
echo "ok metadata in full, versions, server metadata, health"

# Every datatype: what goes in comes out, in JSON and in binary, batched.
"$BIN/tetris-test-oip-model" "$WORK" || fail "cannot write the identity models"
cat >"$WORK/every.json" <<'EOF'
{"id": "every", "inputs": [
 {"name": "in_BOOL", "datatype": "BOOL", "shape": [2, 2], "data": [[true, false], [false, true]]},
 {"name": "in_UINT8", "datatype": "UINT8", "shape": [2, 2], "data": [0, 1, 254, 255]},
 {"name": "in_UINT16", "datatype": "UINT16", "shape": [2, 2], "data": [0, 1, 65534, 65535]},
 {"name": "in_UINT32", "datatype": "UINT32", "shape": [2, 2], "data": [0, 1, 4294967294, 4294967295]},
 {"name": "in_UINT64", "datatype": "UINT64", "shape": [2, 2], "data": [0, 1, 18446744073709551614, 18446744073709551615]},
 {"name": "in_INT8", "datatype": "INT8", "shape": [2, 2], "data": [-128, -1, 0, 127]},
 {"name": "in_INT16", "datatype": "INT16", "shape": [2, 2], "data": [-32768, -1, 0, 32767]},
 {"name": "in_INT32", "datatype": "INT32", "shape": [2, 2], "data": [-2147483648, -1, 0, 2147483647]},
 {"name": "in_INT64", "datatype": "INT64", "shape": [2, 2], "data": [-9223372036854775808, -1, 0, 9223372036854775807]},
 {"name": "in_FP16", "datatype": "FP16", "shape": [2, 2], "data": [65504, -5.96046448e-08, 0.099975586, -0.0]},
 {"name": "in_FP32", "datatype": "FP32", "shape": [2, 2], "data": [3.40282347e+38, -1.40129846e-45, 0.1, -0.0]},
 {"name": "in_FP64", "datatype": "FP64", "shape": [2, 2], "data": [1.7976931348623157e+308, 5e-324, 0.1, -0.0]},
 {"name": "in_BF16", "datatype": "BF16", "shape": [2, 2], "data": [3.38953139e+38, -9.18354962e-41, 1.5, -0.0]},
 {"name": "in_BYTES", "datatype": "BYTES", "shape": [2, 2], "data": [["caf\u00e9", ""], ["a\"b\\c\u0000d", "\u65e5\u672c"]]}
]}
EOF
fn_start id --model "$WORK/identity_all.onnx" --private
$OIP_TOOL tensors "$WORK/every.json" | sed 's/^in_/out_/' >"$WORK/every.want"
st=$(oip_infer "$FN_URL_id" identity_all "$WORK/every.json")
[ "$st" = 200 ] || fail "every datatype, JSON: $st $(cat "$WORK/oip.out")"
$OIP_TOOL tensors "$WORK/oip.out" >"$WORK/every.got"
cmp -s "$WORK/every.want" "$WORK/every.got" || fail "every datatype, JSON: $(diff "$WORK/every.want" "$WORK/every.got")"
hl=$($OIP_TOOL binary "$WORK/every.json" "$WORK/every.bin" --binary-outputs)
st=$(oip_infer "$FN_URL_id" identity_all "$WORK/every.bin" "$hl")
[ "$st" = 200 ] || fail "every datatype, binary: $st $(cat "$WORK/oip.out")"
$OIP_TOOL tensors "$WORK/oip.out" "$(cat "$WORK/oip.out.hl")" >"$WORK/every.got"
cmp -s "$WORK/every.want" "$WORK/every.got" || fail "every datatype, binary: $(diff "$WORK/every.want" "$WORK/every.got")"
echo "ok every datatype (BOOL..FP64, BF16, BYTES) comes back unchanged, JSON and binary"

# BYTES that are not UTF-8 travel in binary; JSON cannot carry them.
# (sed, not jq: jq 1.6 rounds 64-bit integers through doubles)
sed 's/^ {"name": "in_BYTES".*/ {"name": "in_BYTES", "datatype": "BYTES", "shape": [2, 2], "data": ["x", "y", "z", "w"]}/' \
    "$WORK/every.json" >"$WORK/bytes.json"
hl=$($OIP_TOOL binary "$WORK/bytes.json" "$WORK/bytes.bin")
printf '\377' | dd of="$WORK/bytes.bin" bs=1 seek=$(($(wc -c <"$WORK/bytes.bin") - 1)) conv=notrunc 2>/dev/null
st=$(oip_infer "$FN_URL_id" identity_all "$WORK/bytes.bin" "$hl")
[ "$st" = 400 ] && jq -e '.error | contains("out_BYTES") and contains("UTF-8")' "$WORK/oip.out" >/dev/null ||
    fail "non-UTF-8 BYTES in a JSON answer: $st $(cat "$WORK/oip.out")"
hl=$($OIP_TOOL binary "$WORK/bytes.json" "$WORK/bytes.bin" --binary-outputs)
printf '\377' | dd of="$WORK/bytes.bin" bs=1 seek=$(($(wc -c <"$WORK/bytes.bin") - 1)) conv=notrunc 2>/dev/null
st=$(oip_infer "$FN_URL_id" identity_all "$WORK/bytes.bin" "$hl")
[ "$st" = 200 ] || fail "non-UTF-8 BYTES in binary: $st $(cat "$WORK/oip.out")"
[ "$(tail -c 1 "$WORK/oip.out" | od -An -tx1 | tr -d ' ')" = ff ] || fail "non-UTF-8 BYTES changed"
kill -TERM "$FN_PID_id"
wait "$FN_PID_id" || fail "exit status $? after SIGTERM"
echo "ok BYTES that are not UTF-8: binary answer, or a 400 naming the output in JSON"
