#!/bin/sh
# test-oip-codecs.sh - the Open Inference Protocol codecs of the Node.js
# function (function/node/oip.js) and the Python package
# (python/tetris/oip.py) decode every numeric datatype to exactly the
# little-endian bytes protocol/oip.h specifies (64-bit extremes given as
# decimal strings, FP16 rounded, NaN and infinities as strings, nested
# data), encode them back so that they decode to the same bytes, and
# refuse every malformed request with a 400 naming the problem.
set -eu
. "$(dirname "$0")/lib.sh"
need_numpy
command -v node >/dev/null 2>&1 || fail "node is not installed (scripts/deps.sh installs nodejs)"
D="$ROOT/tests/langs"
SIG="$D/oip/signature.json"
REQ="$D/oip/all-types.json"

for lang in node python; do
    case $lang in
    node) check() { node "$D/codec_check.js" "$@"; } ;;
    python) check() { "$PY" "$D/codec_check.py" "$@"; } ;;
    esac
    check decode "$SIG" "$REQ" >"$WORK/$lang.hex" || fail "$lang: decode: $(cat "$WORK/$lang.hex")"
    diff "$D/oip/all-types.hex" "$WORK/$lang.hex" >"$WORK/$lang.diff" ||
        fail "$lang: decoded bytes differ from protocol/oip.h's: $(cat "$WORK/$lang.diff")"
    # encoded back as a response, read as a request by Python's decoder
    # (not through jq: it would round 64-bit integers to doubles)
    check encode "$SIG" "$REQ" | sed 's/"outputs":/"inputs":/' >"$WORK/$lang.again.json" ||
        fail "$lang: encode"
    "$PY" "$D/codec_check.py" decode "$SIG" "$WORK/$lang.again.json" | diff "$D/oip/all-types.hex" - >/dev/null ||
        fail "$lang: its encoding does not decode to the same bytes: $(head -c 400 "$WORK/$lang.again.json")"
done
note "every numeric datatype decodes to protocol/oip.h's bytes and encodes back exactly, in both"

# bad CASE JQ-FILTER MESSAGE: the request after FILTER is refused by both
n=0
bad() {
    jq "$2" "$REQ" >"$WORK/bad.json" 2>/dev/null || printf '%s' "$2" >"$WORK/bad.json"
    for lang in node python; do
        rc=0
        case $lang in
        node) node "$D/codec_check.js" decode "$SIG" "$WORK/bad.json" >"$WORK/out" 2>&1 || rc=$? ;;
        python) "$PY" "$D/codec_check.py" decode "$SIG" "$WORK/bad.json" >"$WORK/out" 2>&1 || rc=$? ;;
        esac
        [ $rc -eq 1 ] && grep -q '^error 400 ' "$WORK/out" ||
            fail "$lang: $1: exit $rc, want a 400: $(cat "$WORK/out")"
        grep -qF -- "$3" "$WORK/out" || fail "$lang: $1: the message lacks \"$3\": $(cat "$WORK/out")"
    done
    n=$((n + 1))
}
at() { echo "(.inputs | map(.name) | index(\"$1\")) as \$i | .inputs[\$i]"; }
bad "UINT8 256" "$(at u8).data[1] = 256" "data[1]"
bad "INT8 -129" "$(at i8).data[0] = -129" "data[0]"
bad "UINT64 2^64" "$(at u64).data[0] = \"18446744073709551616\"" "data[0]"
bad "INT32 1.5" "$(at i32).data[0] = 1.5" "data[0]"
bad "BOOL 1" "$(at b).data[0] = 1" "boolean"
bad "FP32 a word" "$(at f32).data[0][0] = \"abc\"" "not a number"
bad "FP32 true" "$(at f32).data[0][0] = true" "not a number"
bad "too few elements" "$(at f32).shape = [3, 2]" "elements"
bad "fixed dimension" "$(at f64).shape = [2] | $(at f64).data = [1, 2]" "dimension 0 must be 1"
bad "negative dimension" "$(at f32).shape = [-1, 2]" "non-negative"
bad "wrong rank" "$(at f32).shape = [4]" "dimensions"
bad "wrong datatype" "$(at u8).datatype = \"INT8\"" "the model wants UINT8"
bad "input twice" ".inputs += [.inputs[0]]" "given twice"
bad "input missing" "del(.inputs[0])" "missing input"
bad "unknown input" ".inputs[0].name = \"nope\"" "no input of that name"
bad "data not an array" "$(at u8).data = 7" "\"data\" is not an array"
bad "inputs not an array" ".inputs = {}" "\"inputs\""
bad "id not a string" ".id = 7" "\"id\""
bad "unknown output" ".outputs = [{\"name\": \"nope\"}]" "no output"
bad "binary size past the body" "$(at u8).parameters = {\"binary_data_size\": 2} | $(at u8) |= del(.data)" "binary_data_size"
bad "not JSON" '{"inputs": [' "not JSON"
bad "not an object" '[1, 2]' "not a JSON object"
note "$n malformed requests refused with 400 by both"
echo "ok OIP codecs of the Node.js function and the Python package"
