#!/bin/sh
# test-claims.sh - claims the daemon will reject cost other tenants
# nothing (issue: one pod looping wrong-digest claims over a sparse file
# kept the store "full" for every other tenant, and a claim just under the
# capacity, refused unread, emptied every store's cold cache). Pods run as
# uids of their own (setpriv) on the real sockets, on a real tmpfs, with a
# node capacity of 64 MiB:
#   1. tenant alpha's two uids loop forged claims (a sparse file of zeros
#      under digests it does not have), 48 MiB and 7.9 MiB each, four
#      loops at a time: claims larger than the unverified bound per uid
#      (12.5% of the capacity) are refused unread, the others hold at most
#      that per uid and 25% per store while read, and a uid whose claim
#      failed backs off (1 s, doubling, at most a minute). Meanwhile tenant
#      beta ingests a 30 MiB model: every tensor is stored;
#   2. with 56 MiB of cold tensors in the shared store and beta's, alpha
#      claims 60 MiB (just under the capacity), 100 MiB (over it), and
#      7.9 MiB that fit only against the cold bytes and fail verification:
#      all are refused or fail, and no pass evicts anything. A verified
#      ingest that needs the cold room does make the next pass evict.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"

[ "$(id -u)" = 0 ] || skip "needs root, to run pods as uids of their own"
command -v setpriv >/dev/null 2>&1 || skip "setpriv (util-linux) is not installed"

MI=1048576
chmod 755 "$WORK"
A="$STORE/tenants/alpha"
B="$STORE/tenants/beta"
POD="$WORK/pod"
mkdir "$POD" && chown 60001:60001 "$POD" || fail "pod directory"
as_uid() { _u=$1; shift; setpriv --reuid="$_u" --regid="$_u" --clear-groups "$@"; }
as_uid 60001 truncate -s 1G "$POD/zeros" || fail "sparse file"
chmod 644 "$POD/zeros"
as_uid 60001 "$PROBE" forge --tensors 1 --bytes $((48 * MI)) --corrupt --label big >"$POD/big.json"
as_uid 60001 "$PROBE" forge --tensors 1 --bytes 8283750 --corrupt --label fit >"$POD/fit.json"
synth "$WORK/beta.safetensors" 60 524288 2
chmod 644 "$WORK/beta.safetensors"

# attack UID SOCKET REQUEST: a pod of UID sends REQUEST (over the sparse
# file) again and again while the socket is there, until killed; adds its
# pid to ATTACKS.
ATTACKS=""
attack() {
    setpriv --reuid="$1" --regid="$1" --clear-groups sh -c \
        "while [ -S '$2' ]; do '$PROBE' send --socket '$2' --fd '$POD/zeros' <'$3' >/dev/null 2>&1; done" &
    ATTACKS="$ATTACKS $!"
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
}
tmetric() {
    curl -sS --max-time 20 "http://127.0.0.1:$RECLAIMER_TENANT_PORT/metrics" |
        awk -v s="$1{tenant=\"$2\"}" '$1 == s { print $2 }'
}
# beta_load MODEL OUT: beta's instance (uid 60100) loads MODEL.
beta_load() {
    as_uid 60100 "$PROBE" load --store "$B" "$1" >"$2" 2>>"$WORK/probe.log" ||
        fail "beta's load failed: $(cat "$2")"
}

COMMON="--interval 200ms --scrub-rate 0 --keep-alive 1h --capacity 64Mi --tenants alpha,beta --tenant-listen 127.0.0.1:0
        --tenant-uids alpha=60001-60002,beta=60100"
# shellcheck disable=SC2086
start_daemon $COMMON
wait_until 30 "[ -S '$A/public/ingest.sock' ] && [ -S '$B/public/ingest.sock' ]" ||
    fail "tenants not served"
ASOCK="$A/public/ingest.sock"

# ---- 1. forged claims in a loop; beta ingests meanwhile ----
for u in 60001 60002; do
    attack $u "$ASOCK" "$POD/big.json"
    attack $u "$ASOCK" "$POD/fit.json"
done
# (Some rounds first: with backoff, 1 s, 2 s, 4 s.)
sleep 5
[ "$(tmetric tetris_ingest_rejected_tensors_total alpha)" -ge 3 ] ||
    fail "the attack did not start: $(tail -3 "$DAEMON_LOG")"
beta_load "$WORK/beta.safetensors" "$WORK/beta.json"
jq -e '.fallback == false and .ingested == 60 and .rejected == 0' "$WORK/beta.json" >/dev/null ||
    fail "beta's ingest suffered from alpha's claims: $(cat "$WORK/beta.json")"
# shellcheck disable=SC2086
kill $ATTACKS 2>/dev/null
note "during alpha's forged claims (4 loops, 2 uids), beta stored all 60 tensors (30 MiB)"
# What alpha's claims were told, and the backoff in the log: 1 s first,
# doubling, never above a minute.
as_uid 60001 "$PROBE" send --socket "$ASOCK" --fd "$POD/zeros" <"$POD/fit.json" >"$WORK/fit.out"
grep -q '"error":"denied".*earlier ones failed verification' "$WORK/fit.out" ||
    fail "a backing-off uid's claim not refused: $(cat "$WORK/fit.out")"
[ "$(tmetric tetris_ingest_claims_backed_off_total alpha)" -ge 1 ] || fail "backoff not counted"
delays=$(grep 'event=claim-failed tenant=alpha .*uid=60001 ' "$DAEMON_LOG" | sed 's/.*delay_ms=//')
[ "$(echo "$delays" | head -n 1)" = 1000 ] || fail "first backoff: $(echo "$delays" | head -n 1) ms"
prev=0
for d in $delays; do
    [ "$d" -le 60000 ] && { [ "$d" = 60000 ] || [ "$d" = 1000 ] || [ "$d" = $((prev * 2)) ]; } ||
        fail "backoff delays not doubling up to a minute: $(echo $delays)"
    prev=$d
done
[ "$(tmetric tetris_ingest_unverified_bytes alpha)" = 0 ] || fail "alpha's claims left bytes reserved"
note "alpha's claims failed verification, its uids backed off: $(echo $delays) ms"
stop_daemon

# ---- 2. refused or failed claims evict nothing ----
rm -rf "$STORE"
: >"$DAEMON_LOG"
# shellcheck disable=SC2086
start_daemon $COMMON
wait_until 30 "[ -S '$A/public/ingest.sock' ] && [ -S '$B/public/ingest.sock' ]" ||
    fail "tenants not served"
synth "$WORK/shared.safetensors" 28 $MI 3
synth "$WORK/beta2.safetensors" 28 $MI 4
chmod 644 "$WORK/beta2.safetensors"
"$PROBE" load --store "$STORE" "$WORK/shared.safetensors" >"$WORK/shared.json" 2>>"$WORK/probe.log"
beta_load "$WORK/beta2.safetensors" "$WORK/beta2.json"
jq -e '.ingested == 28' "$WORK/shared.json" "$WORK/beta2.json" >/dev/null ||
    fail "cold tensors not stored: $(cat "$WORK/shared.json" "$WORK/beta2.json")"
wait_passes 3 # both instances have exited: their tensors are cold
as_uid 60001 "$PROBE" forge --tensors 1 --bytes $((60 * MI)) --label under >"$POD/under.json"
as_uid 60001 "$PROBE" forge --tensors 1 --bytes $((100 * MI)) --label over >"$POD/over.json"
for req in under over fit; do
    as_uid 60001 "$PROBE" send --socket "$ASOCK" --fd "$POD/zeros" <"$POD/$req.json" >"$WORK/$req.out"
    jq -e '.ok and .tensors[0].status == "rejected"' "$WORK/$req.out" >/dev/null ||
        fail "alpha's $req claim was not refused: $(cat "$WORK/$req.out")"
done
grep -q '"error":"corrupt"' "$WORK/fit.out" ||
    fail "the claim that fit against cold bytes was not read and failed: $(cat "$WORK/fit.out")"
wait_passes 5
[ "$(metric tetris_evictions_total)" = 0 ] || fail "refused claims evicted $(metric tetris_evictions_total) shared tensors"
[ "$(tmetric tetris_evictions_total beta)" = 0 ] || fail "refused claims evicted beta's tensors"
[ "$(find "$STORE/public/tensors" "$B/public/tensors" -type f | wc -l)" = 56 ] ||
    fail "cold tensors gone: $(find "$STORE/public/tensors" "$B/public/tensors" -type f | wc -l) of 56 left"
note "60 MiB and 100 MiB claims refused, 7.9 MiB failed against cold room: nothing evicted"
# A claim larger than a uid may have unverified is refused unread (alpha's
# other uid: 60001 backs off after its failed claim).
as_uid 60002 "$PROBE" send --socket "$ASOCK" --fd "$POD/zeros" <"$POD/big.json" >"$WORK/big.out"
grep -q '"error":"denied".*larger than the bytes a store or uid may have unverified' "$WORK/big.out" ||
    fail "a claim past the unverified bound not refused as such: $(cat "$WORK/big.out")"
# A verified ingest that needs the cold room is let in, and the pass after
# it evicts cold tensors to get under the capacity again: the shared
# store's when its turn comes after the ingest ended, beta's when the
# shared store's turn came while the ingest was still writing.
evictions() { echo $(($(metric tetris_evictions_total) + $(tmetric tetris_evictions_total beta))); }
synth "$WORK/new.safetensors" 8 $MI 5
"$PROBE" load --store "$STORE" "$WORK/new.safetensors" >"$WORK/new.json" 2>>"$WORK/probe.log"
jq -e '.ingested == 8 and .rejected == 0' "$WORK/new.json" >/dev/null ||
    fail "a verified ingest was not let in against cold bytes: $(cat "$WORK/new.json")"
wait_until 60 '[ "$(evictions)" -ge 1 ]' || fail "the verified ingest evicted nothing"
wait_passes 2
total=$(($(metric tetris_store_resident_bytes) + $(tmetric tetris_store_resident_bytes beta)))
[ "$total" -le $((64 * MI)) ] || fail "node left above its capacity: $total bytes"
note "a verified 8 MiB ingest was let in against cold bytes; the next pass evicted $(evictions)"
stop_daemon
echo "ok $PROG"
