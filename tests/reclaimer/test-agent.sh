#!/bin/sh
# test-agent.sh - the real agent (tetris-agent load) against the daemon:
# the first instance's load ingests through the daemon, the second maps
# what is resident, both are holders while they run and the daemon counts
# them; with no daemon the agent falls back to a private load and tells
# the daemon-less world why (fell_back, fallback_reason).
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
AGENT="$BIN/tetris-agent"
[ -x "$AGENT" ] || fail "tetris-agent missing"

synth "$WORK/m.safetensors" 6 131072 41
start_daemon --interval 200ms --scrub-rate 0
# The agents hold the model until their stdin closes: a fifo we keep open.
mkfifo "$WORK/stdin"
"$AGENT" load --store "$STORE" --hold "$WORK/m.safetensors" <"$WORK/stdin" >"$WORK/a1.json" 2>>"$WORK/probe.log" &
A1=$!; KILL_ON_EXIT="$KILL_ON_EXIT $A1"
exec 3>"$WORK/stdin"
wait_until 60 "grep -q 'mapped_bytes' '$WORK/a1.json'" || fail "agent 1 did not load"
"$AGENT" load --store "$STORE" --hold "$WORK/m.safetensors" <"$WORK/stdin" >"$WORK/a2.json" 2>>"$WORK/probe.log" 3>&- &
A2=$!; KILL_ON_EXIT="$KILL_ON_EXIT $A2"
wait_until 60 "grep -q 'mapped_bytes' '$WORK/a2.json'" || fail "agent 2 did not load"
jq -e '.fell_back == false and .ingested_bytes == 786432 and .mapped_bytes == 786432' "$WORK/a1.json" >/dev/null ||
    fail "agent 1: $(cat "$WORK/a1.json")"
jq -e '.fell_back == false and .ingested_bytes == 0 and .mapped_bytes == 786432' "$WORK/a2.json" >/dev/null ||
    fail "agent 2: $(cat "$WORK/a2.json")"
wait_until 60 '[ "$(metric tetris_store_holders)" = 2 ]' || fail "daemon does not count the agents as holders"
[ "$(metric tetris_store_saved_bytes)" = 786432 ] || fail "saved bytes $(metric tetris_store_saved_bytes)"
exec 3>&-   # stdin closes: both agents drop the model and exit
wait "$A1" "$A2" || fail "agents did not exit cleanly"
wait_until 60 '[ "$(metric tetris_store_holders)" = 0 ]' || fail "exited agents still counted"
stop_daemon
note "two agents through the daemon: one ingest, one map, both holders"

"$AGENT" load --store "$STORE" "$WORK/m.safetensors" >"$WORK/a3.json" 2>"$WORK/a3.log" || fail "agent without daemon failed"
jq -e '.fell_back == true and .private_bytes == 786432' "$WORK/a3.json" >/dev/null ||
    fail "agent without daemon: $(cat "$WORK/a3.json")"
note "no daemon: agent fell back ($(jq -r .fallback_reason "$WORK/a3.json" | cut -c1-80))"
echo "ok $PROG"
