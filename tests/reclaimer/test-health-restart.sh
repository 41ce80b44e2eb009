#!/bin/sh
# test-health-restart.sh - honest health and safe restarts, attacked for
# real:
#   - leftovers of a previous daemon (state temp files, quarantined
#     tensors) are removed at start;
#   - a second daemon, or --once, on a store a live daemon serves changes
#     nothing there (its keep-alive of 0 would free the cold tensors the
#     live one keeps) and exits 3 with event=store-served; the live one
#     goes on serving; a pod's uid cannot open the instance lock;
#   - an ingest bigger than the capacity (a pod under uid nobody) is
#     refused and evicts nothing;
#   - a pin file that is a FIFO with a stalled writer is refused, not
#     waited on; /healthz turns 503 while the main loop is stuck (its
#     thread stopped by a tracer), and 200 once it moves again;
#   - a slow HTTP client (uid nobody) that opens 300 connections and
#     dribbles header bytes holds a few slots only: other clients are
#     served.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
NOBODY=65534
as_nobody() { setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups "$@"; }
# The slow client is a Python script; some python3 on PATH are per-user.
PY=""
for _p in /usr/bin/python3 $(command -v python3); do
    as_nobody "$_p" -c '' 2>/dev/null && { PY=$_p; break; }
done
[ -n "$PY" ] || skip "no python3 that uid nobody can run (the slow client)"
healthz_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 20 "http://127.0.0.1:$RECLAIMER_PORT/healthz"; }

chmod 755 "$WORK"
synth "$WORK/m1.safetensors" 4 65536 71
synth "$WORK/big.safetensors" 8 65536 72
chmod 644 "$WORK"/*.safetensors
M1_BYTES=$((4 * 65536))

# ---- leftovers are removed at start ----
"$RECLAIMER" --store "$STORE" --once --listen "" >>"$DAEMON_LOG" 2>&1 || fail "--once on a new store"
echo partial >"$STORE/private/reclaimer.state.tmp.99999"
echo bad >"$STORE/private/quarantine/$(printf '%064d' 7)"
start_daemon --interval 200ms --keep-alive 1h --scrub-rate 0
[ -e "$STORE/private/reclaimer.state.tmp.99999" ] && fail "a state temp file survived the start"
[ -n "$(ls -A "$STORE/private/quarantine")" ] && fail "quarantine/ not emptied at start"
grep -q 'event=leftovers-removed tenant=(shared) state_temp_files=1 quarantined=1' "$DAEMON_LOG" ||
    fail "leftovers' removal not logged"
note "state temp files and quarantined tensors of a previous daemon removed at start"

# ---- a second daemon on a served store changes nothing ----
"$PROBE" load --store "$STORE" "$WORK/m1.safetensors" >"$WORK/m1.json" 2>>"$WORK/probe.log"
jq -e '.ingested == 4' "$WORK/m1.json" >/dev/null || fail "load m1: $(cat "$WORK/m1.json")"
find "$STORE/public/tensors" -type f -printf '%f\n' >"$WORK/m1.digests"
# m1 is cold now: the live daemon keeps it an hour, a keep-alive of 0 not.
for mode in --once --interval=200ms; do
    rc=$(status "$RECLAIMER" --store "$STORE" --listen 127.0.0.1:0 --keep-alive 0 "$mode")
    [ "$rc" = 3 ] || fail "second daemon ($mode) exited $rc, want 3: $(cat "$WORK/status.err")"
    grep -q "event=store-served .*pid $RECLAIMER_PID " "$WORK/status.err" ||
        fail "second daemon ($mode): no clear message: $(cat "$WORK/status.err")"
    [ "$(tensor_count)" = 4 ] || fail "second daemon ($mode) freed the live daemon's cold tensors"
done
[ -S "$STORE/public/ingest.sock" ] || fail "the second daemon removed the live one's socket"
"$PROBE" load --store "$STORE" "$WORK/m1.safetensors" >"$WORK/again.json" 2>>"$WORK/probe.log"
jq -e '.fallback == false and .resident == 4' "$WORK/again.json" >/dev/null ||
    fail "the live daemon stopped serving: $(cat "$WORK/again.json")"
as_nobody flock -n "$STORE/private/reclaimer.lock" true 2>/dev/null && fail "uid nobody can take the instance lock"
note "a second daemon and --once exit 3 and leave the store alone"
stop_daemon

# ---- an oversized claim evicts nothing ----
start_daemon --interval 200ms --keep-alive 1h --scrub-rate 0 --capacity $((M1_BYTES * 3 / 2))
[ "$(tensor_count)" = 4 ] || fail "m1 not resident after restart"
as_nobody "$PROBE" load --store "$STORE" "$WORK/big.safetensors" >"$WORK/big.json" 2>>"$WORK/probe.log"
jq -e '.rejected > 0' "$WORK/big.json" >/dev/null || fail "an ingest past capacity was not refused: $(cat "$WORK/big.json")"
wait_passes 3
[ "$(metric tetris_evictions_total)" = 0 ] || fail "an oversized claim evicted $(metric tetris_evictions_total) tensors"
while read -r f; do
    [ -n "$(find "$STORE/public/tensors" -name "$f")" ] || fail "m1's cold $f evicted for a claim that could never fit"
done <"$WORK/m1.digests"
note "an ingest bigger than the capacity is refused and evicts nothing"
stop_daemon

# ---- /healthz tells a stuck main loop ----
start_daemon --interval 200ms --keep-alive 1h --scrub-rate 0 --health-deadline 1 --pin-file "$WORK/pins"
[ "$(healthz_code)" = 200 ] || fail "healthz of a healthy daemon: $(healthz_code)"
# A pin file that is a FIFO, with a stalled writer or none, does not hold
# the loop: it is refused as not a regular file, the passes go on.
mkfifo "$WORK/pins"
sh -c 'exec 3>"$1"; exec sleep 600' sh "$WORK/pins" &
WRITER=$!
KILL_ON_EXIT="$KILL_ON_EXIT $WRITER"
wait_until 30 'grep -q "event=pin-file-unreadable.*not a regular file" "$DAEMON_LOG"' ||
    fail "a FIFO pin file was not refused"
sleep 2
[ "$(healthz_code)" = 200 ] || fail "a stalled FIFO pin file held the main loop: healthz $(healthz_code)"
kill "$WRITER"
wait "$WRITER" 2>/dev/null
# Without a writer, opening the FIFO to read would wait for one.
sleep 2
[ "$(healthz_code)" = 200 ] || fail "a FIFO pin file without a writer held the main loop"
# Passes every 200 ms, yet an unchanged bad file is said once.
[ "$(grep -c "event=pin-file-unreadable" "$DAEMON_LOG")" = 1 ] ||
    fail "an unchanged bad pin file logged at every pass: $(grep -c "event=pin-file-unreadable" "$DAEMON_LOG")"
# The main loop's thread (the process's first) is stopped for real, alone:
# a tracer seizes and interrupts that one thread and holds it until killed
# (a tracer's exit lets it go). The HTTP threads go on answering.
"$PY" - "$RECLAIMER_PID" <<'PY' &
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
tid = int(sys.argv[1])
for req in (PTRACE_SEIZE, PTRACE_INTERRUPT):
    if libc.ptrace(req, tid, None, None) != 0:
        sys.exit("ptrace %#x of %d: %s" % (req, tid, os.strerror(ctypes.get_errno())))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(60)
PY
HELPER=$!
KILL_ON_EXIT="$KILL_ON_EXIT $HELPER"
wait_until 60 '[ "$(healthz_code)" = 503 ]' || fail "healthz stayed $(healthz_code) with a stuck main loop"
curl -s "http://127.0.0.1:$RECLAIMER_PORT/healthz" | jq -e '.pass_overdue == true' >/dev/null ||
    fail "healthz does not say the pass is overdue"
kill "$HELPER"
wait "$HELPER" 2>/dev/null
wait_until 60 '[ "$(healthz_code)" = 200 ]' || fail "healthz did not recover once the loop moved"
note "a FIFO pin file is refused, not waited on; /healthz is 503 while the main loop is stuck, 200 once it moves"
stop_daemon

# ---- a slow HTTP client takes a few slots, not all ----
cat >"$WORK/slow.py" <<'EOF'
# Opens N connections, sends a request line and keeps adding header bytes
# so that no idle timeout fires; writes how many are still open.
import os, socket, sys, time
port, n, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
socks = []
for _ in range(n):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    except OSError:
        pass
while True:
    time.sleep(0.5)
    kept = []
    for s in socks:
        try:
            s.sendall(b"X-Slow: 1\r\n")
            kept.append(s)
        except OSError:
            s.close()
    socks = kept
    with open(out + ".new", "w") as f:
        f.write("%d\n" % len(socks))
    os.rename(out + ".new", out)
EOF
start_daemon --interval 200ms --scrub-rate 0
chmod 644 "$WORK/slow.py"
mkdir -m 777 "$WORK/slow"
setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups "$PY" "$WORK/slow.py" "$RECLAIMER_PORT" 300 "$WORK/slow/held" &
SLOW=$!
KILL_ON_EXIT="$KILL_ON_EXIT $SLOW"
wait_until 60 "[ -s '$WORK/slow/held' ] && [ \"\$(cat '$WORK/slow/held')\" -le 8 ]" ||
    fail "the slow client holds $(cat "$WORK/slow/held" 2>/dev/null) connections"
kill -0 "$SLOW" || fail "the slow client died"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 --interface 127.0.0.2 "http://127.0.0.1:$RECLAIMER_PORT/healthz")
[ "$code" = 200 ] || fail "another client got $code while a slow one holds connections"
note "a slow client keeps $(cat "$WORK/slow/held") connections; others are served"
kill "$SLOW"
stop_daemon
echo "ok $PROG"
