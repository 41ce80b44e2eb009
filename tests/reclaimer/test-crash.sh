#!/bin/sh
# test-crash.sh - SIGKILL tetris-reclaimer in the middle of ingests, many
# times, and restart it. With keep-alive 0 any reference the daemon loses
# shows up as a freed tensor, so the test checks:
#  - every loader completes (served, or fell back to a private load);
#  - a long-lived instance that loaded before the first crash keeps all its
#    tensors through every crash (its references are re-adopted);
#  - after the last restart no temp file is left and `tetris-agent verify`
#    finds every stored tensor intact.
# RECLAIMER_CRASH_TRIALS sets the number of crashes (default 25).
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
TRIALS=${RECLAIMER_CRASH_TRIALS:-25}
AGENT="$BIN/tetris-agent"

synth "$WORK/keep.safetensors" 6 262144 100
i=0
while [ $i -lt 4 ]; do synth "$WORK/m$i.safetensors" 12 524288 $((200 + i)); i=$((i + 1)); done

start_daemon --interval 100ms --keep-alive 0 --scrub-rate 0
hold "$WORK/keep.safetensors" "$WORK/keep.json"; KEEP=$HOLD_PID
"$PROBE" manifest "$WORK/keep.safetensors" | jq -r '.tensors[].digest | sub("sha256:"; "")' >"$WORK/keep.digests"

keep_intact() {
    while read -r d; do
        [ -n "$(find "$STORE/public/tensors" -name "$d")" ] || return 1
    done <"$WORK/keep.digests"
}

trial=0
fallbacks=0
served=0
while [ $trial -lt "$TRIALS" ]; do
    pids=""
    i=0
    while [ $i -lt 4 ]; do
        "$PROBE" load --store "$STORE" --timeout-ms 20000 "$WORK/m$(( (trial + i) % 4 )).safetensors" \
            >"$WORK/l$i.json" 2>>"$WORK/probe.log" &
        pids="$pids $!"
        i=$((i + 1))
    done
    # Kill somewhere in the loads: 0-290 ms in.
    sleep "$(printf "0.%03d" $(( (trial * 37) % 30 * 10 )))"
    kill -KILL "$RECLAIMER_PID"
    wait "$RECLAIMER_PID" 2>/dev/null
    start_daemon --interval 100ms --keep-alive 0 --scrub-rate 0
    for p in $pids; do
        wait "$p" || fail "trial $trial: a loader failed (exit $?)"
    done
    for f in "$WORK"/l?.json; do
        grep -q '"fallback":true' "$f" && fallbacks=$((fallbacks + 1)) || served=$((served + 1))
    done
    wait_passes 2
    keep_intact || fail "trial $trial: the live instance's tensors were lost"
    kill -0 "$KEEP" || fail "the live instance died"
    trial=$((trial + 1))
done
note "$TRIALS crashes: loaders served=$served fell-back=$fallbacks; live instance kept all tensors"
[ "$(metric tetris_adopted_holders_total)" -ge 1 ] || fail "the live instance's holder was not adopted"

release "$KEEP"
stop_daemon
"$RECLAIMER" --store "$STORE" --once --keep-alive 1h >>"$DAEMON_LOG" 2>&1 || fail "--once after crashes"
[ -z "$(find "$STORE/private/tmp" -type f)" ] || fail "temp files left after repair: $(ls "$STORE/private/tmp")"
"$AGENT" verify --store "$STORE" >"$WORK/verify.out" 2>&1 || fail "store does not verify: $(tail -5 "$WORK/verify.out")"
note "store verifies clean; no temp files"
echo "ok $PROG"
