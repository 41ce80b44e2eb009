#!/bin/sh
# Every malformed V2 request gets the right 4xx with {"error": ...} naming
# the problem, and the function keeps serving: after each one a good
# request is answered right. Wrong names, missing inputs, shapes (rank, a
# fixed dimension, negative, too many elements), datatypes, data too short
# or too long, values that are not numbers or out of range, NaN and
# infinities in binary data, binary_data_size against the shape and the
# body, Inference-Header-Content-Length against the body, deep nesting,
# malformed JSON, unknown outputs and fields, a body over --max-body-bytes
# (413), another model or version (404), a method the path does not take
# (405).
set -eu
. "$(dirname "$0")/../lib/function.sh"
model="$MODELS/silero_vad_v5.onnx"
name=silero_vad_v5
good="$WORK/good.json"
want=$("$BIN/tetris-onnx-run" "$model" --private --seed 3 --oip-request "$good" 2>"$WORK/onnx-run.log" |
    jq -r .sha256)
fn_start bad --model "$model" --private --max-body-bytes 65536
url=$FN_URL_bad
n400=0

still_serving() { # WHAT
    st=$(oip_infer "$url" $name "$good" "" "$WORK/good.out")
    [ "$st" = 200 ] && [ "$($OIP_TOOL hash "$WORK/good.out")" = "$want" ] ||
        fail "after $1: a good request got $st $(head -c 200 "$WORK/good.out")"
}

# bad STATUS PHRASE FILE [HEADER_LENGTH]: FILE is refused with STATUS and
# an error containing PHRASE; then a good request is answered.
bad() {
    st=$(oip_infer "$url" $name "$3" "${4:-}" "$WORK/bad.out")
    [ "$st" = "$1" ] || fail "$(basename "$3"): status $st, want $1: $(head -c 300 "$WORK/bad.out")"
    jq -e --arg p "$2" '.error | contains($p)' "$WORK/bad.out" >/dev/null ||
        fail "$(basename "$3"): error does not say '$2': $(head -c 300 "$WORK/bad.out")"
    [ "$1" != 400 ] || n400=$((n400 + 1))
    still_serving "$(basename "$3")"
}

edit() { # NAME JQ-FILTER: good.json through the filter into $WORK/NAME.json
    jq -c "$2" "$good" >"$WORK/$1.json"
    echo "$WORK/$1.json"
}

subst() { # NAME SED-EXPRESSION (jq 1.6 rounds 64-bit integers, so sed)
    sed "$2" "$good" >"$WORK/$1.json"
    cmp -s "$good" "$WORK/$1.json" && fail "$1: the edit changed nothing"
    echo "$WORK/$1.json"
}

still_serving "start"

bad 400 'no such input (it takes input, state, sr)' "$(edit name '.inputs[0].name = "nope"')"
# A long name is quoted cut, at a character's boundary (the answer is JSON).
bad 400 'input "€€€€€€€€€€€€€€€€€€€€€...": the model has no such input' \
    "$(edit long-name '.inputs[0].name = ("€" * 30)')"
bad 400 'input "sr" is missing' "$(edit missing 'del(.inputs[2])')"
bad 400 'given twice' "$(edit twice '.inputs[2] = .inputs[1]')"
bad 400 'has 3 dimensions, the model takes [-1,-1]' "$(edit rank '.inputs[0].shape = [1, 1, 256]')"
bad 400 'shape [3,1,128], the model takes [2,-1,128]' "$(edit fixed '.inputs[1].shape = [3, 1, 128]')"
bad 400 'shape dimension 0 is negative' "$(edit negative '.inputs[0].shape = [-1, 256]')"
bad 400 'too many elements' \
    "$(subst overflow 's/"shape":\[1,256\]/"shape":[4611686018427387904,4611686018427387904]/')"
bad 400 'datatype FP64, the model takes FP32' "$(edit datatype '.inputs[0].datatype = "FP64"')"
bad 400 'unknown datatype "FLOAT32"' "$(edit unknown-datatype '.inputs[0].datatype = "FLOAT32"')"
bad 400 'data has 255 elements, shape [1,256] holds 256' "$(edit short '.inputs[0].data |= .[1:]')"
bad 400 'data has 257 elements' "$(edit long '.inputs[0].data += [0.5]')"
bad 400 'element 5: FP32 takes numbers' "$(edit string '.inputs[0].data[5] = "0.5"')"
bad 400 'element 5: FP32 takes numbers' "$(edit null '.inputs[0].data[5] = null')"
bad 400 'element 0: 1e+39 is out of range for FP32' "$(edit huge '.inputs[0].data[0] = 1e39')"
bad 400 'is out of range for INT64' \
    "$(subst int-range 's/"name":"sr","datatype":"INT64","shape":\[\],"data":\[[0-9]*\]/"name":"sr","datatype":"INT64","shape":[],"data":[9223372036854775808]/')"
bad 400 'INT64 takes integers, not 1.5' "$(edit int-float '.inputs[2].data = [1.5]')"
bad 400 'nesting deeper than the limit' \
    "$(subst deep 's/"shape":\[\],"data":\[\([0-9]*\)\]/"shape":[],"data":[[[[[[[[[[[[[[[[[[[[\1]]]]]]]]]]]]]]]]]]]]/')"
bad 400 'nested deeper than its 0 dimensions' "$(edit nested '.inputs[2].data = [.inputs[2].data]')"
bad 400 'no such output' "$(edit output '.outputs = [{"name": "nope"}]')"
bad 400 'asked for twice' "$(edit output-twice '.outputs = [{"name": "output"}, {"name": "output"}]')"
bad 400 'unknown or repeated field "foo"' "$(edit field '.foo = 1')"
bad 400 'parameter "x" must be a string, number or boolean' "$(edit param '.parameters = {"x": [1]}')"
bad 400 'binary_data_output must be true or false' \
    "$(edit param-bool '.parameters = {"binary_data_output": "yes"}')"
bad 400 'id must be a string' "$(edit id '.id = 7')"
head -c 1000 "$good" >"$WORK/truncated.json"
bad 400 'JSON: ' "$WORK/truncated.json"
printf 'not json' >"$WORK/garbage.json"
bad 400 'the request must be a JSON object' "$WORK/garbage.json"
echo "ok JSON: 27 malformed requests each refused with 400 naming the problem, still serving"

# Binary data: sr (INT64, a scalar) as 8 bytes after the header.
jq -c '.inputs[2] |= (del(.data) | .parameters = {binary_data_size: 8})' "$good" >"$WORK/header.json"
hl=$(wc -c <"$WORK/header.json")
sr8=$(jq -r '.inputs[2].data[0]' "$good")
le64() { # N: N as 8 little-endian bytes
    /usr/bin/python3 -c 'import struct, sys; sys.stdout.buffer.write(struct.pack("<q", int(sys.argv[1])))' "$1"
}
{ cat "$WORK/header.json"; le64 "$sr8"; } >"$WORK/bin.ok"
st=$(oip_infer "$url" $name "$WORK/bin.ok" "$hl")
[ "$st" = 200 ] && [ "$($OIP_TOOL hash "$WORK/oip.out")" = "$want" ] ||
    fail "JSON inputs and one binary input: $st $(head -c 300 "$WORK/oip.out")"
sed 's/"binary_data_size":8/"binary_data_size":4/' "$WORK/header.json" >"$WORK/h4"
{ cat "$WORK/h4"; le64 "$sr8"; } >"$WORK/bin.size-shape"
bad 400 'binary_data_size 4, shape [] of INT64 takes 8 bytes' "$WORK/bin.size-shape" "$(wc -c <"$WORK/h4")"
sed 's/"binary_data_size":8/"binary_data_size":16/' "$WORK/header.json" >"$WORK/h16"
{ cat "$WORK/h16"; le64 "$sr8"; } >"$WORK/bin.size-body"
bad 400 'binary_data_size 16 is more than the 8 bytes left' "$WORK/bin.size-body" "$(wc -c <"$WORK/h16")"
{ cat "$WORK/header.json"; le64 "$sr8"; le64 "$sr8"; } >"$WORK/bin.left-over"
bad 400 'the body has 16 bytes after the JSON header' "$WORK/bin.left-over" "$hl"
bad 400 "Inference-Header-Content-Length $((hl + 9)) is more than the body's $((hl + 8)) bytes" \
    "$WORK/bin.ok" $((hl + 9))
bad 400 'Inference-Header-Content-Length "abc" is not a number' "$WORK/bin.ok" abc
bad 400 'Inference-Header-Content-Length "-5" is not a number' "$WORK/bin.ok" -5
bad 400 'JSON: ' "$WORK/bin.ok" 100
bad 400 'binary_data_size without the Inference-Header-Content-Length header' "$WORK/header.json"
# NaN and infinity in binary FP32 data (JSON has no way to say them).
bhl=$($OIP_TOOL binary "$good" "$WORK/all.bin")
cp "$WORK/all.bin" "$WORK/bin.nan"
printf '\000\000\300\177' | dd of="$WORK/bin.nan" bs=1 seek=$((bhl + 4 * 7)) conv=notrunc 2>/dev/null
bad 400 'input "input": element 7 is NaN or infinite' "$WORK/bin.nan" "$bhl"
cp "$WORK/all.bin" "$WORK/bin.inf"
printf '\000\000\200\377' | dd of="$WORK/bin.inf" bs=1 seek=$((bhl + 1024)) conv=notrunc 2>/dev/null
bad 400 'input "state": element 0 is NaN or infinite' "$WORK/bin.inf" "$bhl"
echo "ok binary data: 10 malformed requests each refused with 400 naming the problem, still serving"

# Larger than --max-body-bytes: 413 before it is read.
{ cat "$good"; head -c 70000 /dev/zero | tr '\0' ' '; } >"$WORK/big.json"
bad 413 'too large' "$WORK/big.json"

# Paths: another model or version, a method the path does not take.
path_is() { # METHOD PATH STATUS PHRASE
    st=$(curl -s -o "$WORK/path.out" -w '%{http_code}' -X "$1" --data-binary @"$good" "$url$2")
    [ "$st" = "$3" ] && jq -e --arg p "$4" '.error | contains($p)' "$WORK/path.out" >/dev/null ||
        fail "$1 $2: $st $(cat "$WORK/path.out"), want $3 '$4'"
    still_serving "$1 $2"
}
path_is POST /v2/models/nope/infer 404 'unknown model "nope" (this function serves "silero_vad_v5")'
path_is GET /v2/models/nope 404 'unknown model "nope"'
path_is GET /v2/models/%ff%fe 404 'unknown model "��" (this function'
path_is GET /v2/models/nope/ready 404 'unknown model "nope"'
path_is POST /v2/models/$name/versions/1/infer 404 'model "silero_vad_v5" has no versions'
path_is POST /v2/models/$name/predict 404 'no such path'
path_is POST /v2/models/$name/infer/x 404 'no such path'
path_is GET /v2/models/$name/infer 405 'method not allowed'
path_is POST /v2/models/$name 405 'method not allowed'
path_is PUT /v2/models/$name/infer 405 'method not allowed'
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url/v2/health/ready")" = 405 ] || fail "POST ready"
echo "ok paths: 404 for another model, version or verb, 405 for the wrong method"

[ "$(metric_at "$url" 'tetris_function_requests_total{code="400"}')" = $n400 ] ||
    fail "400s counted $(metric_at "$url" 'tetris_function_requests_total{code="400"}'), sent $n400"
kill -TERM "$FN_PID_bad"
wait "$FN_PID_bad" || fail "exit status $? after SIGTERM"

# A model whose inputs cannot be generated (strings) answers POST / with
# 400 and /v2 infers as usual; bad options are usage errors.
"$BIN/tetris-test-oip-model" "$WORK" || fail "cannot write the identity models"
fn_start id --model "$WORK/identity_all.onnx" --private
got=$(fn_post "$FN_URL_id" '{"seed":1}')
[ "${got%% *}" = 400 ] && printf '%s' "${got#* }" | jq -e '.error | contains("cannot be generated from a seed")' >/dev/null ||
    fail "POST / to a model with string inputs: $got"
kill -TERM "$FN_PID_id"
wait "$FN_PID_id" || fail "identity: exit status $? after SIGTERM"
[ "$(status "$BIN/tetris-function" --model "$model" --name 'a/b')" = 2 ] || fail "a name with / is not usage"
[ "$(status "$BIN/tetris-function" --model "$model" --model-version '')" = 2 ] || fail "an empty version"
[ "$(status "$BIN/tetris-function" --model "$model" --max-body-bytes 10)" = 2 ] || fail "a tiny body limit"
[ "$(status env TETRIS_MAX_BODY_BYTES=x "$BIN/tetris-function" --model "$model")" = 2 ] ||
    fail "TETRIS_MAX_BODY_BYTES=x"
grep -q TETRIS_MAX_BODY_BYTES "$WORK/status.err" || fail "the message does not name TETRIS_MAX_BODY_BYTES"
echo "ok 413 over the limit; POST / refuses string inputs; bad names and limits are usage errors"
