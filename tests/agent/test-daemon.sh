#!/bin/sh
# STORE mode through the real node daemon: the instance opens the store
# read-only, the daemon ingests and holds its references; outputs equal a
# private run's; `tetris-agent load --hold` prints its result while it still
# holds the model, and the daemon keeps the reference until it lets go.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"
store="$WORK/store"
mkdir -p "$store"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600

for m in silero_vad_v6.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx; do
    want=$("$BIN/tetris-onnx-run" "$MODELS/$m" --private 2>/dev/null | jq -r .sha256)
    for pass in cold warm; do
        out=$("$BIN/tetris-onnx-run" "$MODELS/$m" --store "$store" 2>"$WORK/err") ||
            fail "$m $pass: $(cat "$WORK/err")"
        assert_shared "$out" "$m $pass"
        [ "$(json_get "$out" sha256)" = "$want" ] || fail "$m $pass: output differs"
        if [ $pass = cold ]; then
            [ "$(json_get "$out" ingested_bytes)" -gt 0 ] || fail "$m: daemon ingested nothing"
        else
            [ "$(json_get "$out" ingested_bytes)" = 0 ] || fail "$m: warm load ingested"
        fi
    done
    echo "ok $m through the daemon, cold and warm, output $want"
done

# --hold: the result comes out while the model is held; references live
# exactly as long as the holder does.
mkfifo "$WORK/stdin"
"$BIN/tetris-agent" load --store "$store" --hold "$MODELS/silero_vad_v6.onnx" \
    <"$WORK/stdin" >"$WORK/out" 2>"$WORK/err" &
agent=$!
KILL_ON_EXIT="$KILL_ON_EXIT $agent"
exec 3>"$WORK/stdin"
wait_output $agent "$WORK/out" "load --hold" "$WORK/err"
assert_shared "$(cat "$WORK/out")" "load --hold"
kill -0 $agent 2>/dev/null || fail "load --hold exited before stdin closed"
"$BIN/tetris-agent" inspect --store "$store" | grep -q " live " || fail "no live holder while held"
exec 3>&-
wait $agent || fail "load --hold exited non-zero"
wait_until 10 '! "$BIN/tetris-agent" inspect --store "$store" | grep -q " live "' ||
    fail "daemon kept the reference after the agent let go"
echo "ok load --hold through the daemon: result while held, reference released after"
