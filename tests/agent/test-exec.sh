#!/bin/sh
# `tetris-agent exec` runs its command under the model view's references:
# the command's exit status becomes exec's (128+N for signal N), SIGTERM
# and SIGUSR1 reach it, a missing command is 127 and one that cannot run
# 126. The references are held exactly while the command runs (a live
# holder through the real daemon, or our own with --direct), then the view
# and the references are gone. A SIGKILLed exec takes its command with it
# (PR_SET_PDEATHSIG). A daemon restart while the command runs gets the
# references registered again. As PID 1, exec reaps orphaned zombies.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
# Views made without a directory (and one a SIGKILLed exec leaves) go here.
export TMPDIR="$WORK"
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"
model="$MODELS/silero_vad_v5.onnx"
store="$WORK/store"
mkdir -p "$store"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
agent() { "$BIN/tetris-agent" "$@"; }
live() { agent inspect --store "$store" 2>/dev/null | grep -c " live " || true; }

# ---- exit statuses ----
for case in "exit 0:0" "exit 3:3" "kill -KILL \$\$:137" "kill -TERM \$\$:143"; do
    cmd=${case%:*} want=${case##*:}
    got=$(status agent exec --private --model "$model" -- sh -c "$cmd")
    [ "$got" = "$want" ] || fail "'$cmd': exec exited $got, want $want: $(cat "$WORK/status.err")"
done
[ "$(status agent exec --private --model "$model" -- "$WORK/no-such-command")" = 127 ] ||
    fail "a missing command: not 127"
grep -q "event=exec-failed" "$WORK/status.err" || fail "a missing command: no message"
printf '#!/bin/sh\n' >"$WORK/not-executable"
[ "$(status agent exec --private --model "$model" -- "$WORK/not-executable")" = 126 ] ||
    fail "a command that cannot run: not 126"
echo "ok exit statuses: 0, 3, 137 (SIGKILL), 143 (SIGTERM), 127 missing, 126 not executable"

# ---- a command that runs until told: $WORK/stop appears ----
cat >"$WORK/cmd.sh" <<'EOF'
#!/bin/sh
trap 'echo usr1 >>"$OUT.signals"' USR1
trap 'echo term >>"$OUT.signals"; exit 7' TERM
echo "$$ $TETRIS_MODEL_VIEW" >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
while [ ! -e "$OUT.stop" ]; do sleep 0.1; done
EOF
chmod +x "$WORK/cmd.sh"
# start_cmd NAME EXEC-OPTIONS...: exec in the background, waits for its
# command; sets EXEC (exec's pid), CMD (the command's) and VIEW.
start_cmd() {
    name=$1
    shift
    OUT="$WORK/$name.out" "$BIN/tetris-agent" exec "$@" --model "$model" -- "$WORK/cmd.sh" 2>"$WORK/$name.log" &
    EXEC=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $EXEC"
    wait_until 60 "[ -s '$WORK/$name.out' ] || ! kill -0 $EXEC" || fail "$name: the command did not start"
    [ -s "$WORK/$name.out" ] || fail "$name: exec died: $(cat "$WORK/$name.log")"
    read -r CMD VIEW <"$WORK/$name.out"
    KILL_ON_EXIT="$KILL_ON_EXIT $CMD"
}

# Signals reach the command; its status comes back.
start_cmd signals --private
kill -USR1 $EXEC
wait_until 10 "grep -q usr1 '$WORK/signals.out.signals'" || fail "SIGUSR1 did not reach the command"
kill -TERM $EXEC
rc=0
wait $EXEC || rc=$?
[ $rc = 7 ] || fail "SIGTERM: exec exited $rc, want the command's 7: $(cat "$WORK/signals.log")"
grep -q term "$WORK/signals.out.signals" || fail "SIGTERM did not reach the command"
echo "ok SIGUSR1 and SIGTERM forwarded; the command's status (7) returned"

# References exactly while the command runs: through the daemon, then
# with our own holder (--direct).
for mode in daemon direct; do
    opt=""
    [ $mode = direct ] && opt=--direct
    [ "$(live)" = 0 ] || fail "$mode: $(live) live holders before exec"
    # shellcheck disable=SC2086
    start_cmd $mode --store "$store" $opt
    [ -f "$VIEW/tensors.json" ] || fail "$mode: TETRIS_MODEL_VIEW=$VIEW has no tensors.json"
    jq -e '.shared == true' "$VIEW/tensors.json" >/dev/null || fail "$mode: the view is not shared"
    [ "$(live)" = 1 ] || fail "$mode: $(live) live holders while the command runs, want 1"
    anon=$(awk '/^Anonymous:/ { print $2 }' "/proc/$EXEC/smaps_rollup")
    touch "$WORK/$mode.out.stop"
    wait $EXEC || fail "$mode: exec exited non-zero: $(cat "$WORK/$mode.log")"
    [ ! -e "$VIEW" ] || fail "$mode: the view outlived the command"
    wait_until 10 '[ "$(live)" = 0 ]' || fail "$mode: the references outlived the command"
    echo "ok $mode: one live holder while the command ran (exec: ${anon} kB anonymous), none and no view after"
done

# A SIGKILLed exec takes its command along.
start_cmd killed --private
kill -KILL $EXEC
wait $EXEC 2>/dev/null || true
wait_until 10 "! kill -0 $CMD" || fail "the command outlived a SIGKILLed exec"
echo "ok SIGKILLed exec: its command died too"

# A daemon restart while the command runs: exec registers again.
start_cmd restart --store "$store"
kill -KILL $RECLAIMER_PID
wait $RECLAIMER_PID 2>/dev/null || true
rm -f "$store/public/ingest.sock"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
wait_until 30 "grep -q event=daemon-reregistered '$WORK/restart.log'" ||
    fail "exec did not register with the new daemon: $(cat "$WORK/restart.log")"
kill -0 $CMD 2>/dev/null || fail "the command died in the restart"
[ -f "$VIEW/tensors.json" ] || fail "the view went in the restart"
[ "$(live)" -ge 1 ] || fail "no live holder after re-registration"
touch "$WORK/restart.out.stop"
wait $EXEC || fail "restart: exec exited non-zero"
echo "ok daemon restart while the command ran: re-registered, command and view untouched"

# As PID 1 (a container's entrypoint): an orphan reparented to exec is
# reaped, not left a zombie.
if unshare --pid --fork --mount-proc true 2>/dev/null; then
    cat >"$WORK/orphans.sh" <<'EOF'
#!/bin/sh
sh -c 'sleep 0.2 &'
sleep 1
for s in /proc/[0-9]*/stat; do
    read -r pid comm state rest <"$s" 2>/dev/null || continue
    [ "$state" = Z ] && { echo "zombie $pid $comm"; exit 9; }
done
exit 0
EOF
    chmod +x "$WORK/orphans.sh"
    rc=$(status unshare --pid --fork --mount-proc "$BIN/tetris-agent" exec --private --model "$model" -- "$WORK/orphans.sh")
    [ "$rc" = 0 ] || fail "as PID 1: exit $rc: $(cat "$WORK/status.out" "$WORK/status.err")"
    echo "ok as PID 1: the orphan was reaped"
else
    note "no pid namespace here: PID 1 reaping not exercised"
fi
