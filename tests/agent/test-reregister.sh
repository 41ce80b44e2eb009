#!/bin/sh
# Each holding process (`tetris-agent load --hold`, `tetris-onnx-run
# --hold`) notices when the daemon goes away, reconnects and registers its
# references with the new daemon.
#
# First a restart that can adopt the old holders (it sees the pids): the
# adopted holder of each process is released once the process has
# registered again, so the holders and the logical and saved bytes count
# each process once, as they did before the agents were back.
#
# Then a restart that cannot adopt them (no view of their pids: a daemon
# without hostPID, here one in its own pid namespace; or, where namespaces
# are not allowed, the old holder files removed) does not cost a holder
# its tensors: the new daemon keeps the re-registered references through
# reclaim passes with keep-alive 0. Their mappings stay as they were. Once
# they let go, the same passes free the tensors (so the passes do run).
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"
store="$WORK/store"
mkdir -p "$store"
names="agent run"
agent_model="$MODELS/silero_vad_v6.onnx"
run_model="$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx"

wait_socket() { # pid log
    wait_until 30 "[ -S '$store/public/ingest.sock' ] || ! kill -0 $1" ||
        fail "daemon socket did not appear: $(cat "$2")"
    [ -S "$store/public/ingest.sock" ] || fail "daemon died: $(cat "$2")"
}
live_holders() {
    "$BIN/tetris-agent" inspect --store "$store" 2>/dev/null | grep -c " live " || true
}
missing_tensors() { # how many of the held models' tensors the store lacks
    n=0
    for hex in $(jq -r '.tensors[].digest | sub("sha256:"; "")' "$WORK"/*.manifest | sort -u); do
        [ -f "$store/public/tensors/$(printf %.2s "$hex")/$hex" ] || n=$((n + 1))
    done
    echo $n
}
passes() { # [log]
    grep -c "event=reclaim-pass" "${1:-$WORK/daemon2.log}" || true
}
wait_passes() { # log n: waits for n more passes
    want=$(($(passes "$1") + $2))
    wait_until 30 "[ \$(passes '$1') -ge $want ]" || fail "the daemon runs no reclaim passes: $(tail "$1")"
}
wait_reregistered() { # times: each holder has re-registered that often
    for n in $names; do
        wait_until 30 "[ \$(grep -c event=daemon-reregistered '$WORK/$n.log') -ge $1 ] || ! kill -0 $(pid_of $n)" ||
            fail "$n did not register with the new daemon: $(cat "$WORK/$n.log")"
        kill -0 $(pid_of $n) 2>/dev/null || fail "$n died: $(cat "$WORK/$n.log")"
        grep -q "event=daemon-connection-lost" "$WORK/$n.log" || fail "$n: no connection-lost log line"
    done
}
store_metric() { # name port: the shared store's value (no tenants: no label)
    curl -sS --max-time 20 "http://127.0.0.1:$2/metrics" |
        awk -v n="$1" '$1 == n || $1 == n "{tenant=\"\"}" { print $2 }'
}
pid_of() { cat "$WORK/$1.pid"; }
store_maps() { grep "$store/public/tensors/" /proc/$(pid_of $1)/maps; }

for n in $names; do
    eval "model=\$${n}_model"
    "$BIN/tetris-agent" index "$model" -o "$WORK/$n.manifest" 2>/dev/null || fail "cannot index $model"
done
reclaimer_start "$store" "$WORK/daemon1.log" --listen "" --interval 3600
daemon=$RECLAIMER_PID

# Two holders, each held until its stdin (a fifo: fd 3, fd 4) closes.
mkfifo "$WORK/agent.in" "$WORK/run.in"
"$BIN/tetris-agent" load --store "$store" --hold "$agent_model" \
    <"$WORK/agent.in" >"$WORK/agent.out" 2>"$WORK/agent.log" &
echo $! >"$WORK/agent.pid"
exec 3>"$WORK/agent.in"
"$BIN/tetris-onnx-run" "$run_model" --store "$store" --hold \
    <"$WORK/run.in" >"$WORK/run.out" 2>"$WORK/run.log" 3>&- &
echo $! >"$WORK/run.pid"
exec 4>"$WORK/run.in"
KILL_ON_EXIT="$KILL_ON_EXIT $(pid_of agent) $(pid_of run)"
for n in $names; do
    wait_output $(pid_of $n) "$WORK/$n.out" $n "$WORK/$n.log"
    assert_shared "$(cat "$WORK/$n.out")" "$n --hold"
    store_maps $n >"$WORK/$n.maps"
done
[ "$(live_holders)" = 2 ] || fail "$(live_holders) live holders, want 2"

# The daemon dies; its locks on the holders go with it. The next one sees
# the pids and adopts both holders at start-up, before its first pass and
# before it serves, so that pass counts each process once: the reference.
kill -KILL $daemon
wait $daemon 2>/dev/null || true
rm -f "$store/public/ingest.sock"
printf 'interval: 3600s\nkeep_alive: 3600s\n' >"$WORK/reclaimer.yaml"
TETRIS_LOG_LEVEL=debug "$BIN/tetris-reclaimer" --store "$store" --listen 127.0.0.1:0 \
    --config "$WORK/reclaimer.yaml" 2>"$WORK/adopting.log" 3>&- 4>&- &
daemon=$!
KILL_ON_EXIT="$KILL_ON_EXIT $daemon"
wait_socket $daemon "$WORK/adopting.log"
[ "$(grep -c "event=holder-adopted" "$WORK/adopting.log")" = 2 ] ||
    fail "the new daemon did not adopt both holders: $(cat "$WORK/adopting.log")"
wait_until 30 "grep -q 'event=http-listening.*port=[0-9]' '$WORK/adopting.log'" ||
    fail "no HTTP port: $(cat "$WORK/adopting.log")"
port=$(grep -o 'event=http-listening.*port=[0-9]*' "$WORK/adopting.log" | sed 's/.*port=//')
want_logical=$(store_metric tetris_store_logical_bytes $port)
want_saved=$(store_metric tetris_store_saved_bytes $port)
[ "$(store_metric tetris_store_holders $port)" = 2 ] ||
    fail "$(store_metric tetris_store_holders $port) holders after adoption, want 2"
[ "${want_saved:-0}" -gt 0 ] || fail "no saved bytes after adoption: $want_saved"
wait_reregistered 1
wait_until 30 "[ \$(grep -c event=adopted-holder-replaced '$WORK/adopting.log') = 2 ]" ||
    fail "the adopted holders were not released: $(cat "$WORK/adopting.log")"
[ "$(live_holders)" = 2 ] || fail "$(live_holders) live holders after adoption and re-registration, want 2"
printf 'interval: 0.2s\nkeep_alive: 3600s\n' >"$WORK/reclaimer.yaml"
kill -HUP $daemon
wait_passes "$WORK/adopting.log" 2
holders=$(store_metric tetris_store_holders $port)
logical=$(store_metric tetris_store_logical_bytes $port)
saved=$(store_metric tetris_store_saved_bytes $port)
[ "$holders" = 2 ] || fail "tetris_store_holders is $holders after re-registration, want 2"
[ "$logical" = "$want_logical" ] || fail "logical bytes $logical after re-registration, want $want_logical"
[ "$saved" = "$want_saved" ] || fail "saved bytes $saved after re-registration, want $want_saved"
for n in $names; do
    store_maps $n | cmp -s - "$WORK/$n.maps" || fail "$n: its mappings changed"
done
echo "ok daemon restarted seeing the pids: both holders adopted, re-registered, each counted once ($holders holders, $saved saved bytes)"

kill -KILL $daemon
wait $daemon 2>/dev/null || true
rm -f "$store/public/ingest.sock"
if unshare --pid --fork --kill-child --mount-proc true 2>/dev/null; then
    how="a pid namespace of its own"
    ns="unshare --pid --fork --kill-child --mount-proc"
else
    how="the old holder files removed"
    ns=""
    rm -f "$store"/private/holders/*.ref
fi
# The new daemon starts with a long keep-alive: it must not free what it
# released at start-up before the holders had a chance to reconnect (the
# real keep-alive is minutes; reconnecting takes seconds). It must not
# inherit the holders' stdin (fd 3, 4), or that never closes.
printf 'interval: 3600s\nkeep_alive: 3600s\n' >"$WORK/reclaimer.yaml"
TETRIS_LOG_LEVEL=debug $ns "$BIN/tetris-reclaimer" --store "$store" --listen "" \
    --config "$WORK/reclaimer.yaml" 2>"$WORK/daemon2.log" 3>&- 4>&- &
daemon=$!
KILL_ON_EXIT="$KILL_ON_EXIT $daemon"
wait_socket $daemon "$WORK/daemon2.log"
# In a namespace $daemon is unshare, which ignores SIGTERM: signal the
# daemon, the namespace's init, itself.
daemon_pid=$daemon
[ -n "$ns" ] && daemon_pid=$(cat /proc/$daemon/task/$daemon/children)
KILL_ON_EXIT="$KILL_ON_EXIT $daemon_pid"
grep -q "event=holder-adopted" "$WORK/daemon2.log" &&
    fail "the new daemon adopted an old holder: this test needs one that cannot"

wait_reregistered 2
[ "$(live_holders)" = 2 ] || fail "$(live_holders) live holders after re-registration, want 2"
# Now reclaim hard: a pass every 0.2 s with keep-alive 0 (SIGHUP re-reads
# the file).
printf 'interval: 0.2s\nkeep_alive: 0s\n' >"$WORK/reclaimer.yaml"
kill -HUP $daemon_pid
wait_passes "$WORK/daemon2.log" 3
[ "$(missing_tensors)" = 0 ] || fail "$(missing_tensors) of the held models' tensors were freed"
for n in $names; do
    kill -0 $(pid_of $n) 2>/dev/null || fail "$n died"
    store_maps $n | cmp -s - "$WORK/$n.maps" || fail "$n: its mappings changed"
done
echo "ok daemon restarted with $how: both holders re-registered; 3 passes with keep-alive 0 freed none of their tensors"

exec 3>&- 4>&-
for n in $names; do
    wait $(pid_of $n) || fail "$n exited non-zero: $(cat "$WORK/$n.log")"
done
wait_until 30 '[ "$(missing_tensors)" != 0 ]' || fail "the tensors outlived their last holder"
echo "ok after the holders let go, the same passes freed their tensors"
kill -TERM $daemon_pid
wait $daemon || fail "the daemon did not stop cleanly: $(tail -3 "$WORK/daemon2.log")"
