#!/bin/sh
# test-shared-store.sh - what a pod of the shared store (uid nobody; any
# pod may be one) can take from tenants, on a daemon with a node capacity
# of 32 MiB and --tenant-capacity 12 MiB (and no --shared-capacity):
#   - the shared store gets the tenants' quota by default: the pod's 24 MiB
#     of its own tensors, held, are stored up to 12 MiB, and tenant beta
#     still stores its 10 MiB model;
#   - a pod that names the digests of tensors it never had (read from the
#     store's listing, which every pod of the store sees) over a file of
#     zeros gets references to them: nothing is read or added, the tensors
#     are only its own store's, and what it keeps resident is bounded by
#     that store's quota (docs/SECURITY.md says why this is accepted);
#   - report_fallback: once per connection (a second on one connection is
#     refused), and its log lines are rate-limited per uid: 1000 reports on
#     one connection and 100 connections give 101 counted and a handful of
#     lines.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"

[ "$(id -u)" = 0 ] || skip "needs root, to run pods as uids of their own"
command -v setpriv >/dev/null 2>&1 || skip "setpriv (util-linux) is not installed"

MI=1048576
chmod 755 "$WORK"
B="$STORE/tenants/beta"
POD="$WORK/pod"
mkdir "$POD" && chown 65534:65534 "$POD" || fail "pod directory"
as_uid() { _u=$1; shift; setpriv --reuid="$_u" --regid="$_u" --clear-groups "$@"; }
for i in 1 2 3; do
    synth "$POD/own$i.safetensors" 8 $MI "$i"
done
synth "$WORK/root.safetensors" 4 $MI 7
synth "$WORK/beta.safetensors" 10 $MI 8
chmod 644 "$POD"/*.safetensors "$WORK/beta.safetensors"
tmetric() {
    curl -sS --max-time 20 "http://127.0.0.1:$RECLAIMER_TENANT_PORT/metrics" |
        awk -v s="$1{tenant=\"$2\"}" '$1 == s { print $2 }'
}

start_daemon --interval 200ms --scrub-rate 0 --keep-alive 1h --capacity 32Mi --tenants beta \
    --tenant-capacity 12Mi --tenant-listen 127.0.0.1:0 --tenant-uids beta=60100 \
    --max-connections-per-pid 128
wait_until 30 "[ -S '$B/public/ingest.sock' ]" || fail "beta not served"

# ---- the shared store's quota ----
# A model of another instance's is held in the shared store (the pod will
# name it).
hold "$WORK/root.safetensors" "$WORK/root.json"
ROOT_HOLD=$HOLD_PID
HOLDS=""
for i in 1 2 3; do
    setpriv --reuid=65534 --regid=65534 --clear-groups "$PROBE" load --store "$STORE" --hold \
        "$POD/own$i.safetensors" </dev/null >"$WORK/own$i.json" 2>>"$WORK/probe.log" &
    HOLDS="$HOLDS $!"
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    wait_until 60 "grep -q '\"pid\"' '$WORK/own$i.json'" || fail "the pod's load $i did not finish"
done
stored=$(jq -s 'map(.ingested) | add' "$WORK"/own?.json)
[ "$stored" -le 8 ] ||
    fail "the shared store took $stored MiB of the pod's tensors, past its 12 MiB quota (4 held)"
grep -q 'event=ingest .*uid=65534 .*code=full msg="shared store quota full' "$DAEMON_LOG" ||
    fail "the shared store's quota refusal not logged"
as_uid 60100 "$PROBE" load --store "$B" "$WORK/beta.safetensors" >"$WORK/beta.json" 2>>"$WORK/probe.log"
jq -e '.fallback == false and .ingested == 10 and .rejected == 0' "$WORK/beta.json" >/dev/null ||
    fail "the shared store's pod left beta no room: $(cat "$WORK/beta.json")"
note "the pod held $stored of its 24 MiB in the shared store (quota 12 MiB, 4 MiB held by another); beta stored its 10 MiB"

# ---- references to tensors the pod never had ----
"$PROBE" manifest "$WORK/root.safetensors" >"$WORK/root-manifest.json" || fail "manifest"
ls "$STORE/public/tensors"/*/ >/dev/null || fail "the store's listing"
jq -c '{op: "ingest", label: "named", sources: ["zeros"],
        tensors: [.tensors[] | {name, dtype, shape, source_index: 0, offset: 0, length, nbytes,
                                encoding, digest, crc32}]}' "$WORK/root-manifest.json" >"$POD/named.json"
as_uid 65534 truncate -s 2M "$POD/zeros"
resident=$(metric tetris_store_resident_bytes)
setpriv --reuid=65534 --regid=65534 --clear-groups "$PROBE" send \
    --socket "$STORE/public/ingest.sock" --fd "$POD/zeros" --hold <"$POD/named.json" >"$WORK/named.out" &
NAMED=$!
KILL_ON_EXIT="$KILL_ON_EXIT $NAMED"
wait_until 30 "grep -q held '$WORK/named.out'" || fail "named digests: $(cat "$WORK/named.out")"
head -n 1 "$WORK/named.out" |
    jq -e '.ok and ([.tensors[] | select(.status == "resident")] | length) == 4' >/dev/null ||
    fail "named digests: $(cat "$WORK/named.out")"
wait_passes 2
[ "$(metric tetris_store_resident_bytes)" = "$resident" ] || fail "naming digests added bytes"
# On beta's socket the pod is refused (its uid is not beta's), and what it
# names there is beta's store's, not the shared one's.
# (The refusal may come before the request is sent: the log tells.)
as_uid 65534 "$PROBE" send --socket "$B/public/ingest.sock" --fd "$POD/zeros" \
    <"$POD/named.json" >"$WORK/named-beta.out" 2>&1 || true
grep -q 'event=ingest-denied tenant=beta .*uid=65534' "$DAEMON_LOG" &&
    ! grep -q '"ok":true' "$WORK/named-beta.out" ||
    fail "the pod reached beta's store: $(cat "$WORK/named-beta.out")"
# shellcheck disable=SC2086
kill "$NAMED" $HOLDS 2>/dev/null
release "$ROOT_HOLD"
note "named digests: references in its own store only, nothing read or added, within its quota"

# ---- report_fallback floods ----
lines() { grep -c 'event=agent-fallback .*uid=65534' "$DAEMON_LOG"; }
before=$(lines)
echo '{"op":"report_fallback","label":"flood","reason":"again"}' >"$POD/flood.json"
as_uid 65534 "$PROBE" send --socket "$STORE/public/ingest.sock" --repeat 1000 <"$POD/flood.json" \
    >"$WORK/flood.out" 2>&1
grep -q '"ok":false.*one fallback report per connection' "$WORK/flood.out" ||
    fail "a repeated report was not refused: $(head -c 600 "$WORK/flood.out")"
as_uid 65534 "$PROBE" conns --socket "$STORE/public/ingest.sock" --count 100 >"$WORK/conns.out"
grep -q '"accepted":100' "$WORK/conns.out" || fail "100 reports on 100 connections: $(cat "$WORK/conns.out")"
[ "$(metric tetris_agent_fallbacks_total)" = 101 ] ||
    fail "fallbacks counted $(metric tetris_agent_fallbacks_total), want 101 (one per connection)"
logged=$(($(lines) - before))
[ "$logged" -le 15 ] || fail "1100 reports logged $logged lines"
grep 'event=agent-fallback .*uid=65534' "$DAEMON_LOG" | tail -n 1 | grep -q 'suppressed=' ||
    fail "suppressed reports not summed in the next line"
note "1000 reports on one connection and 100 connections: 101 counted, $logged lines logged"
stop_daemon
echo "ok $PROG"
