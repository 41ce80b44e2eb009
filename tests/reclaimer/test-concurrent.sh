#!/bin/sh
# test-concurrent.sh - one copy through the daemon: 8 instances loading the
# same model at once through tetris-reclaimer produce exactly one copy of
# each tensor (the daemon's publishes of one digest race under the store's
# per-tensor lock), every instance maps every tensor, and the published
# tensors add up to the model.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"

synth "$WORK/m.safetensors" 12 262144 77
start_daemon --interval 1 --scrub-rate 0
pids=""
i=0
while [ $i -lt 8 ]; do
    "$PROBE" load --store "$STORE" "$WORK/m.safetensors" >"$WORK/l$i.json" 2>>"$WORK/probe.log" &
    pids="$pids $!"
    i=$((i + 1))
done
for p in $pids; do wait "$p" || fail "a loader failed"; done
total=0
for f in "$WORK"/l?.json; do
    jq -e '.fallback == false and .mapped_bytes == 3145728' "$f" >/dev/null || fail "loader: $(cat "$f")"
    total=$((total + $(jq .ingested "$f")))
done
[ "$total" = 12 ] || fail "instances published $total tensors in all, want 12 (one copy each)"
[ "$(tensor_count)" = 12 ] || fail "store holds $(tensor_count) tensor files, want 12"
[ "$(metric tetris_ingest_tensors_total)" = 12 ] || fail "daemon counted $(metric tetris_ingest_tensors_total) published tensors"
stop_daemon
note "8 concurrent loads: 12 tensors published once, all mapped by all"
echo "ok $PROG"
