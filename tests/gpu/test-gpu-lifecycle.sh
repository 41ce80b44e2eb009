#!/bin/sh
# test-gpu-lifecycle.sh - the daemon's GPU copies through crashes, limits
# and bad requests, on the fake driver: a daemon killed while importers
# map its copies leaves their mappings alive and a restarted daemon serves
# again; --gpu-capacity evicts unreferenced copies (LRU) and refuses what
# still does not fit, per tensor, while the host path goes on; an unknown
# device, a node without a driver and malformed requests get a clear
# error, and nothing already stored or referenced is lost.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$(dirname "$0")/../lib/gpu.sh"
PROBE_SOCK="$STORE/public/ingest.sock"

synth "$WORK/m1.safetensors" 6 100000 41
synth "$WORK/m2.safetensors" 6 100000 42
COPY=786432
start_daemon --interval 200ms --scrub-rate 0 --gpu-shared-store --keep-alive 1s

# ---- daemon crash and restart ----
gpu_hold D "$WORK/m1.safetensors"
kill -KILL "$RECLAIMER_PID"
wait "$RECLAIMER_PID" 2>/dev/null || true
kill -0 "$PID_D" || fail "importer died with the daemon"
[ "$(gpu_used)" = $COPY ] || fail "after the daemon's crash the importer's copy is gone: $(gpu_used)"
start_daemon --interval 200ms --scrub-rate 0 --gpu-shared-store --keep-alive 1s
gpu_hold E "$WORK/m1.safetensors"
jq -e '.verified == 6 and .mismatched == 0' "$WORK/E.json" >/dev/null || fail "after restart: $(cat "$WORK/E.json")"
# The new daemon knows nothing of the old copy: E got a new one; the old
# one lives while D maps it.
[ "$(gpu_used)" = $((2 * COPY)) ] || fail "after restart: $(gpu_used) bytes, want two copies"
gpu_release D
[ "$(gpu_used)" = $COPY ] || fail "old copy outlived its last importer: $(gpu_used)"
gpu_release E
note "daemon crash: importer's mapping lived on; restarted daemon served a new copy"
stop_daemon

# ---- capacity: LRU over unreferenced copies, per-tensor refusal ----
start_daemon --interval 200ms --scrub-rate 0 --gpu-shared-store --keep-alive 1h --gpu-capacity $COPY
gpu_hold F "$WORK/m1.safetensors"
gpu_release F   # m1's copy stays (keep-alive), unreferenced
[ "$(gpu_metric tetris_gpu_resident_bytes)" = $COPY ] || fail "m1 copy not kept"
gpu_hold G "$WORK/m2.safetensors"
jq -e '.device_tensors == 6 and .verified == 6' "$WORK/G.json" >/dev/null ||
    fail "m2 under capacity with m1 evictable: $(cat "$WORK/G.json")"
[ "$(gpu_metric tetris_gpu_resident_bytes)" = $COPY ] || fail "over capacity: $(gpu_metric tetris_gpu_resident_bytes)"
# m2 is referenced now: m1 does not fit, its tensors are refused "full",
# its host load is unchanged.
gpu_hold H "$WORK/m1.safetensors"
jq -e '.device_tensors == 0 and .device_fallback == "yes"' "$WORK/H.json" >/dev/null ||
    fail "m1 over capacity: $(cat "$WORK/H.json")"
grep -q 'device-attach-partial.*full' "$WORK/importer.log" || fail "no 'full' reason logged"
[ "$(gpu_metric tetris_gpu_resident_bytes)" = $COPY ] || fail "over capacity: $(gpu_metric tetris_gpu_resident_bytes)"
gpu_release H
gpu_release G
note "--gpu-capacity: LRU evicted the unreferenced copy, refused what did not fit"
stop_daemon

# ---- bad requests ----
start_daemon --interval 200ms --scrub-rate 0 --gpu-shared-store --keep-alive 1h
# Small tensors stay with the runtime.
synth "$WORK/small.safetensors" 4 8000 43   # under a quarter of 64 KiB each
out=$("$BIN/tetris-agent" load --store "$STORE" --device cuda:0 "$WORK/small.safetensors" 2>"$WORK/agent.log") ||
    fail "agent with small tensors failed: $(cat "$WORK/agent.log")"
printf '%s\n' "$out" | jq -e '.fell_back == false and .device_tensors == 0 and .device_fallback == ""' \
    >/dev/null || fail "small tensors: $out"
note "tensors under a quarter of the granularity are not put on the device"
before=$(tensor_count)
# The agent's driver sees 8 devices, the daemon's 1: the daemon refuses,
# and the connection keeps its host references (the agent holds them).
mkfifo "$WORK/u.in"
sleep 100000 >"$WORK/u.in" &
U_W=$!; KILL_ON_EXIT="$KILL_ON_EXIT $U_W"
TETRIS_FAKE_CUDA_DEVICES=8 "$BIN/tetris-agent" load --store "$STORE" --device cuda:7 --hold \
    "$WORK/m1.safetensors" <"$WORK/u.in" >"$WORK/u.json" 2>"$WORK/agent.log" &
U=$!; KILL_ON_EXIT="$KILL_ON_EXIT $U"
wait_until 60 "grep -q device_fallback '$WORK/u.json'" || fail "agent with an unknown device did not load"
jq -e '.fell_back == false and .mapped_bytes == 600000 and .device_tensors == 0 and
    (.device_fallback | test("node daemon refused: no GPU cuda:7"))' "$WORK/u.json" >/dev/null ||
    fail "unknown device: $(cat "$WORK/u.json")"
grep -q 'event=gpu-attach-refused.*device="cuda:7" code=notfound' "$DAEMON_LOG" ||
    fail "daemon did not log the refusal"
wait_until 60 '[ "$(metric tetris_store_holders)" = 1 ]' ||
    fail "the refused connection lost its host references (holders $(metric tetris_store_holders))"
grep -q daemon-connection-lost "$WORK/agent.log" && fail "the daemon closed the refused connection"
kill "$U_W"
wait "$U" || fail "agent did not exit cleanly"
rc=$(status "$BIN/tetris-agent" load --store "$STORE" --device gpu0 "$WORK/m1.safetensors")
[ "$rc" = 2 ] || fail "--device gpu0: exit $rc, want 2 (usage)"
# Raw requests: malformed ones close the connection with "format"; a
# digest the connection does not reference is refused, nothing attached.
for req in '{"op":"gpu_attach","device":"cuda:0","digests":["sha256:zz"]}' \
           '{"op":"gpu_attach","device":"cuda:0","digests":[]}' \
           '{"op":"gpu_attach","digests":["sha256:00"]}' \
           '{"op":"gpu_attach","device":"cuda:0000000000000000000","digests":["x"]}'; do
    reply=$(printf '%s' "$req" | "$PROBE" send --socket "$PROBE_SOCK" 2>>"$WORK/probe.log")
    printf '%s\n' "$reply" | grep -q '"error":"format"' || fail "malformed $req: $reply"
done
hex=$(printf '%064d' 0)
reply=$(printf '{"op":"gpu_attach","device":"cuda:0","digests":["sha256:%s"]}' "$hex" |
    "$PROBE" send --socket "$PROBE_SOCK" 2>>"$WORK/probe.log")
printf '%s\n' "$reply" | grep -q 'not referenced by this connection' || fail "unreferenced digest: $reply"
daemon_alive || fail "daemon died on bad requests"
[ "$(tensor_count)" = "$before" ] || fail "bad requests lost tensors ($before -> $(tensor_count))"
note "unknown device, bad device name, malformed and unreferenced gpu_attach refused"
stop_daemon

# A node without a driver: the GPU part is refused, the host path works.
start_daemon --interval 200ms --scrub-rate 0 --gpu-shared-store --libcuda "$WORK/none/libcuda.so.1"
out=$("$BIN/tetris-agent" load --store "$STORE" --device cuda:0 "$WORK/m1.safetensors" 2>"$WORK/agent.log") ||
    fail "agent on a node without a driver failed: $(cat "$WORK/agent.log")"
printf '%s\n' "$out" | jq -e '.fell_back == false and .mapped_bytes == 600000 and .device_tensors == 0 and
    (.device_fallback | test("not found: GPU sharing unavailable"))' >/dev/null || fail "no driver: $out"
[ "$(tensor_count)" = "$before" ] || fail "tensors lost ($before -> $(tensor_count))"
note "no driver on the node: $(printf '%s\n' "$out" | jq -r .device_fallback | cut -c1-70)"
stop_daemon
echo "ok $PROG"
