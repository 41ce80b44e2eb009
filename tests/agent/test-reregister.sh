#!/bin/sh
# A daemon restart that cannot adopt the agents' references (no view of
# their pids: a daemon without hostPID, here one in its own pid namespace;
# or, where namespaces are not allowed, the old holder files removed) does
# not cost a holder its tensors: the agent notices the lost connection,
# reconnects and registers its references with the new daemon, which then
# keeps them through reclaim passes with keep-alive 0. The agent's mappings
# stay as they were. Once the agent lets go, the same passes free the
# tensors (so the passes do run).
. "$(dirname "$0")/lib.sh"
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"
store="$WORK/store"
model="$MODELS/silero_vad_v6.onnx"
mkdir -p "$store"

wait_socket() { # pid log
    i=0
    while [ ! -S "$store/ingest.sock" ]; do
        kill -0 "$1" 2>/dev/null || fail "daemon died: $(cat "$2")"
        i=$((i + 1)); [ $i -lt 300 ] || fail "daemon socket did not appear: $(cat "$2")"
        sleep 0.1
    done
}
live_holders() {
    "$BIN/tetris-agent" inspect --store "$store" 2>/dev/null | grep -c " live " || true
}
missing_tensors() { # how many of the model's tensors the store lacks
    n=0
    for hex in $(jq -r '.tensors[].digest | sub("sha256:"; "")' "$WORK/manifest.json" | sort -u); do
        [ -f "$store/tensors/$(printf %.2s "$hex")/$hex" ] || n=$((n + 1))
    done
    echo $n
}
passes() {
    grep -c "event=reclaim-pass" "$WORK/daemon2.log" || true
}

"$BIN/tetris-agent" index "$model" -o "$WORK/manifest.json" 2>/dev/null || fail "cannot index $model"
"$BIN/tetris-reclaimer" --store "$store" --listen "" --interval 3600 2>"$WORK/daemon1.log" &
daemon=$!
KILL_ON_EXIT=$daemon
wait_socket $daemon "$WORK/daemon1.log"

mkfifo "$WORK/stdin"
"$BIN/tetris-agent" load --store "$store" --hold "$model" \
    <"$WORK/stdin" >"$WORK/out" 2>"$WORK/agent.log" &
agent=$!
KILL_ON_EXIT="$agent $daemon"
exec 3>"$WORK/stdin"
i=0
while [ ! -s "$WORK/out" ]; do
    kill -0 $agent 2>/dev/null || fail "load --hold died: $(cat "$WORK/agent.log")"
    i=$((i + 1)); [ $i -lt 300 ] || fail "no result from load --hold"
    sleep 0.1
done
assert_shared "$(cat "$WORK/out")" "load --hold"
[ "$(live_holders)" = 1 ] || fail "no live holder for the agent"
maps_before=$(grep -c "$store/tensors/" /proc/$agent/maps)

# The daemon dies; its lock on the agent's holder goes with it.
kill -KILL $daemon
wait $daemon 2>/dev/null || true
rm -f "$store/ingest.sock"
if unshare --pid --fork --kill-child --mount-proc true 2>/dev/null; then
    how="a pid namespace of its own"
    ns="unshare --pid --fork --kill-child --mount-proc"
else
    how="the old holder files removed"
    ns=""
    rm -f "$store"/holders/*.ref
fi
# The new daemon starts with a long keep-alive: it must not free what it
# released at start-up before the agent had a chance to reconnect (the
# real keep-alive is minutes; reconnecting takes seconds).
printf 'interval: 3600s\nkeep_alive: 3600s\n' >"$WORK/reclaimer.yaml"
# (The daemon must not inherit the agent's stdin, fd 3, or that never
# closes.)
TETRIS_LOG_LEVEL=debug $ns "$BIN/tetris-reclaimer" --store "$store" --listen "" \
    --config "$WORK/reclaimer.yaml" 2>"$WORK/daemon2.log" 3>&- &
daemon=$!
KILL_ON_EXIT="$agent $daemon"
wait_socket $daemon "$WORK/daemon2.log"
# In a namespace $daemon is unshare, which ignores SIGTERM: signal the
# daemon, the namespace's init, itself.
daemon_pid=$daemon
[ -n "$ns" ] && daemon_pid=$(cat /proc/$daemon/task/$daemon/children)
KILL_ON_EXIT="$agent $daemon_pid"
grep -q "event=holder-adopted" "$WORK/daemon2.log" &&
    fail "the new daemon adopted the old holder: this test needs one that cannot"

i=0
until grep -q "event=daemon-reregistered" "$WORK/agent.log" && [ "$(live_holders)" = 1 ]; do
    kill -0 $agent 2>/dev/null || fail "the agent died: $(cat "$WORK/agent.log")"
    i=$((i + 1)); [ $i -lt 300 ] || fail "the agent did not register with the new daemon: $(cat "$WORK/agent.log")"
    sleep 0.1
done
# Now reclaim hard: a pass every 0.2 s with keep-alive 0 (SIGHUP re-reads
# the file).
printf 'interval: 0.2s\nkeep_alive: 0s\n' >"$WORK/reclaimer.yaml"
kill -HUP $daemon_pid
grep -q "event=daemon-connection-lost" "$WORK/agent.log" || fail "no connection-lost log line"
start=$(passes)
i=0
while [ $(($(passes) - start)) -lt 3 ]; do
    i=$((i + 1)); [ $i -lt 300 ] || fail "the new daemon runs no reclaim passes: $(tail "$WORK/daemon2.log")"
    sleep 0.1
done
[ "$(missing_tensors)" = 0 ] || fail "$(missing_tensors) of the held model's tensors were freed"
kill -0 $agent 2>/dev/null || fail "the agent died"
[ "$(grep -c "$store/tensors/" /proc/$agent/maps)" = "$maps_before" ] || fail "the agent's mappings changed"
grep "$store/tensors/" /proc/$agent/maps | grep -q "(deleted)" && fail "the agent maps freed tensors"
echo "ok daemon restarted with $how: the agent re-registered; 3 passes with keep-alive 0 freed none of its tensors"

exec 3>&-
wait $agent || fail "load --hold exited non-zero: $(cat "$WORK/agent.log")"
i=0
while [ "$(missing_tensors)" = 0 ]; do
    i=$((i + 1)); [ $i -lt 300 ] || fail "the tensors outlived their last holder"
    sleep 0.1
done
echo "ok after the agent let go, the same passes freed its tensors"
kill -TERM $daemon_pid
wait $daemon || fail "the daemon did not stop cleanly: $(tail -3 "$WORK/daemon2.log")"
