# lib.sh - shared helpers for tetris-reclaimer's shell tests (sourced).
# Needs TETRIS_BIN (the binaries under test). Each test gets a private
# store on tmpfs and a scratch directory, removed on exit.
set -u
: "${TETRIS_BIN:?set TETRIS_BIN to the directory of the binaries under test}"
RECLAIMER="$TETRIS_BIN/tetris-reclaimer"
PROBE="$TETRIS_BIN/tetris-ingest-probe"
T_NAME="$(basename "$0" .sh)"
STORE="/dev/shm/tetris-$T_NAME-$$"
WORK="$(mktemp -d "/tmp/tetris-$T_NAME-XXXXXX")"
DAEMON_PID=""
DAEMON_LOG="$WORK/daemon.log"
HTTP_PORT=""
BG_PIDS=""

cleanup() {
    for p in $BG_PIDS; do kill -KILL "$p" 2>/dev/null; done
    if [ -n "$DAEMON_PID" ]; then kill -KILL "$DAEMON_PID" 2>/dev/null; fi
    wait 2>/dev/null
    [ -n "${KEEP_WORK:-}" ] || rm -rf "$STORE" "$WORK"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP

fail() {
    echo "FAIL $T_NAME: $*" >&2
    if [ -f "$DAEMON_LOG" ]; then
        echo "--- daemon log (tail) ---" >&2
        tail -n 30 "$DAEMON_LOG" >&2
    fi
    if [ -s "$WORK/probe.log" ]; then
        echo "--- probe log (tail) ---" >&2
        tail -n 10 "$WORK/probe.log" >&2
    fi
    exit 1
}

note() { echo "# $T_NAME: $*"; }

# wait_until SECONDS 'CONDITION': evaluates the shell condition every
# 0.1 s; fails after SECONDS. The bound only keeps a broken daemon from
# hanging the suite; no test asserts on time.
wait_until() {
    limit=$(( $1 * 10 )); shift
    i=0
    while ! eval "$*" >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -ge $limit ] && return 1
        sleep 0.1
    done
    return 0
}

# start_daemon ARGS...: starts tetris-reclaimer on $STORE with an HTTP port
# picked by the kernel; sets DAEMON_PID and HTTP_PORT.
start_daemon() {
    started_before=$(grep -c "event=serving" "$DAEMON_LOG" 2>/dev/null)
    "$RECLAIMER" --store "$STORE" --listen 127.0.0.1:0 "$@" >>"$DAEMON_LOG" 2>&1 &
    DAEMON_PID=$!
    wait_until 60 '[ "$(grep -c "event=serving" "$DAEMON_LOG")" -gt "${started_before:-0}" ]' ||
        fail "daemon did not start"
    HTTP_PORT=$(grep -o 'event=http-listening.*port=[0-9]*' "$DAEMON_LOG" | tail -n 1 |
                sed 's/.*port=//')
}

stop_daemon() {
    kill -TERM "$DAEMON_PID"
    wait "$DAEMON_PID"
    rc=$?
    DAEMON_PID=""
    [ $rc -eq 0 ] || fail "daemon exited $rc on SIGTERM"
}

daemon_alive() { kill -0 "$DAEMON_PID" 2>/dev/null; }

http_get() { curl -sS --max-time 20 "http://127.0.0.1:$HTTP_PORT$1"; }

# metric NAME: the value of an unlabelled metric.
metric() {
    http_get /metrics | awk -v n="$1" '$1 == n { print $2 }'
}

passes() { metric tetris_reclaim_passes_total; }

# wait_passes N: waits until N more reclaim passes have completed.
wait_passes() {
    target=$(( $(passes) + $1 ))
    wait_until 120 "[ \"\$(passes)\" -ge $target ]" || fail "reclaim passes stalled (want $target, have $(passes))"
}

# tensor_count: tensor files in the store.
tensor_count() { find "$STORE/tensors" -type f | wc -l; }

synth() { "$PROBE" synth --out "$1" --tensors "$2" --bytes "$3" --seed "$4" || fail "synth"; }

# hold MODEL OUTFILE: starts a function instance that loads MODEL through
# the daemon and keeps it mapped until SIGTERM; sets HOLD_PID.
hold() {
    "$PROBE" load --store "$STORE" --hold "$1" </dev/null >"$2" 2>>"$WORK/probe.log" &
    HOLD_PID=$!
    BG_PIDS="$BG_PIDS $HOLD_PID"
    wait_until 60 "grep -q '\"pid\"' '$2'" || fail "holder of $1 did not load"
}

# release PID: the instance exits cleanly (its connection closes).
release() { kill -TERM "$1"; wait "$1" 2>/dev/null; }
