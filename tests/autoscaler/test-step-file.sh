#!/bin/sh
# test-step-file.sh - `tetris-autoscaler run --step-file FILE` in simulated
# time: after each decision round the autoscaler writes the round's time to
# FILE and acts on nothing more until FILE is removed, so a test can check a
# cluster between steps. Each round's actions are out before its FILE; the
# rounds are the same as without the option; the option is refused where
# time is not simulated.
set -eu
. "$(dirname "$0")/../lib/common.sh"
here="$ROOT/tests/autoscaler"
bin="$BIN/tetris-autoscaler"
step="$WORK/step"

"$bin" run --slo-ms 50 --dry-run --interval 10 --step-file "$step" \
    --function fn="$here/two-configs.profile.yaml" --trace fn="$here/rise-and-fall.trace" \
    >"$WORK/actions" 2>"$WORK/autoscaler.log" &
pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $pid"

# The rounds of rise-and-fall.trace (test-trace-dry-run.sh) with the number
# of actions done by the end of each.
t=0
while [ $t -le 400 ]; do
    wait_until 30 "[ -f '$step' ] || ! kill -0 $pid" || fail "no step file for t=$t"
    [ -f "$step" ] || fail "the autoscaler ended before t=$t: $(cat "$WORK/autoscaler.log")"
    [ "$(cat "$step")" = "$t.000" ] || fail "step file says '$(cat "$step")', want $t.000"
    case $t in
    0 | 10) want=1 ;;
    20 | 30) want=2 ;;
    40 | 50 | 60 | 70 | 80 | 90 | 100 | 110 | 120) want=3 ;;
    130 | 140 | 150 | 160 | 170 | 180 | 190 | 200 | 210 | 220 | 230 | 240 | 250 | 260) want=4 ;;
    *) want=5 ;;
    esac
    got=$(wc -l <"$WORK/actions")
    [ "$got" = "$want" ] || fail "at t=$t: $got actions, want $want: $(cat "$WORK/actions")"
    rm "$step"
    t=$((t + 10))
done
wait "$pid" || fail "exit $?: $(cat "$WORK/autoscaler.log")"
[ ! -e "$step" ] || fail "a step file after the last round"
[ "$(jq -r '"\(.time_s) \(.replicas.to)"' "$WORK/actions" | tr '\n' ' ')" = \
    "0 1 20 3 40 5 130 2 270 1 " ] || fail "rounds differ from the plain run: $(cat "$WORK/actions")"

# Only in simulated time.
fn="fn=$here/two-configs.profile.yaml"
for extra in "--realtime --trace fn=$here/rise-and-fall.trace" "--prometheus http://127.0.0.1:1"; do
    # shellcheck disable=SC2086 # extra is several words
    rc=$(status "$bin" run --slo-ms 50 --dry-run --step-file "$step" --function "$fn" $extra)
    [ "$rc" = 2 ] || fail "--step-file with $extra: exit $rc, want 2"
    grep -q -- "--step-file needs traces in simulated time" "$WORK/status.err" ||
        fail "--step-file with $extra: no reason: $(cat "$WORK/status.err")"
done
echo "step file: ok" >&2
