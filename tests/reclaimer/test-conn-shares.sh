#!/bin/sh
# test-conn-shares.sh - fair shares of the daemon's ingest connections
# (issue: two uids of one tenant held every slot past the idle timeout and
# the other tenant was refused). Pods run as uids of their own (setpriv),
# on the real sockets of a daemon serving the shared store and tenants
# alpha and beta, --max-connections 12: a share of 4 per store.
#   - alpha's two uids open 9 connections each that hold references (so
#     the idle timeout never closes them): alpha gets its share, 4, and no
#     more while the others have not had theirs;
#   - past the idle timeout, beta and the shared store still get their 4;
#   - the node is full: beta's fifth is refused, and so is one more for
#     beta once alpha has let go (alpha's share stays free for alpha),
#     which gets it back at once.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"

[ "$(id -u)" = 0 ] || skip "needs root, to run pods as uids of their own"
command -v setpriv >/dev/null 2>&1 || skip "setpriv (util-linux) is not installed"

chmod 755 "$WORK"
A="$STORE/tenants/alpha"
B="$STORE/tenants/beta"
synth "$WORK/m.safetensors" 2 4096 1
chmod 644 "$WORK/m.safetensors"

# conns_as UID SOCKET COUNT OUT: a pod of UID opens COUNT connections that
# each ingest m (and so hold references), and keeps those it got; sets
# CONNS to its pid.
conns_as() {
    setpriv --reuid="$1" --regid="$1" --clear-groups \
        "$PROBE" conns --socket "$2" --count "$3" --ingest "$WORK/m.safetensors" --hold >"$4" &
    CONNS=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $CONNS"
    wait_until 60 "grep -q accepted '$4'" || fail "conns as $1 did not report: $(cat "$4")"
}
accepted() { jq .accepted "$1"; }
tconn() {
    curl -sS --max-time 20 "http://127.0.0.1:$RECLAIMER_TENANT_PORT/metrics" |
        awk -v s="tetris_ingest_connections{tenant=\"$1\"}" '$1 == s { print $2 }'
}

start_daemon --interval 200ms --scrub-rate 0 --request-timeout 1s --tenants alpha,beta --tenant-listen 127.0.0.1:0 \
    --max-connections 12 --max-connections-per-pid 12 \
    --tenant-uids alpha=60001-60002,beta=60100
wait_until 30 "[ -S '$A/public/ingest.sock' ] && [ -S '$B/public/ingest.sock' ]" ||
    fail "tenants not served"

# ---- alpha's two uids try to take every slot ----
conns_as 60001 "$A/public/ingest.sock" 9 "$WORK/a1.out"
A1=$CONNS
conns_as 60002 "$A/public/ingest.sock" 9 "$WORK/a2.out"
A2=$CONNS
[ "$(($(accepted "$WORK/a1.out") + $(accepted "$WORK/a2.out")))" = 4 ] ||
    fail "alpha took more than its share of 4: $(cat "$WORK/a1.out" "$WORK/a2.out")"
grep -q "share of --max-connections" "$WORK/a2.out" || fail "refusal unclear: $(cat "$WORK/a2.out")"
grep -q "event=ingest-connection-refused tenant=alpha .*uid=60002" "$DAEMON_LOG" ||
    fail "alpha's refusals not logged"
note "alpha's two uids asked for 18 connections holding references, got 4 (its share)"

# Past the idle timeout, alpha's connections still count: they hold
# references.
sleep 2
[ "$(tconn alpha)" = 4 ] || fail "alpha's connections: $(tconn alpha), want 4 held"

# ---- beta and the shared store get their shares ----
conns_as 60100 "$B/public/ingest.sock" 4 "$WORK/b1.out"
B1=$CONNS
[ "$(accepted "$WORK/b1.out")" = 4 ] || fail "beta did not get its share: $(cat "$WORK/b1.out")"
conns_as 60200 "$STORE/public/ingest.sock" 4 "$WORK/s1.out"
S1=$CONNS
[ "$(accepted "$WORK/s1.out")" = 4 ] || fail "the shared store did not get its share: $(cat "$WORK/s1.out")"
note "beta and the shared store got their 4 each while alpha held its own"

# ---- the node is full; a share stays its owner's ----
conns_as 60100 "$B/public/ingest.sock" 1 "$WORK/b2.out"
[ "$(accepted "$WORK/b2.out")" = 0 ] || fail "a thirteenth connection was admitted: $(cat "$WORK/b2.out")"
kill "$B1" "$A1" "$A2" 2>/dev/null
wait_until 30 '[ "$(tconn alpha)" = 0 ] && [ "$(tconn beta)" = 0 ]' || fail "connections not released"
conns_as 60100 "$B/public/ingest.sock" 5 "$WORK/b3.out"
B3=$CONNS
[ "$(accepted "$WORK/b3.out")" = 4 ] ||
    fail "beta took alpha's unused share, or not its own: $(cat "$WORK/b3.out")"
conns_as 60001 "$A/public/ingest.sock" 4 "$WORK/a3.out"
[ "$(accepted "$WORK/a3.out")" = 4 ] || fail "alpha did not get its share back: $(cat "$WORK/a3.out")"
note "full node: beta got 4 of 5 while alpha had none (alpha's share kept free), alpha got 4 back"
kill "$B3" "$S1" "$CONNS" 2>/dev/null
stop_daemon
echo "ok $PROG"
