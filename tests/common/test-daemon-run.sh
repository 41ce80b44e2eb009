#!/bin/sh
# test-daemon-run.sh - the run loop every daemon shares (common/daemon_run.h),
# through the three whose loop ticks (the webhook's, the extender's and
# tetris-function's stop is in their own tests):
#   - tetris-reclaimer: reclaim passes on the timer; SIGHUP reloads the
#     settings (a new interval takes; a broken file keeps the old ones)
#     and the daemon serves on; SIGINT stops it: event=stopping signal=2,
#     event=stopped, exit 0; --once ends in start, exit 0, no stop signal;
#   - tetris-node-pins: the first refresh at once, not after --interval;
#     SIGTERM in the hour-long wait ends it at once, exit 0; SIGHUP is not
#     taken (its default ends the process), as before the shared loop;
#   - tetris-autoscaler run: the first round at once in real time; SIGTERM
#     in the wait for the next round ends it, exit 0, each function's
#     event=done; in simulated time, SIGTERM while it waits for its
#     --step-file to go ends it too.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
AS="$ROOT/tests/autoscaler"

# stopped_by PID SIGNO LOG WHAT: sends signal SIGNO; the process must exit
# 0 having logged why.
stopped_by() {
    kill -"$2" "$1"
    _rc=0
    wait "$1" || _rc=$?
    [ $_rc -eq 0 ] || fail "$4 exited $_rc on signal $2"
    grep -q "event=stopping signal=$2\$" "$3" || fail "$4: no stopping line for signal $2"
    grep -q "event=stopped" "$3" || fail "$4: no stopped line"
}

# --- tetris-reclaimer
cat >"$WORK/r.yaml" <<YAML
interval: 200ms
keep_alive: 2
YAML
start_daemon --config "$WORK/r.yaml"
wait_passes 2
echo "interval: 1h" >"$WORK/r.yaml"
kill -HUP "$RECLAIMER_PID"
wait_until 30 "grep -q 'event=reloaded interval_s=3600' '$DAEMON_LOG'" || fail "SIGHUP did not reload"
# A pass that was already under way may finish; then none for an hour.
sleep 0.5
before=$(passes)
sleep 1
[ "$(passes)" = "$before" ] || fail "passes went on after the reload set an hour: $before, $(passes)"
echo "interval: [" >"$WORK/r.yaml"
kill -HUP "$RECLAIMER_PID"
wait_until 30 "grep -q 'event=reload-failed' '$DAEMON_LOG'" || fail "a broken file not reported"
daemon_alive || fail "the daemon died of a broken file on SIGHUP"
http_get /healthz >/dev/null || fail "no /healthz after the reloads"
stopped_by "$RECLAIMER_PID" 2 "$DAEMON_LOG" tetris-reclaimer
rc=$(status "$RECLAIMER" --store "$STORE" --once)
[ "$rc" = 0 ] || fail "--once exited $rc: $(cat "$WORK/status.err")"
! grep -q "event=stopping" "$WORK/status.err" || fail "--once took a stop signal"
note "reclaimer: SIGHUP reloads, SIGINT stops, --once ends in start"

# --- tetris-node-pins, against the fake apiserver (no objects: an empty pin
# file).
echo '{}' >"$WORK/objects.json"
fake_apiserver_start "$WORK/objects.json" tetris-system
pins() {
    "$BIN/tetris-node-pins" --node node-x --pin-file "$WORK/pins" \
        --kubeconfig "$WORK/kubeconfig" --interval 3600 >>"$WORK/pins.log" 2>&1 &
    PINS_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $PINS_PID"
    wait_until 30 "[ \"\$(grep -c event=pins-written '$WORK/pins.log')\" -gt $1 ] || ! kill -0 $PINS_PID" ||
        fail "node-pins: no refresh at start"
    kill -0 "$PINS_PID" || fail "node-pins died: $(cat "$WORK/pins.log")"
}
pins 0
stopped_by "$PINS_PID" 15 "$WORK/pins.log" tetris-node-pins
rm -f "$WORK/pins"
pins 1
# Under nohup (SIGHUP ignored when this shell started, which its children
# inherit and a shell cannot undo) SIGHUP's default is not what the program
# gets: there is nothing to check then.
if [ $(($(awk '/^SigIgn:/ { print "0x" $2 }' /proc/$$/status) & 1)) -eq 1 ]; then
    stopped_by "$PINS_PID" 15 "$WORK/pins.log" tetris-node-pins
    note "node-pins: refresh at once, SIGTERM stops; SIGHUP ignored by our parent: not checked"
else
    kill -HUP "$PINS_PID"
    rc=0
    wait "$PINS_PID" || rc=$?
    [ $rc -eq 129 ] || fail "node-pins on SIGHUP: exit $rc, want 129 (SIGHUP's default)"
    note "node-pins: refresh at once, SIGTERM stops, SIGHUP not taken"
fi

# --- tetris-autoscaler run, real time: one round, then an hour's wait.
"$BIN/tetris-autoscaler" run --slo-ms 50 --dry-run --interval 3600 --realtime \
    --function fn="$AS/two-configs.profile.yaml" --trace fn="$AS/rise-and-fall.trace" \
    >"$WORK/actions" 2>"$WORK/autoscaler.log" &
pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $pid"
wait_until 30 "[ -s '$WORK/actions' ] || ! kill -0 $pid" || fail "autoscaler: no first round"
[ -s "$WORK/actions" ] || fail "autoscaler died: $(cat "$WORK/autoscaler.log")"
stopped_by "$pid" 15 "$WORK/autoscaler.log" "tetris-autoscaler run"
grep -q "event=done function=fn" "$WORK/autoscaler.log" || fail "autoscaler: no event=done"

# Simulated time, waiting for its step file to go.
"$BIN/tetris-autoscaler" run --slo-ms 50 --dry-run --interval 10 --step-file "$WORK/step" \
    --function fn="$AS/two-configs.profile.yaml" --trace fn="$AS/rise-and-fall.trace" \
    >"$WORK/actions" 2>"$WORK/autoscaler-step.log" &
pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $pid"
wait_until 30 "[ -f '$WORK/step' ] || ! kill -0 $pid" || fail "autoscaler: no step file"
stopped_by "$pid" 15 "$WORK/autoscaler-step.log" "tetris-autoscaler run --step-file"
[ "$(cat "$WORK/step")" = 0.000 ] || fail "autoscaler went past its step file: $(cat "$WORK/step")"
note "autoscaler: first round at once, SIGTERM stops in the wait and the step file's"
