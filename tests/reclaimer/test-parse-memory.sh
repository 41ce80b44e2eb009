#!/bin/sh
# test-parse-memory.sh - what a pod's ingest messages cost the daemon's
# memory (issue: two 4 MiB messages raised its peak by about 370 MiB, the
# JSON decoded into a tree). A pod (uid nobody) sends, at once, two 4 MiB
# requests of 20000 small tensor entries each and a 4 MiB report_fallback
# carrying an unknown member of 60000 small objects; the daemon's peak
# resident memory (VmHWM) may grow by at most 48 MiB for all three (the
# texts themselves are 12 MiB; a decoder that builds a tree of them took
# about 93 MiB for the two requests alone). Every entry still gets its
# answer, and a malformed element deep in a large request is still named.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"

[ "$(id -u)" = 0 ] || skip "needs root, to run the pod as another uid"
command -v setpriv >/dev/null 2>&1 || skip "setpriv (util-linux) is not installed"
asan_memory_as_release

SOCK="$STORE/public/ingest.sock"
chmod 755 "$WORK"
POD="$WORK/pod"
mkdir "$POD" && chown 65534:65534 "$POD" || fail "pod directory"
as_pod() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
as_pod truncate -s 1M "$POD/zeros" || fail "sparse file"
# 20000 distinct empty tensors: about 4 MiB of JSON.
as_pod "$PROBE" forge --tensors 20000 --bytes 0 --label many >"$POD/many.json" || fail "forge"
size=$(wc -c <"$POD/many.json")
[ "$size" -ge 4000000 ] || fail "the request is $size bytes, want about 4 MiB"
jq -c '{op: "report_fallback", label: "junk", reason: "x",
        junk: [range(60000) | {a: ., b: [1, 2], c: "yy"}]}' -n >"$POD/junk.json"

hwm() { awk '/^VmHWM:/ { print $2 * 1024 }' "/proc/$RECLAIMER_PID/status"; }

# A capacity nothing fits in: every tensor is answered "full", unread.
start_daemon --interval 1s --scrub-rate 0 --capacity 1Mi
as_pod "$PROBE" forge --tensors 2 --bytes 0 --label warm-up >"$POD/warm.json"
as_pod "$PROBE" send --socket "$SOCK" --fd "$POD/zeros" <"$POD/warm.json" >/dev/null
before=$(hwm)
for i in 1 2; do
    setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$PROBE" send --socket "$SOCK" --fd "$POD/zeros" <"$POD/many.json" >"$WORK/many$i.out" &
    eval "P$i=\$!"
done
as_pod "$PROBE" send --socket "$SOCK" <"$POD/junk.json" >"$WORK/junk.out"
# shellcheck disable=SC2154
wait "$P1" "$P2"
after=$(hwm)
grows=$((after - before))
for i in 1 2; do
    # (The first few hundred fit the capacity.)
    jq -e '.ok and (.tensors | length) == 20000 and ([.tensors[] | select(.error == "full")] | length) > 19000' \
        "$WORK/many$i.out" >/dev/null || fail "request $i not answered in full: $(cut -c1-300 "$WORK/many$i.out")"
done
grep -q '"ok":true' "$WORK/junk.out" || fail "the fallback report with a large unknown member: $(cat "$WORK/junk.out")"
[ "$grows" -le $((48 * 1048576)) ] ||
    fail "two 4 MiB requests and a 4 MiB report raised the daemon's peak memory by $grows bytes"
note "three 4 MiB messages at once raised the daemon's peak memory by $((grows / 1048576)) MiB"

# The last of 20000 entries malformed: refused with its index.
jq -c '.tensors[19999].dtype = "complex512"' "$POD/many.json" >"$POD/bad-last.json"
as_pod "$PROBE" send --socket "$SOCK" --fd "$POD/zeros" <"$POD/bad-last.json" >"$WORK/bad-last.out"
grep -q '"ok":false.*tensors\[19999\]' "$WORK/bad-last.out" ||
    fail "a malformed last entry not named: $(cat "$WORK/bad-last.out")"
# One entry past the element bound is refused, whatever else it holds.
jq -c --arg pad "$(head -c 70000 /dev/zero | tr '\0' a)" '.tensors[0].pad = $pad' "$POD/warm.json" \
    >"$POD/fat.json"
as_pod "$PROBE" send --socket "$SOCK" --fd "$POD/zeros" <"$POD/fat.json" >"$WORK/fat.out"
grep -q '"ok":false.*tensors\[0\]: longer than 65536 bytes of JSON' "$WORK/fat.out" ||
    fail "an entry past the element bound: $(cat "$WORK/fat.out")"
kill -0 "$RECLAIMER_PID" || fail "the daemon died"
note "a malformed 20000th entry and a 70 KB entry refused with their index"
stop_daemon
echo "ok $PROG"
