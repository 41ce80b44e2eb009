#!/bin/sh
# test-degrade.sh - degrade, don't fail, on a tmpfs of the test's own.
# A full store filesystem (capacity unlimited, above the tmpfs' size): a
# second model larger than the space left still loads, what did not fit
# privately, with a log line saying why; the daemon stays alive and
# healthy, leaves no temp file, and the first model's tensors all stay
# stored, verify and map warm. Then a store on a tmpfs with huge=never and
# one with huge=within_size both load cold and warm with --populate
# madvise and map; and a kernel without MADV_POPULATE_READ (simulated by a
# seccomp filter answering EINVAL, as such a kernel does) still loads
# warm, populated by reads, with a log line. The models are synthetic.
# Needs root (mount).
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
AGENT="$BIN/tetris-agent"
[ -x "$AGENT" ] || fail "tetris-agent missing"
[ "$(id -u)" = 0 ] || skip "needs root to mount a tmpfs"

MNT="$WORK/mnt"
mkdir "$MNT" || fail "mkdir $MNT"
MOUNTED=""
# mount_store OPTIONS: a fresh tmpfs on $MNT (the last one unmounted), the
# store in it; it is unmounted at exit.
mount_store() {
    [ -z "$MOUNTED" ] || umount "$MNT" || fail "umount $MNT"
    MOUNTED=""
    mount -t tmpfs -o "mode=0755,$1" tetris-degrade "$MNT" 2>"$WORK/mount.err" ||
        skip "cannot mount a tmpfs ($1): $(cat "$WORK/mount.err")"
    MOUNTED=1
    STORE="$MNT/store"
}
unmount_store() { [ -z "$MOUNTED" ] || umount "$MNT" || umount -l "$MNT"; }
at_exit unmount_store

healthz() { curl -s -o /dev/null -w '%{http_code}' --max-time 20 "http://127.0.0.1:$RECLAIMER_PORT/healthz"; }

# --- A full tmpfs ----------------------------------------------------------
mount_store size=16m
synth "$WORK/a.safetensors" 10 1048576 61     # 10 MiB
synth "$WORK/b.safetensors" 8 1048576 62      # 8 MiB: more than is left
start_daemon --interval 1s --scrub-rate 0 --capacity 0

# The holder keeps a loaded until SIGTERM: its stdin, a FIFO this shell
# holds open for writing too, never ends.
mkfifo "$WORK/hold.fifo" || fail "mkfifo"
exec 3<>"$WORK/hold.fifo"
"$AGENT" load --store "$STORE" --hold "$WORK/a.safetensors" <&3 >"$WORK/a.json" \
    2>>"$WORK/agent.log" &
A_PID=$!
KILL_ON_EXIT="$KILL_ON_EXIT $A_PID"
wait_output "$A_PID" "$WORK/a.json" "load of a" "$WORK/agent.log"
jq -e '.fell_back == false and .ingested_bytes == 10485760' "$WORK/a.json" >/dev/null ||
    fail "a: $(cat "$WORK/a.json")"
note "a (10 MiB) stored on a 16 MiB tmpfs: $(df -k "$MNT" | awk 'NR == 2 { print $4 }') KiB left"

: >"$WORK/b.log"
rc=0
"$AGENT" load --store "$STORE" "$WORK/b.safetensors" >"$WORK/b.json" 2>"$WORK/b.log" || rc=$?
[ $rc = 0 ] || fail "load of b on a full tmpfs exited $rc"
jq -e '.fell_back == true and .fallback_reason == "store-full" and .private_bytes > 0 and
    .mapped_bytes + .private_bytes == .bytes' "$WORK/b.json" >/dev/null ||
    fail "b: $(cat "$WORK/b.json")"
grep 'event=fallback reason=store-full' "$WORK/b.log" | grep -qi 'space\|ENOSPC\|full' ||
    fail "no fallback line saying the store is full: $(cat "$WORK/b.log")"
note "b on the full tmpfs: $(jq -c '{mapped_bytes, private_bytes, fallback_reason}' "$WORK/b.json")"
grep 'event=ingest .*label="b.safetensors".* code=full msg=.*No space left on device' \
    "$DAEMON_LOG" >/dev/null || fail "no daemon line saying the tmpfs is full: $(grep 'event=ingest ' "$DAEMON_LOG")"
note "agent: $(grep 'event=fallback' "$WORK/b.log")"
note "daemon: $(grep 'event=ingest .*b.safetensors' "$DAEMON_LOG")"

daemon_alive || fail "the daemon died on a full tmpfs"
# A pass after the refusal (and its eviction attempt) completes healthy.
wait_passes 2
[ "$(healthz)" = 200 ] || fail "/healthz on a full tmpfs: $(healthz): $(http_get /healthz)"
left=$(find "$STORE/private/tmp" -type f | wc -l)
[ "$left" = 0 ] || fail "temp files left: $(ls -l "$STORE/private/tmp")"

# Nothing already stored is lost: a's tensors verify and map warm, while
# held and after.
"$AGENT" verify --store "$STORE" >"$WORK/verify.out" 2>>"$WORK/agent.log" ||
    fail "verify: $(cat "$WORK/verify.out")"
"$AGENT" load --store "$STORE" "$WORK/a.safetensors" >"$WORK/a2.json" 2>>"$WORK/agent.log" ||
    fail "warm load of a failed"
jq -e '.fell_back == false and .ingested_bytes == 0 and .mapped_bytes == 10485760' \
    "$WORK/a2.json" >/dev/null || fail "a warm: $(cat "$WORK/a2.json")"
kill -0 "$A_PID" || fail "the holder of a exited"
release "$A_PID"
exec 3>&-
wait_passes 2
"$AGENT" load --store "$STORE" "$WORK/a.safetensors" >"$WORK/a3.json" 2>>"$WORK/agent.log" ||
    fail "warm load of a, unheld, failed"
jq -e '.fell_back == false and .ingested_bytes == 0 and .mapped_bytes == 10485760' \
    "$WORK/a3.json" >/dev/null || fail "a warm, unheld: $(cat "$WORK/a3.json")"
daemon_alive || fail "the daemon died"
[ "$(healthz)" = 200 ] || fail "/healthz: $(http_get /healthz)"
stop_daemon
note "full tmpfs: b loaded (part private, logged), daemon healthy, a verifies and maps warm"

# --- huge=never and huge=within_size, both ways of populating --------------
note "shmem THP: $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null || echo absent)" \
    "(a kernel without THP for shmem is not produced here: huge=never stands for it)"
seed=70
for huge in never within_size; do
    mount_store "size=64m,huge=$huge"
    start_daemon --interval 1s --scrub-rate 0 --capacity 0
    for pop in madvise map; do
        seed=$((seed + 1))
        m="$WORK/$huge-$pop.safetensors"
        synth "$m" 4 $((4 * 1048576)) $seed           # 4 x 4 MiB: huge-page sized
        for start in cold warm; do
            "$AGENT" load --store "$STORE" --populate $pop "$m" >"$WORK/$huge.json" \
                2>>"$WORK/agent.log" || fail "$start load, huge=$huge, --populate $pop failed"
            if [ $start = cold ]; then want='.ingested_bytes == .bytes'; else want='.ingested_bytes == 0'; fi
            jq -e ".fell_back == false and .mapped_bytes == .bytes and $want" "$WORK/$huge.json" \
                >/dev/null || fail "$start, huge=$huge, --populate $pop: $(cat "$WORK/$huge.json")"
        done
    done
    "$AGENT" verify --store "$STORE" >"$WORK/verify.out" 2>>"$WORK/agent.log" ||
        fail "verify, huge=$huge: $(cat "$WORK/verify.out")"
    note "huge=$huge: cold and warm loads with --populate madvise and map" \
        "(ShmemHugePages $(awk '/^ShmemHugePages:/ { print $2 }' /proc/meminfo) kB)"
    stop_daemon
done

# --- no MADV_POPULATE_READ --------------------------------------------------
# A seccomp filter answers it EINVAL, as a kernel before 5.14 does.
"$PROBE" no-populate true 2>"$WORK/seccomp.err" ||
    skip "no seccomp filter here: $(cat "$WORK/seccomp.err")"
start_daemon --interval 1s --scrub-rate 0 --capacity 0
for start in cold warm; do
    rc=0
    "$PROBE" no-populate "$AGENT" load --store "$STORE" --populate madvise "$WORK/a.safetensors" \
        >"$WORK/old.json" 2>"$WORK/old.log" || rc=$?
    [ $rc = 0 ] || fail "$start load without MADV_POPULATE_READ exited $rc"
    jq -e '.fell_back == false and .mapped_bytes == .bytes' "$WORK/old.json" >/dev/null ||
        fail "$start, without MADV_POPULATE_READ: $(cat "$WORK/old.json")"
    [ "$(grep -c 'event=populate-degraded .*action=read-pages' "$WORK/old.log")" = 1 ] ||
        fail "want one populate-degraded line: $(cat "$WORK/old.log")"
done
# With the call allowed, no such line.
"$AGENT" load --store "$STORE" --populate madvise "$WORK/a.safetensors" >"$WORK/new.json" \
    2>"$WORK/new.log" || fail "warm load with MADV_POPULATE_READ failed"
grep -q 'event=populate-degraded' "$WORK/new.log" && fail "populate-degraded with MADV_POPULATE_READ"
stop_daemon
note "without MADV_POPULATE_READ: loads populate by reads, one log line"
echo "ok $PROG"
