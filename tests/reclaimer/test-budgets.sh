#!/bin/sh
# test-budgets.sh - a hostile function pod (uid nobody) against the node
# daemon's budgets, speaking the ingest protocol on the real socket:
#   - a 1 TB sparse file declared as one tensor is refused before a byte is
#     read (the default capacity is half the tmpfs), a request reads no
#     more than --max-request-bytes, and a FIFO source is refused;
#   - a request of 20000 forged claims (320 GB) costs a few reads: the
#     first claims fail verification and the uid backs off, the rest are
#     refused unread; without digests the same 320 GB is cut at
#     --ingest-timeout: its remaining tensors are rejected "timeout";
#   - while such a request runs, reclaim passes complete and an honest
#     client's ingest completes (no store-wide lock across client I/O), and
#     when the attacker hangs up the daemon stops working for it;
#   - repeating a request on one connection, or listing a tensor twice,
#     records each reference once; connections that hold nothing take no
#     holder and are closed when idle;
#   - one process, then one uid, cannot take every connection slot;
#   - a tenant's quota bounds it, and empty tensors are charged a page and
#     an inode each, not their 160-byte files;
#   - entries sent without a digest (the daemon computes it) are held to
#     the same capacity, quota, byte and time budgets, and get the
#     identities the manifest would have given them.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"

[ "$(id -u)" = 0 ] || skip "needs root, to run the attacker as another uid"
command -v setpriv >/dev/null 2>&1 || skip "setpriv (util-linux) is not installed"

SOCK="$STORE/public/ingest.sock"
chmod 755 "$WORK"
POD="$WORK/pod"
mkdir "$POD" && chown 65534:65534 "$POD" || fail "pod directory"
# $AS_POD CMD...: CMD as the pod's user, with no supplementary groups (a
# plain command, so that $! of one run in the background is CMD itself).
AS_POD="setpriv --reuid=65534 --regid=65534 --clear-groups"
as_pod() { $AS_POD "$@"; }

synth "$WORK/m.safetensors" 4 4096 1
cp "$WORK/m.safetensors" "$POD/m.safetensors" && chmod 644 "$POD/m.safetensors"
"$PROBE" manifest "$WORK/m.safetensors" >"$WORK/m.json" || fail "manifest"
seed=10
# honest_load: a root client ingests a model never seen before, in full.
honest_load() {
    seed=$((seed + 1))
    synth "$WORK/h$seed.safetensors" 4 65536 "$seed"
    "$PROBE" load --store "$STORE" "$WORK/h$seed.safetensors" >"$WORK/h$seed.json" 2>>"$WORK/probe.log" ||
        fail "honest load failed: $(cat "$WORK/h$seed.json")"
    jq -e '.fallback == false and .ingested == 4' "$WORK/h$seed.json" >/dev/null ||
        fail "honest load not served: $(cat "$WORK/h$seed.json")"
}
as_pod truncate -s 1T "$POD/sparse" || fail "sparse file"

# ---- request bytes, default capacity, non-regular sources ----
start_daemon --interval 200ms --scrub-rate 0 --max-request-bytes 1Mi
fs_half=$(stat -f -c '%b %S' "$STORE" | awk '{ printf "%.0f", $1 * $2 / 2 }')
[ "$(metric tetris_store_capacity_bytes)" = "$fs_half" ] ||
    fail "default capacity $(metric tetris_store_capacity_bytes), want half the tmpfs ($fs_half)"
# ingest_request MANIFEST LABEL: the request a client sends for MANIFEST.
ingest_request() {
    jq -c --arg lbl "$2" '{op: "ingest", label: $lbl, sources: ["m"],
        tensors: [.tensors[] | {name, dtype, shape, source_index: 0, offset, length, nbytes,
                                encoding, digest, crc32}]}' "$1"
}
as_pod "$PROBE" forge --tensors 1 --bytes 1099511627776 --corrupt >"$POD/huge.json" || fail "forge"
as_pod "$PROBE" send --socket "$SOCK" --fd "$POD/sparse" <"$POD/huge.json" >"$WORK/huge.out"
jq -e '.ok and .tensors[0].status == "rejected" and .tensors[0].error == "full"' "$WORK/huge.out" \
    >/dev/null || fail "1 TB tensor not refused: $(cat "$WORK/huge.out")"
[ -z "$(find "$STORE" -type f -size +1M)" ] || fail "a refused tensor left bytes in the store"
# 2 MiB of real tensors in one request: the first 1 MiB is read, the rest
# refused by the request's byte budget. The client half-closes after its
# request (it still waits for the reply): that is no hang-up.
synth "$POD/big.safetensors" 4 524288 5
chmod 644 "$POD/big.safetensors"
"$PROBE" manifest "$POD/big.safetensors" >"$WORK/big.json" || fail "manifest"
ingest_request "$WORK/big.json" big >"$POD/big-req.json"
as_pod "$PROBE" send --socket "$SOCK" --fd "$POD/big.safetensors" --shut-wr <"$POD/big-req.json" \
    >"$WORK/big.out"
jq -e '.ok and ([.tensors[] | select(.status == "ingested")] | length) == 2 and
       ([.tensors[] | select(.error == "denied")] | length) == 2' "$WORK/big.out" >/dev/null &&
    grep -q "max-request-bytes" "$WORK/big.out" ||
    fail "request past --max-request-bytes: $(cat "$WORK/big.out")"
[ "$(metric tetris_ingest_over_budget_total)" = 1 ] || fail "over-budget request not counted"
grep -q "event=ingest-over-budget.*budget=bytes" "$DAEMON_LOG" || fail "byte budget not logged"
mkfifo "$POD/fifo" && chmod 666 "$POD/fifo"
ingest_request "$WORK/m.json" fifo >"$POD/fifo.json"
as_pod "$PROBE" send --socket "$SOCK" --fd "$POD/fifo" <"$POD/fifo.json" >"$WORK/fifo.out"
grep -q '"ok":false' "$WORK/fifo.out" && grep -q "not a regular file" "$WORK/fifo.out" ||
    fail "FIFO source not refused: $(cat "$WORK/fifo.out")"
honest_load
note "1 TB sparse tensor refused unread (full), a request cut at 1 MiB (denied), FIFO refused; default capacity is half the tmpfs"
stop_daemon

# ---- forged claims back their uid off; the time budget ----
# 20000 tensors of 16 MiB of zeros under digests they do not have: 320 GB
# to read and hash. The first claims fail verification and the uid backs
# off: the rest are refused unread.
as_pod truncate -s 320G "$POD/zeros" || fail "sparse file"
as_pod "$PROBE" forge --tensors 20000 --bytes 16777216 --corrupt --label slow >"$POD/slow.json" ||
    fail "forge"
start_daemon --interval 200ms --scrub-rate 0 --ingest-timeout 2s --max-request-bytes 1Ti
as_pod "$PROBE" send --socket "$SOCK" --fd "$POD/zeros" <"$POD/slow.json" >"$WORK/slow.out"
jq -e '.ok and ([.tensors[] | select(.error == "corrupt")] | length) >= 1 and
       ([.tensors[] | select(.error == "denied")] | length) >= 19000 and
       ([.tensors[] | select(.status != "rejected")] | length) == 0' "$WORK/slow.out" >/dev/null &&
    grep -q "failed verification" "$WORK/slow.out" ||
    fail "forged claims did not back their uid off: $(cut -c1-300 "$WORK/slow.out")"
[ "$(metric tetris_ingest_claims_backed_off_total)" -ge 19000 ] || fail "backed-off claims not counted"
grep -q "event=claim-failed .*uid=65534.*action=backoff" "$DAEMON_LOG" || fail "failed claim not logged"
note "20000 forged claims: the first failed verification, the rest were refused unread (backoff)"
stop_daemon
# Without digests (nothing to fail: the daemon computes them) the same
# 320 GB is cut at --ingest-timeout: its remaining tensors are rejected
# "timeout".
no_digest() { jq -c '.tensors |= map(del(.digest, .crc32))' "$1"; }
no_digest "$POD/slow.json" >"$POD/slow-nd.json"
start_daemon --interval 200ms --scrub-rate 0 --ingest-timeout 2s --max-request-bytes 1Ti
as_pod "$PROBE" send --socket "$SOCK" --fd "$POD/zeros" <"$POD/slow-nd.json" >"$WORK/slow-nd.out"
jq -e '.ok and ([.tensors[] | select(.error == "timeout")] | length) > 0' "$WORK/slow-nd.out" \
    >/dev/null || fail "slow request not cut by its time budget: $(cut -c1-300 "$WORK/slow-nd.out")"
grep -q "event=ingest-over-budget.*budget=time" "$DAEMON_LOG" || fail "time budget not logged"
[ "$(metric tetris_ingest_over_budget_total)" = 1 ] || fail "time budget not counted"
[ "$(metric tetris_ingest_active)" = 0 ] || fail "a cut request still counted as active"
note "a request past --ingest-timeout gets its remaining tensors rejected (timeout)"
stop_daemon
rm -rf "$STORE" # the 16 MiB tensor of zeros it stored

# ---- no store-wide lock across client I/O; a hung-up client is dropped ----
start_daemon --interval 200ms --scrub-rate 0 --ingest-timeout 1h --max-request-bytes 1Ti
$AS_POD "$PROBE" send --socket "$SOCK" --fd "$POD/zeros" <"$POD/slow-nd.json" >"$WORK/attack.out" &
ATTACK=$!
KILL_ON_EXIT="$KILL_ON_EXIT $ATTACK"
wait_until 60 '[ "$(metric tetris_ingest_active)" = 1 ]' || fail "attack did not start"
wait_passes 2
honest_load
[ "$(metric tetris_ingest_active)" = 1 ] && kill -0 "$ATTACK" ||
    fail "the attack ended before the honest client: nothing was shown"
note "during a 320 GB ingest: reclaim passes and an honest ingest completed"
slow_logged() { grep -c 'event=ingest .*label="slow"' "$DAEMON_LOG"; }
before=$(slow_logged)
kill -KILL "$ATTACK"
wait "$ATTACK" 2>/dev/null
wait_until 60 '[ "$(metric tetris_ingest_active)" = 0 ]' ||
    fail "the daemon kept ingesting for a client that hung up"
wait_until 60 '[ "$(slow_logged)" -gt "$before" ]' || fail "abandoned ingest not logged"
note "the attacker hung up: its ingest stopped"
stop_daemon
rm -rf "$STORE"

# ---- references once each; no holder without tensors; idle closed ----
start_daemon --interval 200ms --scrub-rate 0 --request-timeout 1s
ingest_request "$WORK/m.json" dup |
    jq -c '.tensors += [.tensors[0] | .name = "again"] + [.tensors[0] | .name = "and-again"]' \
    >"$POD/dup.json"
$AS_POD "$PROBE" send --socket "$SOCK" --fd "$POD/m.safetensors" --repeat 10 --hold \
    <"$POD/dup.json" >"$WORK/dup.out" &
DUP=$!
KILL_ON_EXIT="$KILL_ON_EXIT $DUP"
wait_until 60 "grep -q held '$WORK/dup.out'" || fail "repeated requests not answered: $(cat "$WORK/dup.out")"
[ "$(grep -c '"ok":true' "$WORK/dup.out")" = 10 ] || fail "repeated requests: $(cat "$WORK/dup.out")"
$AS_POD "$PROBE" conns --socket "$SOCK" --count 3 --hold >"$WORK/idle.out" &
IDLE=$!
KILL_ON_EXIT="$KILL_ON_EXIT $IDLE"
wait_until 30 "grep -q accepted '$WORK/idle.out'" || fail "conns did not report"
grep -q '"accepted":3' "$WORK/idle.out" || fail "tensor-less connections: $(cat "$WORK/idle.out")"
wait_passes 2
[ "$(metric tetris_store_holders)" = 1 ] || fail "holders $(metric tetris_store_holders), want 1"
refs=$("$BIN/tetris-agent" inspect --store "$STORE" 2>/dev/null | awk '$4 == "live" { print $5 }')
[ "$refs" = 4 ] || fail "the holder has ${refs:-no} references, want 4 (one per tensor)"
# t0 is mapped three times (logical bytes), the rest once; repeats add nothing.
[ "$(metric tetris_store_logical_bytes)" = 24576 ] ||
    fail "logical bytes $(metric tetris_store_logical_bytes): references not recorded once each"
wait_until 30 '[ "$(metric tetris_ingest_connections)" = 1 ]' ||
    fail "idle tensor-less connections not closed ($(metric tetris_ingest_connections) open)"
kill -0 "$DUP" || fail "the holding connection was closed"
note "10 repeats with duplicates: one holder, 24576 logical bytes, not 10 times that; idle connections closed"
stop_daemon
kill "$IDLE" "$DUP" 2>/dev/null

# ---- connections per process and per uid ----
start_daemon --interval 200ms --scrub-rate 0 --request-timeout 1h \
    --max-connections 8 --max-connections-per-uid 4 --max-connections-per-pid 3
# flood OUT: one pod process opens 5 connections and keeps what it got;
# sets FLOOD to its pid.
flood() {
    $AS_POD "$PROBE" conns --socket "$SOCK" --count 5 --hold >"$1" &
    FLOOD=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $FLOOD"
    wait_until 30 "grep -q accepted '$1'" || fail "conns did not report"
}
flood "$WORK/c1.out"
C1=$FLOOD
grep -q '"accepted":3,"refused":2' "$WORK/c1.out" && grep -q "this process" "$WORK/c1.out" ||
    fail "per-process limit: $(cat "$WORK/c1.out")"
flood "$WORK/c2.out"
C2=$FLOOD
grep -q '"accepted":1,"refused":4' "$WORK/c2.out" && grep -q "this uid" "$WORK/c2.out" ||
    fail "per-uid limit: $(cat "$WORK/c2.out")"
honest_load
[ "$(metric tetris_ingest_connections_refused_total)" = 6 ] ||
    fail "refused connections counted $(metric tetris_ingest_connections_refused_total), want 6"
grep -q "event=ingest-connection-refused.*uid=65534" "$DAEMON_LOG" || fail "refusals not logged"
note "one process got 3 slots, its uid 4 of 8; the honest client still got one"
stop_daemon
kill "$C1" "$C2" 2>/dev/null

# ---- tenant quota, empty tensors charged a page and an inode ----
# (The shared store, where the honest client loads, would get the same
# quota by default: it is lifted.)
start_daemon --interval 200ms --scrub-rate 0 --keep-alive 1h --tenant-capacity 64Ki \
    --shared-capacity 0 --tenants alpha --tenant-listen 127.0.0.1:0
ASOCK="$STORE/tenants/alpha/public/ingest.sock"
wait_until 30 "[ -S '$ASOCK' ]" || fail "tenant alpha not served"
as_pod "$PROBE" forge --tensors 50 --bytes 0 --label empty >"$POD/empty.json" || fail "forge"
# The pod keeps its references: a refusal asks the next pass to make room,
# which may only evict cold tensors.
$AS_POD "$PROBE" send --socket "$ASOCK" --fd "$POD/m.safetensors" --hold <"$POD/empty.json" \
    >"$WORK/empty.out" &
EMPTY=$!
KILL_ON_EXIT="$KILL_ON_EXIT $EMPTY"
wait_until 60 "grep -q held '$WORK/empty.out'" || fail "empty tensors: $(cat "$WORK/empty.out")"
sed -i '/^held$/d' "$WORK/empty.out"
wait_passes 2
page=$(getconf PAGESIZE)
fit=$((65536 / (page + 1024)))
jq -e --argjson fit "$fit" '.ok and ([.tensors[] | select(.status == "ingested")] | length) == $fit and
       ([.tensors[] | select(.error == "full")] | length) == 50 - $fit' "$WORK/empty.out" >/dev/null ||
    fail "empty tensors not charged a page and an inode ($fit fit): $(cut -c1-400 "$WORK/empty.out")"
grep -q "tenant quota full" "$WORK/empty.out" || fail "quota refusal unclear"
curl -sS --max-time 20 "http://127.0.0.1:$RECLAIMER_TENANT_PORT/inventory?tenant=alpha" >"$WORK/alpha.json"
jq -e --argjson fit "$fit" --argjson charge $((page + 1024)) \
    '(.tensors | length) == $fit and .resident_bytes == $fit * $charge' "$WORK/alpha.json" >/dev/null ||
    fail "alpha's inventory does not charge pages and inodes: $(cat "$WORK/alpha.json")"
honest_load
note "tenant quota 64 KiB: $fit empty tensors fit ($((page + 1024)) bytes each), the rest refused (full)"
# Entries without a digest (the daemon hashes them) are held to the quota
# too: charged before a byte is read.
# (A model of its own: the earlier ones are resident by now.)
synth "$POD/nd.safetensors" 4 524288 6
chmod 644 "$POD/nd.safetensors"
"$PROBE" manifest "$POD/nd.safetensors" >"$WORK/nd.json" || fail "manifest"
ingest_request "$WORK/nd.json" nd >"$POD/nd-req.json"
no_digest "$POD/nd-req.json" >"$POD/big-nd.json"
as_pod "$PROBE" send --socket "$ASOCK" --fd "$POD/nd.safetensors" <"$POD/big-nd.json" \
    >"$WORK/quota-nd.out"
jq -e '.ok and ([.tensors[] | select(.error == "full")] | length) == 4' "$WORK/quota-nd.out" \
    >/dev/null && grep -q "tenant quota full" "$WORK/quota-nd.out" ||
    fail "digest-less tensors past the tenant quota: $(cat "$WORK/quota-nd.out")"
note "digest-less entries past the tenant quota: refused (full)"
stop_daemon
kill "$EMPTY" 2>/dev/null

# ---- entries without a digest: the same budgets; identities computed ----
start_daemon --interval 200ms --scrub-rate 0 --max-request-bytes 1Mi
no_digest "$POD/huge.json" >"$POD/huge-nd.json"
as_pod "$PROBE" send --socket "$SOCK" --fd "$POD/sparse" <"$POD/huge-nd.json" >"$WORK/huge-nd.out"
jq -e '.ok and .tensors[0].status == "rejected" and .tensors[0].error == "full"' \
    "$WORK/huge-nd.out" >/dev/null || fail "1 TB digest-less tensor: $(cat "$WORK/huge-nd.out")"
[ -z "$(find "$STORE" -type f -size +1M)" ] || fail "a refused digest-less tensor left bytes"
as_pod "$PROBE" send --socket "$SOCK" --fd "$POD/nd.safetensors" <"$POD/big-nd.json" \
    >"$WORK/big-nd.out"
jq -e '.ok and ([.tensors[] | select(.status == "ingested")] | length) == 2 and
       ([.tensors[] | select(.error == "denied")] | length) == 2' "$WORK/big-nd.out" >/dev/null ||
    fail "digest-less request past --max-request-bytes: $(cat "$WORK/big-nd.out")"
# What the daemon computed is what the manifest says, for what it read.
jq -e --slurpfile m "$WORK/nd.json" '[.tensors | to_entries[] | select(.value.status == "ingested")
        | .value.digest == $m[0].tensors[.key].digest and .value.crc32 == $m[0].tensors[.key].crc32]
        | all' "$WORK/big-nd.out" >/dev/null ||
    fail "computed identities differ from the manifest's: $(cat "$WORK/big-nd.out")"
"$BIN/tetris-agent" verify --store "$STORE" >/dev/null 2>&1 || fail "store does not verify"
[ -z "$(ls "$STORE/private/tmp")" ] || fail "temp files left: $(ls "$STORE/private/tmp")"
stop_daemon
note "digest-less entries: capacity, request bytes and time budgets hold; identities match the manifest"
echo "ok $PROG"
