#!/bin/sh
# test-gpu-driver-trust.sh - only the operator chooses code the root
# daemon runs, on the fake driver (tests/gpu/fake_libcuda.c):
#   - a settings file (what a ConfigMap writer controls) that names
#     libcuda is refused at start, with an error naming the key;
#   - a driver that is writable by group or others, owned by another user,
#     or in a directory others can write, is refused when a pod first asks
#     for a GPU copy: the agent gets the reason, the daemon logs it, loads
#     nothing and serves the host path;
#   - a root-owned copy in a root-owned directory loads and serves.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$(dirname "$0")/../lib/gpu.sh"
[ "$(id -u)" = 0 ] || skip "needs root (files owned by root and by another uid)"
FAKE="$TETRIS_LIBCUDA"
synth "$WORK/m.safetensors" 4 100000 71

# ---- the settings file may not name the driver ----
printf 'libcuda: %s\n' "$FAKE" >"$WORK/settings.yaml"
st=$(status "$RECLAIMER" --config "$WORK/settings.yaml" --store "$STORE" --once --listen "")
cp "$WORK/status.err" "$WORK/config.err"
[ "$st" = 2 ] || fail "a settings file naming libcuda: exit $st, want 2 ($(cat "$WORK/config.err"))"
grep -q 'settings.yaml:1: \\"libcuda\\" is refused in a settings file' "$WORK/config.err" ||
    fail "the refusal does not name the key: $(cat "$WORK/config.err")"
note "settings file naming libcuda: $(head -n 1 "$WORK/config.err" | cut -c1-110)"

# driver_case DIR WANT: the daemon with --libcuda DIR/libcuda.so.1; an
# agent asks for cuda:0. WANT "ok": GPU copies served; else the text the
# refusal must contain.
driver_case() {
    start_daemon --interval 200ms --scrub-rate 0 --gpu-shared-store --libcuda "$1/libcuda.so.1"
    out=$("$BIN/tetris-agent" load --store "$STORE" --device cuda:0 "$WORK/m.safetensors" 2>"$WORK/agent.log") ||
        fail "agent with --libcuda $1: $(cat "$WORK/agent.log")"
    if [ "$2" = ok ]; then
        printf '%s\n' "$out" | jq -e '.device_tensors == 4' >/dev/null || fail "good driver refused: $out"
        grep -q 'event=gpu-driver-loaded' "$DAEMON_LOG" || fail "good driver not loaded"
    else
        printf '%s\n' "$out" | jq -e --arg w "$2" '.fell_back == false and .device_tensors == 0 and
            (.device_fallback | contains($w))' >/dev/null || fail "$1: want '$2', got $out"
        grep -q "event=gpu-unavailable msg=.*$2" "$DAEMON_LOG" || fail "$1: refusal not logged"
        grep -q 'event=gpu-driver-loaded' "$DAEMON_LOG" && fail "$1: the driver was loaded"
    fi
    stop_daemon
    : >"$DAEMON_LOG"
}
copy_fake() { # DIR DIRMODE FILEMODE [OWNER]
    mkdir -p "$1"
    cp "$FAKE" "$1/libcuda.so.1"
    chmod "$3" "$1/libcuda.so.1"
    chmod "$2" "$1"
    [ -z "${4:-}" ] || chown "$4" "$1/libcuda.so.1"
}
chmod 0755 "$WORK"
copy_fake "$WORK/world" 0755 0777
driver_case "$WORK/world" "is writable by group or others (mode 0777): refusing to load it"
copy_fake "$WORK/group" 0755 0775
driver_case "$WORK/group" "is writable by group or others (mode 0775)"
copy_fake "$WORK/nobody" 0755 0755 65534
driver_case "$WORK/nobody" "is owned by uid 65534, not root"
copy_fake "$WORK/opendir" 0777 0755
driver_case "$WORK/opendir" "directory $WORK/opendir is writable by group or others (mode 0777)"
# A link from a root-owned directory to a driver in a directory others
# can write is judged by where it leads.
mkdir -p "$WORK/link"
ln -s "$WORK/opendir/libcuda.so.1" "$WORK/link/libcuda.so.1"
driver_case "$WORK/link" "directory $WORK/opendir is writable by group or others"
note "world- or group-writable, foreign-owned, in an open directory or linked there: refused"

copy_fake "$WORK/good" 0755 0755
driver_case "$WORK/good" ok
note "a root-owned driver in a root-owned directory loads"
echo "ok $PROG"
