#!/bin/sh
# test-reclaim.sh - the reclaim policy of tetris-reclaimer against real
# holders (function instances loading through the daemon):
#  - tensors of exited holders are reclaimed after the keep-alive; a live
#    holder's tensors survive any number of passes, also when another
#    holder of the same model exits or is SIGKILLed;
#  - metrics count holders, logical and saved bytes;
#  - LRU keeps the store under capacity (lowered by SIGHUP) and never
#    evicts a referenced tensor; ingests past capacity are refused per
#    tensor and the instance loads those privately;
#  - --once runs repair plus one pass and exits;
#  - digests in --pin-file are kept like referenced ones;
#  - the daemon makes the store's lock stripes and fanout directories at
#    start, before the first load needs them.
# Models differ in tensor size, so /inventory's "bytes" tells them apart.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"

KI=1024
synth "$WORK/a.safetensors" 8 $((256 * KI)) 1   # A: 8 x 256 KiB = 2 MiB
synth "$WORK/b.safetensors" 8 $((128 * KI)) 2   # B: 8 x 128 KiB = 1 MiB
synth "$WORK/c.safetensors" 8 $((64 * KI)) 3    # C: 8 x 64 KiB = 512 KiB

# count_of BYTES: resident tensors of that size (i.e. of that model).
count_of() {
    http_get /inventory | jq "[.tensors[] | select(.bytes == $1)] | length"
}

cat >"$WORK/r.yaml" <<YAML
interval: 200ms
keep_alive: 2
scrub_rate: 0
YAML
start_daemon --config "$WORK/r.yaml"
[ "$(find "$STORE/private/locks" -type f | wc -l)" = 4096 ] ||
    fail "daemon start made $(find "$STORE/private/locks" -type f | wc -l) of 4096 lock stripes"
[ "$(find "$STORE/public/tensors" -mindepth 1 -type d | wc -l)" = 256 ] ||
    fail "daemon start made $(find "$STORE/public/tensors" -mindepth 1 -type d | wc -l) of 256 fanout directories"

hold "$WORK/a.safetensors" "$WORK/a1.json"; A1=$HOLD_PID
hold "$WORK/b.safetensors" "$WORK/b1.json"; B1=$HOLD_PID
hold "$WORK/a.safetensors" "$WORK/a2.json"; A2=$HOLD_PID
grep -q '"ingested":8' "$WORK/a1.json" || fail "first load of A did not ingest: $(cat "$WORK/a1.json")"
grep -q '"resident":8' "$WORK/a2.json" || fail "second load of A was not served from the store"
wait_passes 2
[ "$(metric tetris_store_tensors)" = 16 ] || fail "want 16 tensors, have $(metric tetris_store_tensors)"
[ "$(metric tetris_store_holders)" = 3 ] || fail "want 3 holders, have $(metric tetris_store_holders)"
want_logical=$((2 * 2097152 + 1048576))
[ "$(metric tetris_store_logical_bytes)" = $want_logical ] || fail "logical bytes $(metric tetris_store_logical_bytes) != $want_logical"
[ "$(metric tetris_store_saved_bytes)" = 2097152 ] || fail "saved bytes $(metric tetris_store_saved_bytes) != 2097152"
note "3 holders, 16 tensors, saved bytes = one copy of A"

# B's only holder exits cleanly, one of A's two is killed: B goes after the
# keep-alive, A stays as long as A2 lives.
release "$B1"
kill -KILL "$A1"
wait_until 60 '[ "$(count_of $((128 * KI)))" = 0 ]' || fail "B was not reclaimed after keep-alive"
[ "$(count_of $((256 * KI)))" = 8 ] || fail "A lost tensors while A2 holds it"
wait_passes 25
[ "$(count_of $((256 * KI)))" = 8 ] || fail "A lost tensors over many passes"
[ "$(metric tetris_store_holders)" = 1 ] || fail "dead holder not released"
note "exited holder's tensors reclaimed; live holder's survived 25+ passes"

kill -KILL "$A2"
wait_until 60 '[ "$(metric tetris_store_tensors)" = 0 ]' || fail "A not reclaimed after its last holder died"
[ "$(metric tetris_reclaims_total)" = 16 ] || fail "reclaims_total $(metric tetris_reclaims_total) != 16"
[ "$(metric tetris_reclaimed_bytes_total)" -ge $((3 * 1048576)) ] || fail "reclaimed bytes too small"

# LRU: long keep-alive, capacity set by SIGHUP.
cat >"$WORK/r.yaml" <<YAML
interval: 200ms
keep_alive: 1h
scrub_rate: 0
capacity: 3200Ki
YAML
kill -HUP "$RECLAIMER_PID"
wait_until 30 '[ "$(metric tetris_store_capacity_bytes)" = 3276800 ]' || fail "SIGHUP did not apply capacity"
"$PROBE" load --store "$STORE" "$WORK/b.safetensors" >"$WORK/b2.json" 2>>"$WORK/probe.log" || fail "load B"
sleep 1.1   # last-use times have one-second resolution: B is older than A
hold "$WORK/a.safetensors" "$WORK/a3.json"; A3=$HOLD_PID
grep -q '"ingested":8' "$WORK/a3.json" || fail "A not ingested under capacity: $(cat "$WORK/a3.json")"
# The store is full (3 MiB + 128 KiB; each tensor is charged its file
# rounded up to pages plus an inode, 5 KiB more than its bytes here), but
# B is cold: C's claims may count on B's room. C is read, verified and
# stored, shared at once, and the pass that follows evicts least recently
# used cold tensors (B's, never A's) until the store is under capacity
# again. Only verified bytes make a pass evict.
"$PROBE" load --store "$STORE" "$WORK/c.safetensors" >"$WORK/c1.json" 2>>"$WORK/probe.log" || fail "load C"
grep -q '"ingested":8' "$WORK/c1.json" || fail "C not let in against cold bytes: $(cat "$WORK/c1.json")"
grep -q '"fallback":false' "$WORK/c1.json" || fail "C fell back: $(cat "$WORK/c1.json")"
wait_until 60 '[ "$(metric tetris_evictions_total)" = 4 ]' ||
    fail "stored C did not make room: evictions $(metric tetris_evictions_total), want 4 of B's"
[ "$(count_of $((256 * KI)))" = 8 ] || fail "making room evicted a referenced tensor of A"
[ "$(metric tetris_store_resident_bytes)" -le 3276800 ] || fail "store left above capacity"
"$PROBE" load --store "$STORE" "$WORK/c.safetensors" >"$WORK/c2.json" 2>>"$WORK/probe.log" || fail "load C"
grep -q '"resident":8' "$WORK/c2.json" || fail "C not shared the next time: $(cat "$WORK/c2.json")"
# With A and C held, what is cold (B's other half) is less than D needs:
# D is refused per tensor, loaded privately, and evicts nothing.
hold "$WORK/c.safetensors" "$WORK/c3.json"; C3=$HOLD_PID
synth "$WORK/d.safetensors" 8 $((640 * KI)) 4
"$PROBE" load --store "$STORE" "$WORK/d.safetensors" >"$WORK/d1.json" 2>>"$WORK/probe.log" || fail "load D"
grep -q '"rejected":8' "$WORK/d1.json" || fail "D should be refused by a full store: $(cat "$WORK/d1.json")"
grep -q '"private_bytes":5242880' "$WORK/d1.json" || fail "D's refused tensors not loaded privately"
grep -q '"fallback":false' "$WORK/d1.json" || fail "a full store is a per-tensor refusal, not a fallback"
wait_passes 3
[ "$(metric tetris_evictions_total)" = 4 ] || fail "a refused claim evicted: $(metric tetris_evictions_total)"
[ "$(count_of $((128 * KI)))" = 4 ] || fail "B's cold half evicted for a refused claim"
release "$C3"
note "store full of cold bytes: C let in, LRU made room after; too little cold: D refused, nothing evicted"

# Lower capacity: LRU goes oldest first (B's remaining tensors, then C's)
# and never touches A, even when A alone is above capacity.
sed -i 's/capacity: 3200Ki/capacity: 2650Ki/' "$WORK/r.yaml"
kill -HUP "$RECLAIMER_PID"
wait_until 60 '[ "$(metric tetris_evictions_total)" = 8 ]' || fail "LRU did not evict B's other 4 tensors (evictions $(metric tetris_evictions_total))"
wait_passes 3
[ "$(metric tetris_store_resident_bytes)" -le 2713600 ] || fail "store above capacity after LRU"
[ "$(count_of $((128 * KI)))" = 0 ] || fail "B (oldest) not evicted first"
[ "$(count_of $((64 * KI)))" = 8 ] || fail "C (newer) evicted before B"
[ "$(count_of $((256 * KI)))" = 8 ] || fail "LRU evicted a referenced tensor of A"
sed -i 's/capacity: 2650Ki/capacity: 1Mi/' "$WORK/r.yaml"
kill -HUP "$RECLAIMER_PID"
wait_until 60 '[ "$(count_of $((64 * KI)))" = 0 ]' || fail "LRU left cold tensors of C above capacity"
wait_passes 5
[ "$(count_of $((256 * KI)))" = 8 ] || fail "LRU evicted a referenced tensor to meet capacity"
note "LRU evicted only cold tensors, oldest first; referenced ones kept even above capacity"

# A broken config on SIGHUP keeps the running settings.
echo "capacity: [oops" >"$WORK/r.yaml"
kill -HUP "$RECLAIMER_PID"
wait_until 30 'grep -q "event=reload-failed" "$DAEMON_LOG"' || fail "broken config not reported"
daemon_alive || fail "daemon died on a broken config"
[ "$(metric tetris_store_capacity_bytes)" = 1048576 ] || fail "broken config changed settings"

# The state file remembers last use across restarts. The daemon stops
# before A3 lets go: a pass in between would evict A, cold then, down to
# the 1 MiB capacity.
stop_daemon
release "$A3"
grep -q . "$STORE/private/reclaimer.state" || fail "no last-use state persisted"
"$RECLAIMER" --store "$STORE" --once --keep-alive 1h >>"$DAEMON_LOG" 2>&1 || fail "--once failed"
[ "$(tensor_count)" = 8 ] || fail "--once with a long keep-alive freed tensors"
"$RECLAIMER" --store "$STORE" --once --keep-alive 0 >>"$DAEMON_LOG" 2>&1 || fail "--once failed"
[ "$(tensor_count)" = 0 ] || fail "--once --keep-alive 0 left $(tensor_count) tensors"
note "--once honours keep-alive"
"$RECLAIMER" --config "$(dirname "$0")/../../deploy/reclaimer.yaml" --store "$STORE" --once \
    >>"$DAEMON_LOG" 2>&1 || fail "the example config deploy/reclaimer.yaml does not load"

# Pins (the cluster hook): pinned digests stay even with keep-alive 0.
"$PROBE" manifest "$WORK/b.safetensors" | jq -r '.tensors[].digest' >"$WORK/pins"
start_daemon --interval 200ms --keep-alive 0 --scrub-rate 0 --pin-file "$WORK/pins"
"$PROBE" load --store "$STORE" "$WORK/b.safetensors" >"$WORK/b3.json" 2>>"$WORK/probe.log" || fail "load B"
"$PROBE" load --store "$STORE" "$WORK/c.safetensors" >"$WORK/c3.json" 2>>"$WORK/probe.log" || fail "load C"
wait_until 60 '[ "$(count_of $((64 * KI)))" = 0 ]' || fail "unpinned C not reclaimed"
wait_passes 5
[ "$(count_of $((128 * KI)))" = 8 ] || fail "pinned B reclaimed"
echo "# nothing pinned now" >"$WORK/pins.new" && mv "$WORK/pins.new" "$WORK/pins"
wait_until 60 '[ "$(count_of $((128 * KI)))" = 0 ]' || fail "B not reclaimed after unpinning"
stop_daemon
note "--pin-file keeps pinned digests, re-read on change"
echo "ok $PROG"
