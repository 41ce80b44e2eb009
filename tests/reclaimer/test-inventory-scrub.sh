#!/bin/sh
# test-inventory-scrub.sh - /inventory and the CRC scrub:
#  - /inventory's ETag is its generation; If-None-Match with it gives 304,
#    a changed store gives 200 and a new generation; it lists exactly the
#    resident tensors with their sizes;
#  - a tensor whose bytes rot in the store is found by the scrub,
#    quarantined (gone from tensors/ and the inventory, counted in
#    tetris_scrub_errors_total) while an instance that maps it keeps
#    running; /healthz stays 200;
#  - evictable_bytes counts exactly the tensors no live holder maps.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"

synth "$WORK/m.safetensors" 5 65536 31
start_daemon --interval 200ms --keep-alive 1h --scrub-rate 100Mi --node-name node-7

etag_of() { curl -sS -D - -o /dev/null "http://127.0.0.1:$RECLAIMER_PORT/inventory" | tr -d '\r' |
            awk 'tolower($1) == "etag:" { print $2 }'; }
status_with() { curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: $1" "http://127.0.0.1:$RECLAIMER_PORT/inventory"; }

inv=$(http_get /inventory)
echo "$inv" | jq -e '.node == "node-7" and (.tensors | length) == 0 and .resident_bytes == 0' >/dev/null ||
    fail "empty inventory wrong: $inv"
g0=$(echo "$inv" | jq -r .generation)
[ "$(etag_of)" = "\"$g0\"" ] || fail "ETag $(etag_of) is not the generation $g0"
[ "$(status_with "\"$g0\"")" = 304 ] || fail "If-None-Match current generation: not 304"
[ "$(status_with '"1"')" = 200 ] || fail "If-None-Match stale generation: not 200"

hold "$WORK/m.safetensors" "$WORK/h.json"; H=$HOLD_PID
[ "$(status_with "\"$g0\"")" = 200 ] || fail "store changed but inventory still 304"
inv=$(http_get /inventory)
g1=$(echo "$inv" | jq -r .generation)
[ "$g1" -gt "$g0" ] || fail "generation did not grow: $g0 -> $g1"
echo "$inv" | jq -e '(.tensors | length) == 5 and ([.tensors[].bytes] | add) == 327680' >/dev/null ||
    fail "inventory after load wrong: $inv"
"$PROBE" manifest "$WORK/m.safetensors" | jq -r '.tensors[].digest | sub("sha256:"; "")' | sort >"$WORK/want"
echo "$inv" | jq -r '.tensors[].digest' | sort >"$WORK/have"
cmp -s "$WORK/want" "$WORK/have" || fail "inventory digests differ from the model's"
note "inventory: ETag = generation, 304 when unchanged, exact digests"

# Rot one byte of one stored tensor.
victim=$(head -n 1 "$WORK/want")
file=$(find "$STORE/public/tensors" -name "$victim")
[ -n "$file" ] || fail "victim not in store"
chmod u+w "$file"
printf '\377\377\377\377' | dd of="$file" bs=1 seek=1000 conv=notrunc 2>/dev/null
wait_until 60 '[ "$(metric tetris_scrub_errors_total)" = 1 ]' || fail "scrub did not find the corrupt tensor"
[ -z "$(find "$STORE/public/tensors" -name "$victim")" ] || fail "corrupt tensor still in tensors/"
[ -n "$(find "$STORE/private/quarantine" -name "$victim*")" ] || fail "corrupt tensor not in quarantine/"
http_get /inventory | jq -e --arg d "$victim" '[.tensors[] | select(.digest == $d)] | length == 0' >/dev/null ||
    fail "quarantined tensor still in the inventory"
kill -0 "$H" || fail "the instance mapping the quarantined tensor died"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$RECLAIMER_PORT/healthz")" = 200 ] || fail "healthz"
[ "$(metric tetris_scrubbed_bytes_total)" -gt 0 ] || fail "scrubbed bytes not counted"
note "corrupt tensor quarantined by the scrub; mapping instance unaffected"

# A new load of the model gets a fresh, good copy of the quarantined tensor.
"$PROBE" load --store "$STORE" "$WORK/m.safetensors" >"$WORK/again.json" 2>>"$WORK/probe.log" || fail "reload"
grep -q '"ingested":1' "$WORK/again.json" || fail "quarantined tensor not re-ingested: $(cat "$WORK/again.json")"
release "$H"
old_etag=$(etag_of)
stop_daemon
start_daemon --interval 200ms --keep-alive 1h --scrub-rate 0
[ "$(status_with "$old_etag")" = 200 ] || fail "an ETag from before the restart still matched"
[ "$(http_get /inventory | jq '.tensors | length')" = 5 ] || fail "inventory after restart"
note "ETags do not survive a restart; the inventory does"

# What no holder maps is evictable, so a scheduler may count it as room;
# what one maps is not, and the change is a new generation.
cold() { http_get /inventory | jq -e '.resident_bytes > 0 and .evictable_bytes == .resident_bytes'; }
wait_until 30 cold || fail "cold tensors not evictable: $(http_get /inventory | jq -c 'del(.tensors)')"
g_cold=$(etag_of)
hold "$WORK/m.safetensors" "$WORK/h2.json"; H=$HOLD_PID
wait_until 30 '[ "$(http_get /inventory | jq .evictable_bytes)" = 0 ]' ||
    fail "mapped tensors counted as evictable: $(http_get /inventory | jq -c 'del(.tensors)')"
[ "$(status_with "$g_cold")" = 200 ] || fail "evictable bytes changed, the ETag did not"
release "$H"
wait_until 30 cold || fail "released tensors not evictable again"
stop_daemon
note "inventory: evictable_bytes = bytes no holder maps"
echo "ok $PROG"
