#!/bin/sh
# test-gpu-share.sh - GPU tensors shared through the real daemon, on the
# fake driver: an importer in separate PID and network namespaces gets
# the exported descriptors over the filesystem socket and reads the right
# bytes; N importers use one copy (the fake's cuMemGetInfo); a write into
# the read-only mapping kills only the writer; a killed importer's
# references are released; the memory returns only after the last
# importer and the daemon's keep-alive; the metrics count it all.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$(dirname "$0")/../lib/gpu.sh"

unshare -pn --fork --mount-proc --kill-child true 2>/dev/null ||
    skip "cannot make PID and network namespaces (unshare -pn: root needed)"
# 6 tensors of 100000 bytes: 6 allocations of 131072 bytes on the device.
synth "$WORK/m.safetensors" 6 100000 41
COPY=786432
[ "$(gpu_used)" = 0 ] || fail "fake device not empty at start: $(gpu_used)"
start_daemon --interval 200ms --scrub-rate 0 --keep-alive 1s

# A: separate PID and network namespaces, same filesystem socket.
gpu_hold A "$WORK/m.safetensors" unshare -pn --fork --mount-proc --kill-child
jq -e ".device_tensors == 6 and .verified == 6 and .mismatched == 0 and .device_bytes == 600000" \
    "$WORK/A.json" >/dev/null || fail "importer A: $(cat "$WORK/A.json")"
[ "$(gpu_used)" = $COPY ] || fail "one importer: device holds $(gpu_used) bytes, want $COPY"
note "importer in its own PID and network namespaces maps the daemon's copies"

# A process in a PID namespace of its own that sees its parent's /proc
# cannot start CUDA (a real driver's CUDA_ERROR_OPERATING_SYSTEM, which the
# fake mimics): it says why and loads on the host path; a pod always has
# a /proc of its own.
rc=0
unshare -p --fork --kill-child "$IMPORTER" --store "$STORE" --device cuda:0 "$WORK/m.safetensors" \
    </dev/null >"$WORK/P.json" 2>"$WORK/P.err" || rc=$?
[ $rc = 0 ] && jq -e '.device_tensors == 0 and .device_fallback == "yes"' "$WORK/P.json" >/dev/null ||
    fail "importer with its parent's /proc: exit $rc $(cat "$WORK/P.json")"
grep -q 'needs a /proc mounted for it' "$WORK/P.err" || fail "no reason given: $(cat "$WORK/P.err")"
note "a PID namespace without its own /proc: host path, reason given"

# B and C: one copy for all three.
gpu_hold B "$WORK/m.safetensors"
gpu_hold C "$WORK/m.safetensors"
for n in B C; do
    jq -e '.verified == 6 and .mismatched == 0' "$WORK/$n.json" >/dev/null || fail "importer $n: $(cat "$WORK/$n.json")"
done
[ "$(gpu_used)" = $COPY ] || fail "three importers: device holds $(gpu_used) bytes, want one copy ($COPY)"
[ "$(gpu_metric tetris_gpu_resident_bytes)" = $COPY ] || fail "resident $(gpu_metric tetris_gpu_resident_bytes)"
[ "$(gpu_metric tetris_gpu_saved_bytes)" = $((2 * COPY)) ] || fail "saved $(gpu_metric tetris_gpu_saved_bytes)"
if command -v promtool >/dev/null 2>&1; then
    http_get /metrics >"$WORK/metrics.txt"
    promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.log" 2>&1 ||
        fail "promtool rejects the metrics: $(cat "$WORK/promtool.log")"
fi
note "three importers, one copy ($(gpu_used) bytes); saved $(gpu_metric tetris_gpu_saved_bytes)"

# Read-only: a host-to-device copy into it is refused; a store through the
# pointer kills the writer and nobody else.
rc=0
"$IMPORTER" --store "$STORE" --device cuda:0 --copy-write --write "$WORK/m.safetensors" \
    </dev/null >"$WORK/W.json" 2>"$WORK/writer.log" || rc=$?
# SIGSEGV: 139 from the shell; under ASan its handler reports SEGV and exits 1.
[ $rc = 139 ] || { [ $rc != 0 ] && grep -q SEGV "$WORK/writer.log"; } ||
    fail "writer into read-only device memory survived (exit $rc)"
jq -e '.copy_write == "refused" and .verified == 6' "$WORK/W.json" >/dev/null ||
    fail "writer: $(cat "$WORK/W.json")"
daemon_alive || fail "the daemon died with the writer"
for p in "$PID_A" "$PID_B" "$PID_C"; do kill -0 "$p" || fail "an importer died with the writer"; done
note "write into the read-only mapping: writer exit $rc, daemon and importers alive"

# A is killed: the daemon sees its connection close and drops its
# references; the copy stays (B and C map it).
kill -KILL "$PID_A"
wait "$PID_A" 2>/dev/null || true
wait_until 60 "[ \"\$(gpu_metric tetris_gpu_saved_bytes)\" = $COPY ]" ||
    fail "killed importer's references not released (saved $(gpu_metric tetris_gpu_saved_bytes))"
[ "$(gpu_used)" = $COPY ] || fail "after a kill: $(gpu_used) bytes"
gpu_release B
gpu_release C
# Nobody references the copy: it lives for the keep-alive, then goes.
wait_until 60 "[ \"\$(gpu_metric tetris_gpu_resident_bytes)\" = 0 ]" ||
    fail "unreferenced copy never released"
wait_until 60 '[ "$(gpu_used)" = 0 ]' || fail "device memory not returned: $(gpu_used) bytes"
daemon_alive || fail "daemon died"
note "killed importer released; memory returned after the last importer and the keep-alive"
stop_daemon
echo "ok $PROG"
