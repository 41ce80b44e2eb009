#!/bin/sh
# tetris-function makes its model's derived form without anyone waiting
# (protocol/derived.h, --derived auto, opted into) and moves to it: the
# first instance on a fresh store answers on the plain weights, what
# tetris-onnx-run --private answers, and asks the real node daemon in a
# thread of its own; the index entry appears without any explicit make
# while it serves; once it is made the instance swaps sessions between
# batches (event=session-upgraded): a storm of requests across the swap
# loses none and each answer is the plain weights' or the form's for its
# seed; after it, the instance answers byte for byte what stock ONNX
# Runtime at `all` with pre-packing answers, /metrics says it, and the
# plain weights are no longer mapped. A second instance uses the form from
# its start. (Answers change at the swap: ONNX Runtime's fusions at `all`
# change the floating-point results of some models for some inputs.) A
# daemon that cannot make the form leaves the instance on the plain
# weights (one log line); one that restarts while
# the instance waits is asked again; SIGTERM while the instance waits for
# the daemon, or pauses between tries, ends the wait and the process
# (exit 0).
# --derived use never asks; the default (off) neither asks nor uses one.
set -eu
. "$(dirname "$0")/../lib/function.sh"
[ -x "$BIN/tetris-derive" ] || fail "tetris-derive not built in $BIN"
store="$WORK/store"
mkdir -p "$store"
# The derivation child (uid 65534) reads the store's public directory by
# its name, as on a node, where the store's parents are 0755.
chmod 0711 "$WORK"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
pub="$store/public"
# The mode under test (common.sh sets use for the other tests).
export TETRIS_DERIVED=auto

# answers NAME: the sha256 of seeds 3 and 11, one line.
answers() {
    url=$(eval echo "\$FN_URL_$1")
    for seed in 3 11; do
        got=$(fn_post "$url" "{\"seed\":$seed}")
        [ "${got%% *}" = 200 ] || fail "$1 seed $seed: $got"
        printf '%s ' "$(printf '%s' "${got#* }" | jq -r .sha256)"
    done
}
# reference MODEL ARGS...: tetris-onnx-run's sha256 for seeds 3 and 11.
reference() {
    _m=$1
    shift
    for seed in 3 11; do
        printf '%s ' "$("$BIN/tetris-onnx-run" "$_m" --private --seed $seed "$@" 2>/dev/null |
            jq -r .sha256)"
    done
}
stop_fn() {
    pid=$(eval echo "\$FN_PID_$1")
    kill -TERM "$pid"
    wait "$pid" || fail "$1: exit status $? after SIGTERM"
}
entries() { ls "$pub/derived" 2>/dev/null | wc -l; }

# --derived use: no ask, no entry.
fn_start plain --model "$MODELS/hello_deepa.onnx" --store "$store" --derived use
answers plain >/dev/null
stop_fn plain
sleep 1
[ "$(entries)" = 0 ] || fail "--derived use asked for a form: $(ls "$pub/derived")"
! grep -q "event=derive" "$WORK/daemon.log" || fail "--derived use: $(grep event=derive "$WORK/daemon.log")"
echo "ok --derived use never asks the daemon"

# storm NAME SECONDS: POSTs seeds 3 and 11 from two clients at once
# until the instance has upgraded (at most SECONDS) and a few more after;
# each reply's "STATUS SEED SHA" is added to $WORK/NAME.storm.
storm() {
    url=$(eval echo "\$FN_URL_$1")
    for client in 1 2; do
        (
            end=$(($(date +%s) + $2))
            after=0
            while [ "$after" -lt 5 ] && [ "$(date +%s)" -lt "$end" ]; do
                for seed in 3 11; do
                    status=$(curl -s -o "$WORK/storm.$client" -w '%{http_code}' \
                        --data-binary "{\"seed\":$seed}" "$url/") || status=curl-failed
                    echo "$status $seed $(jq -r .sha256 "$WORK/storm.$client" 2>/dev/null)" >>"$WORK/$1.storm"
                done
                ! grep -q "event=session-upgraded" "$WORK/$1.log" || after=$((after + 1))
            done
        ) &
        eval "storm_pid_$client=$!"
    done
    wait "$storm_pid_1" "$storm_pid_2"
}
# fn_start_held NAME MODEL ARGS...: fn_start with the daemon stopped
# (SIGSTOP) as soon as it has registered the instance's tensors, before
# the instance opens its session and asks for the form: the ask waits
# until SIGCONT, whatever the machine's speed.
fn_start_held() {
    _name=$1 _model=$2
    shift 2
    _seen=$(grep -c "event=ingest .*label=\"$_model\"" "$WORK/daemon.log" || true)
    (
        until [ "$(grep -c "event=ingest .*label=\"$_model\"" "$WORK/daemon.log")" -gt "$_seen" ]; do
            sleep 0.005
        done
        kill -STOP "$RECLAIMER_PID"
    ) &
    _holder=$!
    fn_start "$_name" --model "$MODELS/$_model" "$@"
    wait "$_holder"
}
# mapped_tensors PID: the store's tensor files PID maps
mapped_tensors() { grep -c "$pub/tensors/" "/proc/$1/maps" || true; }

n=0
for m in ch_PP-OCRv4_det_infer.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx; do
    n=$((n + 1))
    plain=$(reference "$MODELS/$m")
    stock=$(reference "$MODELS/$m" --graph-opt all --prepack)
    # Two workers, one request a batch: runs in flight on both sessions, and
    # answers that do not depend on what a request was batched with.
    fn_start_held first "$m" --store "$store" --concurrency 2
    jq -e '.derived == false and .fell_back == false' "$WORK/first.ready" >/dev/null ||
        fail "$m first: $(cat "$WORK/first.ready")"
    before=$(mapped_tensors "$FN_PID_first")
    # The ask runs beside the serving instance, which answers on the plain
    # weights while the daemon is held, then moves to the form in the
    # middle of a storm.
    first=$(answers first)
    [ "$first" = "$plain" ] || fail "$m first: answered $first before the form, plain weights $plain"
    : >"$WORK/first.storm"
    storm first 120 &
    storm_pid=$!
    wait_until 30 "[ \$(wc -l <'$WORK/first.storm') -ge 4 ]" || fail "$m first: the storm got no replies"
    kill -CONT "$RECLAIMER_PID"
    wait "$storm_pid"
    grep -q "event=session-upgraded .*derived=1" "$WORK/first.log" ||
        fail "$m first: no upgrade within 120 s: $(cat "$WORK/first.log")"
    grep -q "event=derived .*label=.*$m" "$WORK/daemon.log" || fail "$m: the daemon made no form"
    [ "$(entries)" = $n ] || fail "$m: $(entries) index entries, expected $n"
    grep -q "event=derive-requested.*wait=background.*result=made" "$WORK/first.log" ||
        fail "$m first: no ask logged: $(cat "$WORK/first.log")"
    total=$(wc -l <"$WORK/first.storm")
    set -- $plain
    plain3=$1 plain11=$2
    set -- $stock
    stock3=$1 stock11=$2
    # Every reply is the plain weights' or the form's for its seed; both
    # kinds are there (the storm began before the form was made).
    awk -v p3="$plain3" -v p11="$plain11" -v s3="$stock3" -v s11="$stock11" '
        $1 != 200 || ($2 == 3 && $3 != p3 && $3 != s3) || ($2 == 11 && $3 != p11 && $3 != s11) { bad++; print "bad reply: " $0 > "/dev/stderr" }
        ($2 == 3 && $3 == p3) || ($2 == 11 && $3 == p11) { plain++ }
        ($2 == 3 && $3 == s3) || ($2 == 11 && $3 == s11) { form++ }
        END { if (!plain || !form) print "plain replies " plain + 0 ", form replies " form + 0 > "/dev/stderr"; exit bad > 0 || !plain || !form }' \
        "$WORK/first.storm" || fail "$m first: a reply across the swap was lost or wrong"
    [ "$(answers first)" = "$stock" ] || fail "$m first: after the upgrade it answered $(answers first), stock all+prepack $stock"
    after=$(mapped_tensors "$FN_PID_first")
    [ "$after" -lt "$before" ] && [ "$after" -le 3 ] ||
        fail "$m first: $after store tensor files mapped after the upgrade ($before before)"
    curl -s "$FN_URL_first/metrics" | grep -qx "tetris_function_derived_form 1" ||
        fail "$m first: /metrics does not say the derived form"
    fn_start second --model "$MODELS/$m" --store "$store"
    jq -e '.derived == true' "$WORK/second.ready" >/dev/null ||
        fail "$m second: the form was not used: $(cat "$WORK/second.ready") $(cat "$WORK/second.log")"
    grep -q "event=ready .*derived=1" "$WORK/second.log" || fail "$m second: no derived=1 in its log"
    ! grep -q "event=derive-request" "$WORK/second.log" || fail "$m second: asked again"
    curl -s "$FN_URL_second/metrics" | grep -qx "tetris_function_derived_form 1" ||
        fail "$m second: /metrics does not say the derived form"
    second=$(answers second)
    [ "$second" = "$stock" ] || fail "$m: second answered $second, stock all+prepack $stock"
    stop_fn first
    stop_fn second
    echo "ok $m: the first instance served on the plain weights and moved to the form made meanwhile ($total replies across the swap, none lost, plain $plain, form $stock; $before tensor files mapped before, $after after); the second uses it (answers $second)"
done
[ "$(grep -c "event=derived " "$WORK/daemon.log")" = 2 ] ||
    fail "expected 2 derivations: $(grep "event=derive" "$WORK/daemon.log")"

# A daemon that cannot make the form (its derivation runs as nobody,
# who cannot reach this store now) leaves the instance as it was.
chmod 0700 "$WORK"
fn_start nofrm --model "$MODELS/hello_deepa.onnx" --store "$store"
wait_until 60 "grep -q event=session-upgrade-failed '$WORK/nofrm.log'" ||
    fail "no failed upgrade logged: $(cat "$WORK/nofrm.log")"
grep -q "event=session-upgrade-failed .*action=plain-weights" "$WORK/nofrm.log" ||
    fail "the failed upgrade's line: $(grep event=session-upgrade "$WORK/nofrm.log")"
[ "$(answers nofrm)" = "$(reference "$MODELS/hello_deepa.onnx")" ] ||
    fail "after a failed upgrade the instance did not answer on the plain weights"
curl -s "$FN_URL_nofrm/metrics" | grep -qx "tetris_function_derived_form 0" ||
    fail "after a failed upgrade /metrics does not say the plain weights"
stop_fn nofrm
chmod 0711 "$WORK"
echo "ok a form the daemon cannot make leaves the instance on the plain weights: $(grep -o 'event=session-upgrade-failed.*' "$WORK/nofrm.log" | head -c 160)"

# A daemon that goes away while the instance waits for its form (killed,
# then started again on the same store, as a DaemonSet's update does) is
# asked again: the instance moves to the form the new daemon makes.
# backlog: connections the stopped daemon has not accepted (its socket's
# Recv-Q); the ask is one of them once the instance has sent it.
backlog() { ss -Hxl "src $pub/ingest.sock" | awk '{ n += $3 } END { print n + 0 }'; }
fn_start_held again hello_deepa.onnx --store "$store"
wait_until 30 "[ \$(backlog) -ge 1 ]" || fail "the instance did not ask the held daemon"
kill -KILL "$RECLAIMER_PID"
wait "$RECLAIMER_PID" 2>/dev/null || true
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
wait_until 60 "grep -q event=session-upgraded '$WORK/again.log'" ||
    fail "no upgrade after the daemon's restart: $(grep event=derive "$WORK/again.log")"
grep -q "event=derive-request-retry" "$WORK/again.log" || fail "no retry logged"
[ "$(answers again)" = "$(reference "$MODELS/hello_deepa.onnx" --graph-opt all --prepack)" ] ||
    fail "after the restart's upgrade the instance does not answer what stock answers"
stop_fn again
echo "ok a daemon restarted while the instance waits is asked again: $(grep -c event=derive-request-retry "$WORK/again.log") retries, then the form"

# SIGTERM while the instance pauses between tries (its daemon gone, not
# back yet) ends the pause: exit 0 at once.
fn_start_held gone silero_vad_v5.onnx --store "$store"
wait_until 30 "[ \$(backlog) -ge 1 ]" || fail "silero: the instance did not ask the held daemon"
kill -KILL "$RECLAIMER_PID"
wait "$RECLAIMER_PID" 2>/dev/null || true
# A pause of 2 s or more has just begun when its line is logged.
wait_until 30 "grep -Eq 'event=derive-request-retry .*retry_ms=([2-9][0-9]{3}|[0-9]{5})' '$WORK/gone.log'" ||
    fail "no long pause while the daemon is gone: $(grep event=derive "$WORK/gone.log")"
t0=$(date +%s%N)
kill -TERM "$FN_PID_gone"
rc=0
wait "$FN_PID_gone" || rc=$?
took=$((($(date +%s%N) - t0) / 1000000))
[ $rc = 0 ] || fail "SIGTERM between tries: exit status $rc: $(tail -n 3 "$WORK/gone.log")"
[ $took -le 1500 ] || fail "SIGTERM between tries took $took ms: the pause was not ended"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
echo "ok SIGTERM between tries for a daemon that is gone: exit 0 in ${took} ms"

# SIGTERM while the instance waits for a daemon that does not answer
# (held stopped): the wait ends, the instance drains, exit 0.
fn_start_held waits ch_PP-OCRv4_rec_infer.onnx --store "$store"
! grep -q "event=session-upgraded" "$WORK/waits.log" ||
    { kill -CONT "$RECLAIMER_PID"; fail "the form was made before the daemon could be stopped"; }
t0=$(date +%s)
kill -TERM "$FN_PID_waits"
rc=0
wait "$FN_PID_waits" || rc=$?
took=$(($(date +%s) - t0))
kill -CONT "$RECLAIMER_PID"
[ $rc = 0 ] || fail "SIGTERM during the wait: exit status $rc: $(tail -n 3 "$WORK/waits.log")"
[ $took -le 10 ] || fail "SIGTERM during the wait took $took s"
! grep -q "event=session-upgrade" "$WORK/waits.log" || fail "a cancelled wait logged: $(grep event=session-upgrade "$WORK/waits.log")"
echo "ok SIGTERM while waiting for the daemon's form ends the wait: exit 0 in ${took} s"

# The default: a form in the store is neither used nor asked for.
unset TETRIS_DERIVED
fn_start dflt --model "$MODELS/ch_PP-OCRv4_det_infer.onnx" --store "$store"
jq -e '.derived == false' "$WORK/dflt.ready" >/dev/null ||
    fail "the default used the form: $(cat "$WORK/dflt.ready")"
[ "$(answers dflt)" = "$(reference "$MODELS/ch_PP-OCRv4_det_infer.onnx")" ] ||
    fail "the default did not answer what the plain weights answer"
! grep -q "event=derive-request" "$WORK/dflt.log" || fail "the default asked for a form"
stop_fn dflt
echo "ok the default (off) runs on the plain weights beside a form and asks for none"
