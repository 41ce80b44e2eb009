#!/bin/sh
# test-workers.sh - ingest on the CPU allowance: a daemon held to one CPU
# says so and still ingests; a daemon with several workers ingests two
# concurrent requests whole; --direct on several workers publishes every
# tensor, and what was stored verifies. No timing: the figures are in
# bench/coldstart.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
AGENT="$BIN/tetris-agent"
[ -x "$AGENT" ] || fail "tetris-agent missing"
command -v taskset >/dev/null 2>&1 || skip "no taskset"

synth "$WORK/a.safetensors" 12 65536 51
synth "$WORK/b.safetensors" 12 65536 52

# Held to one CPU (the affinity its children inherit): one worker, said once.
mask=$(taskset -p $$ | sed 's/.*: //')
taskset -p -c 0 $$ >/dev/null || fail "taskset"
start_daemon --interval 1s --scrub-rate 0
taskset -p "$mask" $$ >/dev/null || fail "taskset back"
wait_until 30 "grep -q 'event=ingest-workers workers=1 ' '$DAEMON_LOG'" ||
    fail "no one-worker line: $(grep ingest-workers "$DAEMON_LOG")"
grep -q 'event=ingest-one-worker' "$DAEMON_LOG" || fail "no ingest-one-worker line"
"$AGENT" load --store "$STORE" "$WORK/a.safetensors" >"$WORK/one.json" 2>>"$WORK/agent.log" ||
    fail "load with one worker failed"
jq -e '.fell_back == false and .ingested_bytes == 786432' "$WORK/one.json" >/dev/null ||
    fail "one worker: $(cat "$WORK/one.json")"
stop_daemon
note "daemon held to one CPU: one worker, logged, load ingested"

# Several workers, two requests at once: each whole, nothing lost.
start_daemon --interval 1s --scrub-rate 0 --workers 4
grep -q 'event=ingest-workers workers=4 source=flag' "$DAEMON_LOG" || fail "no workers=4 line"
"$AGENT" load --store "$STORE" "$WORK/b.safetensors" >"$WORK/b.json" 2>>"$WORK/agent.log" &
B=$!
"$AGENT" load --store "$STORE" "$WORK/a.safetensors" >"$WORK/a.json" 2>>"$WORK/agent.log" ||
    fail "load a failed"
wait "$B" || fail "load b failed"
jq -e '.fell_back == false and .mapped_bytes == 786432' "$WORK/a.json" >/dev/null ||
    fail "a: $(cat "$WORK/a.json")"
jq -e '.fell_back == false and .ingested_bytes == 786432' "$WORK/b.json" >/dev/null ||
    fail "b: $(cat "$WORK/b.json")"
[ "$(tensor_count)" = 24 ] || fail "store holds $(tensor_count) tensors, want 24"
stop_daemon
note "4 workers, two concurrent requests: 24 tensors stored"

# --direct on several workers, with and without a manifest.
D="$WORK/direct"; mkdir "$D"
"$AGENT" load --direct --workers 3 --store "$D" "$WORK/a.safetensors" >"$WORK/d.json" \
    2>>"$WORK/agent.log" || fail "direct load failed"
jq -e '.fell_back == false and .ingested_bytes == 786432' "$WORK/d.json" >/dev/null ||
    fail "direct: $(cat "$WORK/d.json")"
"$AGENT" index "$WORK/b.safetensors" -o "$WORK/b.manifest" 2>>"$WORK/agent.log" || fail "index"
"$AGENT" load --direct --workers 3 --store "$D" --manifest "$WORK/b.manifest" \
    "$WORK/b.safetensors" >"$WORK/d2.json" 2>>"$WORK/agent.log" || fail "direct load b failed"
jq -e '.fell_back == false and .ingested_bytes == 786432' "$WORK/d2.json" >/dev/null ||
    fail "direct b: $(cat "$WORK/d2.json")"
"$AGENT" verify --store "$D" >"$WORK/verify.out" 2>>"$WORK/agent.log" || fail "verify: $(cat "$WORK/verify.out")"
"$AGENT" load --direct --workers 0 --store "$D" "$WORK/a.safetensors" >/dev/null 2>&1 &&
    fail "--workers 0 accepted"
note "--direct on 3 workers: both models published, store verifies"
echo "ok $PROG"
