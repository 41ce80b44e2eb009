#!/bin/sh
# test-hostile-locks.sh - a function pod that locks everything it can see
# does not stop the node daemon. As an unprivileged uid (nobody) that can
# read the store's public part, like a pod that mounts it read-only, the
# attacker opens every file and directory it can reach and holds an
# exclusive flock on each, and finds private/ closed to it. Meanwhile the
# daemon (root) ingests for another client, a pod-like client (nobody)
# loads through the daemon from public/ alone, reclaim passes complete and
# free what nobody holds, and SIGTERM stops the daemon.
set -eu
. "$(dirname "$0")/../lib/reclaimer.sh"

[ "$(id -u)" = 0 ] || skip "needs root to act as another uid"
command -v setpriv >/dev/null 2>&1 || skip "no setpriv"
command -v flock >/dev/null 2>&1 || skip "no flock(1)"
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
as_nobody() { $NOBODY "$@"; }
chmod 755 "$WORK" # nobody reaches the store as a pod reaches its mount

synth "$WORK/m1.safetensors" 8 65536 1
synth "$WORK/m2.safetensors" 8 65536 2
synth "$WORK/m3.safetensors" 4 65536 3
chmod 644 "$WORK"/*.safetensors
start_daemon --interval 1 --keep-alive 0 --scrub-rate 0
hold "$WORK/m1.safetensors" "$WORK/h1.json"
H1=$HOLD_PID

# The attacker: one exclusive flock per file or directory it can open.
as_nobody find "$STORE" \( -type f -o -type d \) -print 2>/dev/null >"$WORK/visible" || true # private/ is unreadable
[ -s "$WORK/visible" ] || fail "nobody sees nothing of the store"
grep -q "^$STORE/private/" "$WORK/visible" && fail "nobody can list private/: $(grep "^$STORE/private/" "$WORK/visible" | head -3)"
grep -v "^$STORE/private\$" "$WORK/visible" >"$WORK/targets"
grep -q "/public/tensors/../" "$WORK/targets" || fail "nobody cannot see the tensors"
lockers=""
while IFS= read -r f; do
    # Opened read-only, as a pod can; the lock stays with the open file
    # that sleep inherits, in the same process ($!, not a subshell).
    $NOBODY sh -c 'exec 9<"$1" && flock -x -n 9 && exec sleep 3600' sh "$f" \
        </dev/null >/dev/null 2>&1 &
    lockers="$lockers $!"
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
done <"$WORK/targets"
# A locker execs sleep once it holds its lock, and exits at once if it
# cannot: every locker must end up asleep.
asleep() {
    _n=0
    for _p in $lockers; do [ "$(cat "/proc/$_p/comm" 2>/dev/null)" = sleep ] && _n=$((_n + 1)); done
    echo $_n
}
locked=$(wc -l <"$WORK/targets")
wait_until 30 "[ \$(asleep) -eq $locked ]" || fail "only $(asleep) of $locked locks taken"
note "nobody holds flock on $locked files and directories of the public store"

# private/ is closed to it, whatever name it tries.
for p in "$STORE/private" "$STORE/private/use.lock" "$STORE/private/locks" "$STORE/private/holders"; do
    [ "$(status as_nobody cat "$p")" != 0 ] || fail "nobody could open $p"
    grep -q "Permission denied" "$WORK/status.err" || fail "opening $p: $(cat "$WORK/status.err")"
done
[ "$(status as_nobody flock -x -n "$STORE/private/use.lock" true)" != 0 ] ||
    fail "nobody took the use lock"

# Ingests go on for another client.
hold "$WORK/m2.safetensors" "$WORK/h2.json"
H2=$HOLD_PID
grep -q '"fallback":false' "$WORK/h2.json" || fail "ingest under the attack fell back: $(cat "$WORK/h2.json")"
grep -q '"ingested":8' "$WORK/h2.json" || fail "ingest under the attack: $(cat "$WORK/h2.json")"

# A pod-like client (nobody) with only public/ loads through the daemon.
as_nobody "$PROBE" load --store "$STORE/public" "$WORK/m3.safetensors" >"$WORK/pod.json" 2>>"$WORK/probe.log" ||
    fail "pod-like load failed: $(cat "$WORK/pod.json")"
grep -q '"fallback":false' "$WORK/pod.json" || fail "pod-like load fell back: $(cat "$WORK/pod.json")"
grep -q '"mapped_bytes":262144' "$WORK/pod.json" || fail "pod-like load did not map: $(cat "$WORK/pod.json")"

# Reclaim passes complete and free what nobody holds any more (m1, m3),
# even though the attacker still locks those tensors' files.
release "$H1"
wait_passes 2
wait_until 60 "[ \$(tensor_count) -eq 8 ]" || fail "reclaim did not free released tensors: $(tensor_count) left"
grep -q '"ingested":8' "$WORK/h2.json"
note "passes $(passes); tensors left $(tensor_count) (the live holder's 8)"

# SIGTERM stops it, within a bounded wait.
release "$H2"
kill -TERM "$RECLAIMER_PID"
wait_until 60 "! kill -0 $RECLAIMER_PID" || fail "daemon ignored SIGTERM under the attack"
rc=0
wait "$RECLAIMER_PID" || rc=$?
[ "$rc" = 0 ] || fail "daemon exited $rc on SIGTERM"
echo "ok $PROG: $locked locks held by nobody; ingest, pod load, reclaim and SIGTERM unaffected"
