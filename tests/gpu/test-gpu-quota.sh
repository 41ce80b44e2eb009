#!/bin/sh
# test-gpu-quota.sh - device memory is shared fairly, and only where it is
# safe, attacked with the real daemon on the fake driver (a 64 MiB device
# with a 2 MiB granularity, as on an H200):
#   - tiny tensors: a client that ignores the agent's rule asks for device
#     copies of 32 tensors of 8 bytes (padded, the whole device): every one
#     is refused and nothing is allocated;
#   - quotas: tenant alpha asks for 32 tensors of 1 MiB (64 MiB padded):
#     it gets its equal share of the device and no more, and tenant beta's
#     copies are still made;
#   - the shared store serves no device copies without --gpu-shared-store.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$(dirname "$0")/../lib/gpu.sh"
TETRIS_FAKE_CUDA_GRANULARITY=$((2 << 20))
export TETRIS_FAKE_CUDA_GRANULARITY

synth "$WORK/tiny.safetensors" 32 8 7
synth "$WORK/alpha.safetensors" 32 $((1 << 20)) 8
synth "$WORK/beta.safetensors" 8 $((1 << 20)) 9
start_daemon --interval 200ms --scrub-rate 0 --keep-alive 1h --tenants alpha,beta
sock() { echo "$STORE/tenants/$1/public/ingest.sock"; }
wait_until 30 "[ -S '$(sock alpha)' ] && [ -S '$(sock beta)' ]" || fail "tenant sockets missing"

# ask NAME SOCKET MODEL: a client asking for every tensor, held until
# $WORK/NAME.in closes; its JSON in $WORK/NAME.json.
ask() {
    mkfifo "$WORK/$1.in"
    sleep 100000 >"$WORK/$1.in" &
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    "$IMPORTER" --socket "$2" --device cuda:0 --ask-all --hold "$3" <"$WORK/$1.in" \
        >"$WORK/$1.json" 2>>"$WORK/importer.log" &
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    wait_until 60 "grep -q asked '$WORK/$1.json'" || fail "client $1 did not answer"
}

ask tiny "$(sock alpha)" "$WORK/tiny.safetensors"
jq -e '.asked == 32 and .attached == 0 and .refused == 32 and
    (.reason | test("under a quarter of cuda:0.s allocation granularity"))' "$WORK/tiny.json" \
    >/dev/null || fail "tiny tensors: $(cat "$WORK/tiny.json")"
[ "$(gpu_used)" = 0 ] || fail "tiny tensors took $(gpu_used) bytes of the device"
note "32 tensors of 8 bytes: all refused, no device memory taken"

# Three stores served (shared, alpha, beta): a share is 64 MiB / 3, ten
# padded copies of 2 MiB.
ask alpha "$(sock alpha)" "$WORK/alpha.safetensors"
jq -e '.asked == 32 and .attached == 10 and .refused == 22 and
    (.reason | test("store alpha: its GPU quota on cuda:0 is full"))' "$WORK/alpha.json" \
    >/dev/null || fail "alpha past its quota: $(cat "$WORK/alpha.json")"
ask beta "$(sock beta)" "$WORK/beta.safetensors"
jq -e '.asked == 8 and .attached == 8 and .refused == 0' "$WORK/beta.json" >/dev/null ||
    fail "beta refused after alpha's flood: $(cat "$WORK/beta.json")"
[ "$(gpu_used)" = $((18 * (2 << 20))) ] || fail "device holds $(gpu_used) bytes, want 18 copies"
note "alpha held to its share (10 of 32), beta got all 8 of its copies"

# The shared store: refused unless the operator says its pods trust
# each other; the agent loads on the host path and says why.
out=$("$BIN/tetris-agent" load --store "$STORE" --device cuda:0 "$WORK/beta.safetensors" \
    2>"$WORK/agent.log") || fail "agent on the shared store: $(cat "$WORK/agent.log")"
printf '%s\n' "$out" | jq -e '.fell_back == false and .device_tensors == 0 and
    (.device_fallback | test("shared store serves no device copies"))' >/dev/null ||
    fail "shared store served device copies: $out"
stop_daemon
start_daemon --interval 200ms --scrub-rate 0 --keep-alive 1h --tenants alpha,beta --gpu-shared-store
out=$("$BIN/tetris-agent" load --store "$STORE" --device cuda:0 "$WORK/beta.safetensors" \
    2>"$WORK/agent.log") || fail "agent on the shared store: $(cat "$WORK/agent.log")"
printf '%s\n' "$out" | jq -e '.device_tensors == 8' >/dev/null ||
    fail "--gpu-shared-store: $out"
note "shared store: device copies only with --gpu-shared-store"
daemon_alive || fail "daemon died"
stop_daemon
echo "ok $PROG"
