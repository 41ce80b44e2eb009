#!/bin/sh
# Batching serves real requests: with --batch 4, concurrent inference
# requests run together (the batch size histogram in /metrics shows batches
# of more than one) and each gets exactly what it gets alone:
# - the OCR det model (batchable): requests from tetris-onnx-run --seed N,
#   half JSON, half binary, and mixed with seeded POST / requests in the
#   same batches, hash to tetris-onnx-run's; requests whose images differ in
#   size cannot be concatenated and still each get their own answer;
# - every datatype (an Identity model): requests of 1 to 3 rows each get
#   their own rows back;
# - a model whose metadata looks batchable but whose output does not carry
#   the batch (flatten): the batch is split and each request runs alone;
# - silero-vad (not batchable): requests of a batch run one after the
#   other, each answered right.
set -eu
. "$(dirname "$0")/../lib/function.sh"
det="$MODELS/ch_PP-OCRv4_det_infer.onnx"

# burst URL NAME FILE...: POSTs every FILE at once (a FILE.hl next to it
# means binary), answers in FILE.out; every one must be 200.
burst() {
    _url=$1
    _name=$2
    shift 2
    _pids=""
    for _f in "$@"; do
        if [ -f "$_f.hl" ]; then
            oip_infer "$_url" "$_name" "$_f" "$(cat "$_f.hl")" "$_f.out" >"$_f.status" &
        else
            oip_infer "$_url" "$_name" "$_f" "" "$_f.out" >"$_f.status" &
        fi
        _pids="$_pids $!"
    done
    for _p in $_pids; do wait "$_p" || fail "a request of the burst failed"; done
    for _f in "$@"; do
        [ "$(cat "$_f.status")" = 200 ] || fail "$(basename "$_f"): $(cat "$_f.status") $(head -c 300 "$_f.out")"
    done
}

answer_hash() { # FILE: the hash of FILE.out's outputs
    $OIP_TOOL hash "$1.out" "$(cat "$1.out.hl")"
}

# Requests the same model can concatenate: seeds 100-107, even ones JSON,
# odd ones binary with binary outputs.
files=""
for s in $(seq 100 107); do
    "$BIN/tetris-onnx-run" "$det" --private --seed $s --oip-request "$WORK/det.$s.json" \
        2>"$WORK/onnx-run.log" | jq -r .sha256 >"$WORK/det.$s.want"
    f="$WORK/det.$s.json"
    if [ $((s % 2)) = 1 ]; then
        $OIP_TOOL binary "$f" "$WORK/det.$s.bin" --binary-outputs >"$WORK/det.$s.bin.hl"
        f="$WORK/det.$s.bin"
    fi
    files="$files $f"
done
# A long maximum wait so that a burst fills batches however slow the
# machine is; the test never looks at times.
fn_start det --model "$det" --private --batch 4 --concurrency 2 --max-wait-ms 3000
url=$FN_URL_det
# shellcheck disable=SC2086
burst "$url" ch_PP-OCRv4_det_infer $files
for s in $(seq 100 107); do
    f="$WORK/det.$s.json"
    [ $((s % 2)) = 1 ] && f="$WORK/det.$s.bin"
    [ "$(answer_hash "$f")" = "$(cat "$WORK/det.$s.want")" ] ||
        fail "det seed $s: batched answer differs from tetris-onnx-run"
done
count=$(metric_at "$url" tetris_function_batch_size_count)
singles=$(metric_at "$url" 'tetris_function_batch_size_bucket{le="1"}')
[ "$(metric_at "$url" tetris_function_batch_size_sum)" = 8 ] || fail "det: batch size sum, want 8"
[ "$singles" -lt "$count" ] || fail "det: only single-request batches ($count batches)"
echo "ok det: 8 concurrent V2 requests (JSON and binary) in $count batches, answers equal tetris-onnx-run"

# V2 and seeded requests in the same batches.
pids=""
for s in 100 101 102 103; do
    curl -s -o "$WORK/seed.$s" -w '%{http_code}' --data-binary "{\"seed\":$s}" "$url/" \
        >"$WORK/seed.$s.status" &
    pids="$pids $!"
done
burst "$url" ch_PP-OCRv4_det_infer "$WORK/det.104.json" "$WORK/det.105.bin" "$WORK/det.106.json" \
    "$WORK/det.107.bin"
for p in $pids; do wait "$p" || fail "curl failed"; done
for s in 100 101 102 103; do
    [ "$(cat "$WORK/seed.$s.status")" = 200 ] &&
        [ "$(jq -r .sha256 "$WORK/seed.$s")" = "$(cat "$WORK/det.$s.want")" ] ||
        fail "seed $s next to V2 requests: $(cat "$WORK/seed.$s")"
done
for f in "$WORK/det.104.json" "$WORK/det.106.json"; do
    [ "$(answer_hash "$f")" = "$(cat "${f%.json}.want")" ] || fail "$(basename "$f") next to seeded requests"
done
for s in 105 107; do
    [ "$(answer_hash "$WORK/det.$s.bin")" = "$(cat "$WORK/det.$s.want")" ] || fail "det $s next to seeded requests"
done
[ "$(metric_at "$url" tetris_function_batch_size_sum)" = 16 ] || fail "det: batch size sum, want 16"
echo "ok det: seeded and V2 requests batched together, each answer right"

# Images of different sizes: not concatenable, each answered alone.
files=""
for d in 64 96 128 64; do
    s=$((200 + d))
    "$BIN/tetris-onnx-run" "$det" --private --dim $d --seed $s --oip-request "$WORK/size.$d.$s.json" \
        2>"$WORK/onnx-run.log" | jq -r .sha256 >"$WORK/size.$d.$s.want"
    files="$files $WORK/size.$d.$s.json"
done
# shellcheck disable=SC2086
burst "$url" ch_PP-OCRv4_det_infer $files
for f in $files; do
    [ "$(answer_hash "$f")" = "$(cat "${f%.json}.want")" ] || fail "$(basename "$f"): answer differs"
done
kill -TERM "$FN_PID_det"
wait "$FN_PID_det" || fail "det: exit status $? after SIGTERM"
echo "ok det: images of three sizes in one burst, each answered as alone"

# Every datatype, requests of 1, 2, 3 and 1 rows with different values.
"$BIN/tetris-test-oip-model" "$WORK" || fail "cannot write the identity models"
every_request() { # ROWS K: a request for identity_all, its values shifted by K
    rows=$1
    k=$2
    n=$((rows * 2))
    ints=$(seq -s, $k $((k + n - 1)))
    bools=$(seq $k $((k + n - 1)) | awk '{ printf "%s%s", (NR > 1 ? "," : ""), ($1 % 2 ? "true" : "false") }')
    strs=$(seq $k $((k + n - 1)) | awk '{ printf "%s\"s%d\"", (NR > 1 ? "," : ""), $1 }')
    printf '{"inputs":['
    sep=""
    for dt in BOOL UINT8 UINT16 UINT32 UINT64 INT8 INT16 INT32 INT64 FP16 FP32 FP64 BF16 BYTES; do
        case $dt in BOOL) data=$bools ;; BYTES) data=$strs ;; *) data=$ints ;; esac
        printf '%s{"name":"in_%s","datatype":"%s","shape":[%d,2],"data":[%s]}' "$sep" $dt $dt $rows "$data"
        sep=,
    done
    printf ']}\n'
}
files=""
for rk in 1:10 2:20 3:30 1:40; do
    f="$WORK/every.${rk%%:*}.${rk#*:}.json"
    every_request "${rk%%:*}" "${rk#*:}" >"$f"
    $OIP_TOOL tensors "$f" | sed 's/^in_/out_/' >"${f%.json}.want"
    files="$files $f"
done
fn_start id --model "$WORK/identity_all.onnx" --private --batch 4 --max-wait-ms 3000
# shellcheck disable=SC2086
burst "$FN_URL_id" identity_all $files
for f in $files; do
    $OIP_TOOL tensors "$f.out" >"${f%.json}.got"
    cmp -s "${f%.json}.want" "${f%.json}.got" || fail "$(basename "$f"): $(diff "${f%.json}.want" "${f%.json}.got")"
done
[ "$(metric_at "$FN_URL_id" 'tetris_function_batch_size_bucket{le="1"}')" -lt \
    "$(metric_at "$FN_URL_id" tetris_function_batch_size_count)" ] || fail "identity: no batch of several"
kill -TERM "$FN_PID_id"
wait "$FN_PID_id" || fail "identity: exit status $? after SIGTERM"
echo "ok every datatype: requests of 1-3 rows batched, each got its own rows back"

# A batch whose output does not carry the batch: split, each alone.
files=""
for rows in 1 2 3; do
    f="$WORK/flat.$rows.json"
    printf '{"inputs":[{"name":"x","datatype":"FP32","shape":[%d,2],"data":[%s]}]}\n' $rows \
        "$(seq -s, $rows $((3 * rows - 1)))" >"$f"
    files="$files $f"
done
export TETRIS_LOG_LEVEL=debug
fn_start flat --model "$WORK/flatten.onnx" --private --batch 3 --max-wait-ms 3000
unset TETRIS_LOG_LEVEL
[ "$(jq -r .batching "$WORK/flat.ready")" = concat ] || fail "flatten should look batchable"
# shellcheck disable=SC2086
burst "$FN_URL_flat" flatten $files
for rows in 1 2 3; do
    jq -e --argjson r $rows '.outputs[0].shape == [2 * $r] and .outputs[0].data == [range($r; 3 * $r)]' \
        "$WORK/flat.$rows.json.out" >/dev/null || fail "flatten $rows rows: $(cat "$WORK/flat.$rows.json.out")"
done
grep -q 'event=batch-split requests=3' "$WORK/flat.log" || fail "the batch was not split"
kill -TERM "$FN_PID_flat"
wait "$FN_PID_flat" || fail "flatten: exit status $? after SIGTERM"
echo "ok a batch whose output does not carry the batch is split, each request answered alone"

# Not batchable: sequential batches, each answer right.
vad="$MODELS/silero_vad_v5.onnx"
files=""
for s in 1 2 3 4; do
    "$BIN/tetris-onnx-run" "$vad" --private --seed $s --oip-request "$WORK/vad.$s.json" \
        2>"$WORK/onnx-run.log" | jq -r .sha256 >"$WORK/vad.$s.want"
    files="$files $WORK/vad.$s.json"
done
fn_start vad --model "$vad" --private --batch 4 --max-wait-ms 3000
[ "$(jq -r .batching "$WORK/vad.ready")" = sequential ] || fail "silero should batch sequentially"
# shellcheck disable=SC2086
burst "$FN_URL_vad" silero_vad_v5 $files
for s in 1 2 3 4; do
    [ "$(answer_hash "$WORK/vad.$s.json")" = "$(cat "$WORK/vad.$s.want")" ] || fail "vad seed $s differs"
done
[ "$(metric_at "$FN_URL_vad" 'tetris_function_batch_size_bucket{le="1"}')" -lt \
    "$(metric_at "$FN_URL_vad" tetris_function_batch_size_count)" ] || fail "vad: no batch of several"
curl -s "$FN_URL_vad/metrics" >"$WORK/metrics.txt"
promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.log" 2>&1 ||
    fail "promtool: $(cat "$WORK/promtool.log")"
kill -TERM "$FN_PID_vad"
wait "$FN_PID_vad" || fail "vad: exit status $? after SIGTERM"
echo "ok silero-vad: a sequential batch of V2 requests, each answer right, promtool ok"
