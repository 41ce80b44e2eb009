# tests/lib/reclaimer.sh - helpers for tetris-reclaimer's shell tests
# (sourced after tests/lib/common.sh's set-up, which it does itself). Each
# test gets a private store, $STORE, on tmpfs; the daemon under test logs
# to $DAEMON_LOG and is driven by tetris-ingest-probe ($PROBE), which
# plays a function instance.
# shellcheck shell=sh disable=SC2034
. "$(dirname "$0")/../lib/common.sh"
RECLAIMER="$BIN/tetris-reclaimer"
PROBE="$BIN/tetris-ingest-probe"
STORE="$WORK/store"
DAEMON_LOG="$WORK/daemon.log"

# start_daemon ARGS...: tetris-reclaimer on $STORE with an HTTP port picked
# by the kernel; sets RECLAIMER_PID and RECLAIMER_PORT.
start_daemon() {
    reclaimer_start "$STORE" "$DAEMON_LOG" --listen 127.0.0.1:0 "$@"
}

stop_daemon() { reclaimer_stop; }

daemon_alive() { kill -0 "$RECLAIMER_PID" 2>/dev/null; }

http_get() { curl -sS --max-time 20 "http://127.0.0.1:$RECLAIMER_PORT$1"; }

# metric NAME: the value of an unlabelled metric.
metric() { metric_at "http://127.0.0.1:$RECLAIMER_PORT" "$1"; }

passes() { metric tetris_reclaim_passes_total; }

# wait_passes N: waits until N more reclaim passes have completed.
wait_passes() {
    _target=$(( $(passes) + $1 ))
    wait_until 120 "[ \"\$(passes)\" -ge $_target ]" ||
        fail "reclaim passes stalled (want $_target, have $(passes))"
}

# tensor_count: tensor files in the store.
tensor_count() { find "$STORE/public/tensors" -type f | wc -l; }

# synth FILE TENSORS BYTES SEED: a synthetic safetensors model.
synth() { "$PROBE" synth --out "$1" --tensors "$2" --bytes "$3" --seed "$4" || fail "synth"; }

# hold MODEL OUTFILE: starts a function instance that loads MODEL through
# the daemon and keeps it mapped until SIGTERM; sets HOLD_PID.
hold() {
    "$PROBE" load --store "$STORE" --hold "$1" </dev/null >"$2" 2>>"$WORK/probe.log" &
    HOLD_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $HOLD_PID"
    wait_until 60 "grep -q '\"pid\"' '$2'" || fail "holder of $1 did not load"
}

# release PID: the instance exits cleanly (its connection closes).
release() { kill -TERM "$1"; wait "$1" 2>/dev/null; }
