#!/bin/sh
# test-store-tmpfs.sh - the store on a tmpfs of the daemon's own
# (--store-tmpfs, reclaimer/store_tmpfs.h):
#  1. huge on an empty directory (--mount-only, as the chart's init
#     container runs it): a tmpfs with huge=within_size is mounted there,
#     mode 0755, nosuid/nodev/noexec, with one log line saying so; from a
#     private mount namespace, --mount-namespace puts it in the host's; a
#     kernel that refuses huge= gets 4 KiB pages and a line saying why;
#  2. the daemon on it reuses the mount, ingests, and after a restart finds
#     the mount and every tensor again (a mount outlives its daemon);
#  3. a directory that already holds files (a pod's DirectoryOrCreate of
#     <store>/public, made as another uid, and a file) is never mounted
#     over: one warning line, the daemon serves it as it is, nothing stored
#     is lost, and it stays loud: tetris_store_tmpfs_fallback is 1 and
#     /healthz (still 200) says store_tmpfs fallback with the reason, for
#     as long as the daemon runs (0 and no fallback on its own tmpfs);
#  4. without CAP_SYS_ADMIN the mount is refused: one warning line, the
#     directory as it is (the fallback, in /metrics too), loads still work;
#  5. none leaves the directory alone; the setting also comes from the YAML
#     config (store_tmpfs); a mount namespace that cannot be entered is a
#     fallback; a bad value is a usage error (exit 2).
# The model is synthetic. Needs root (mount).
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
[ "$(id -u)" = 0 ] || skip "needs root to mount a tmpfs"
command -v findmnt >/dev/null || skip "findmnt (util-linux) missing"

MOUNTS=""
unmount_all() { for m in $MOUNTS; do umount "$m" 2>/dev/null || umount -l "$m"; done; }
at_exit unmount_all

synth "$WORK/m.safetensors" 4 4194304 71 # 16 MiB: whole 2 MiB pages

# tmpfs_line LOG: the daemon's one line about the store's filesystem.
tmpfs_line() {
    n=$(grep -c 'event=store-tmpfs ' "$1")
    [ "$n" = 1 ] || fail "want one event=store-tmpfs line in $1, got $n: $(cat "$1")"
    grep 'event=store-tmpfs ' "$1"
}

# --- 1. huge, --mount-only, on an empty directory ----------------------------
S1="$WORK/s1"
rc=0
"$RECLAIMER" --store "$S1" --store-tmpfs huge --mount-only --listen "" \
    >"$WORK/mount.log" 2>&1 || rc=$?
line=$(tmpfs_line "$WORK/mount.log")
case "$line" in
*state=fallback*"Operation not permitted"*) skip "this root may not mount: $line" ;;
esac
[ $rc = 0 ] || fail "--mount-only exited $rc: $(cat "$WORK/mount.log")"
MOUNTS="$S1"
echo "$line" | grep -q 'state=mounted .*tmpfs=1' || fail "not mounted: $line"
fstype=$(findmnt -n -o FSTYPE --mountpoint "$S1") || fail "nothing mounted on $S1: $line"
opts=$(findmnt -n -o OPTIONS --mountpoint "$S1")
[ "$fstype" = tmpfs ] || fail "$S1 is $fstype, not tmpfs"
for o in nosuid nodev noexec mode=755; do
    case ",$opts," in *",$o,"*) ;; *) fail "mount options lack $o: $opts" ;; esac
done
case ",$opts," in
*,huge=within_size,*) echo "$line" | grep -q 'huge=within_size' || fail "line: $line" ;;
*) echo "$line" | grep -q 'huge=never msg=.*refused' ||
    fail "no huge=within_size ($opts) and no line saying why: $line"
    note "this kernel refuses huge= on tmpfs: $line" ;;
esac
[ -z "$(ls -A "$S1")" ] || fail "--mount-only laid out a store: $(ls -A "$S1")"
note "mounted: $line ($opts)"

# --- 1b. from a mount namespace of its own (a container's), into ours ------
# Without --mount-namespace the mount stays in the private namespace, where
# no function pod would see it; with it, it lands where the test looks.
command -v unshare >/dev/null || skip "unshare (util-linux) missing"
S1B="$WORK/s1b"
unshare -m --propagation private "$RECLAIMER" --store "$S1B" --store-tmpfs huge --mount-only \
    >"$WORK/private-ns.log" 2>&1 || fail "--mount-only in a namespace: $(cat "$WORK/private-ns.log")"
tmpfs_line "$WORK/private-ns.log" | grep -q 'state=mounted' || fail "$(cat "$WORK/private-ns.log")"
! findmnt -n --mountpoint "$S1B" >/dev/null || { MOUNTS="$MOUNTS $S1B"; fail "a private mount leaked"; }
unshare -m --propagation private "$RECLAIMER" --store "$S1B" --store-tmpfs huge --mount-only \
    --mount-namespace "/proc/$$/ns/mnt" >"$WORK/host-ns.log" 2>&1 ||
    fail "--mount-namespace: $(cat "$WORK/host-ns.log")"
MOUNTS="$MOUNTS $S1B"
tmpfs_line "$WORK/host-ns.log" | grep -q 'state=mounted' || fail "$(cat "$WORK/host-ns.log")"
[ "$(findmnt -n -o FSTYPE --mountpoint "$S1B")" = tmpfs ] ||
    fail "--mount-namespace /proc/$$/ns/mnt: nothing mounted where the test looks"
rc=0
"$RECLAIMER" --store "$S1B" --mount-namespace "/proc/$$/ns/mnt" >"$WORK/ns-usage.log" 2>&1 || rc=$?
[ $rc = 2 ] || fail "--mount-namespace without --mount-only exited $rc, want 2"

# --- 1c. a kernel without huge pages for tmpfs (played by a preloaded
# library answering mount(... huge=...) EINVAL): 4 KiB pages, and why ----
NO_HUGE="${TETRIS_BUILD:-$ROOT/build/release}/preload/no-huge-tmpfs.so"
[ -f "$NO_HUGE" ] || fail "preload library missing: $NO_HUGE (make all)"
S1C="$WORK/s1c"
# Under ASan the preloaded library comes before the runtime: allowed here.
LD_PRELOAD="$NO_HUGE" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    "$RECLAIMER" --store "$S1C" --store-tmpfs huge --mount-only >"$WORK/no-huge.log" 2>&1 ||
    fail "--store-tmpfs huge without huge tmpfs pages: $(cat "$WORK/no-huge.log")"
MOUNTS="$MOUNTS $S1C"
line=$(tmpfs_line "$WORK/no-huge.log")
echo "$line" | grep -q 'level=warn .*state=mounted .*tmpfs=1 huge=never msg=.*refused huge=within_size' ||
    fail "no 4 KiB-page tmpfs with a line saying why: $line"
[ "$(findmnt -n -o FSTYPE --mountpoint "$S1C")" = tmpfs ] || fail "nothing mounted on $S1C"
note "no huge tmpfs pages: $line"

# fallback_shown 0|1: what /metrics and /healthz say of the store's tmpfs.
fallback_shown() {
    [ "$(metric tetris_store_tmpfs_fallback)" = "$1" ] ||
        fail "tetris_store_tmpfs_fallback is $(metric tetris_store_tmpfs_fallback), want $1"
    curl -sS --max-time 20 -o "$WORK/healthz.json" -w '%{http_code}' \
        "http://127.0.0.1:$RECLAIMER_PORT/healthz" >"$WORK/healthz.code"
    [ "$(cat "$WORK/healthz.code")" = 200 ] || fail "/healthz: $(cat "$WORK/healthz.code")"
    want=false
    [ "$1" = 1 ] && want=true
    jq -e --argjson f $want '.status == "ok" and .store_tmpfs.fallback == $f and
        ((.store_tmpfs.fallback | not) or
         (.store_tmpfs.state == "fallback" and (.store_tmpfs.reason | length) > 0))' \
        "$WORK/healthz.json" >/dev/null || fail "/healthz store_tmpfs: $(cat "$WORK/healthz.json")"
}

# --- 2. the daemon reuses it, and finds it again after a restart -------------
STORE="$S1"
start_daemon --store-tmpfs huge --interval 1s --keep-alive 3600
echo "$(tmpfs_line "$DAEMON_LOG")" | grep -q 'state=reused .*tmpfs=1' ||
    fail "the daemon did not reuse the mount: $(grep event=store-tmpfs "$DAEMON_LOG")"
fallback_shown 0
"$PROBE" load --store "$STORE" "$WORK/m.safetensors" >"$WORK/cold.json" 2>>"$WORK/probe.log" ||
    fail "cold load on the daemon's tmpfs: $(tail -3 "$WORK/probe.log")"
[ "$(tensor_count)" = 4 ] || fail "want 4 tensors stored, have $(tensor_count)"
stop_daemon
: >"$DAEMON_LOG"
start_daemon --store-tmpfs huge --interval 1s --keep-alive 3600
echo "$(tmpfs_line "$DAEMON_LOG")" | grep -q 'state=reused' ||
    fail "restart did not reuse the mount: $(grep event=store-tmpfs "$DAEMON_LOG")"
[ "$(findmnt -n --mountpoint "$S1" | wc -l)" = 1 ] || fail "mounted twice: $(findmnt --mountpoint "$S1")"
[ "$(tensor_count)" = 4 ] || fail "tensors lost across the restart: $(tensor_count) left"
"$BIN/tetris-agent" verify --store "$STORE" >"$WORK/verify.out" 2>&1 ||
    fail "verify after the restart: $(tail -3 "$WORK/verify.out")"
stop_daemon

# --- 3. a directory holding files is not mounted over ------------------------
# What a function pod's hostPath volume (DirectoryOrCreate) makes when it
# starts before the daemon: <store>/public, here as another uid's.
S3="$WORK/s3"
mkdir -p "$S3" && echo keep >"$S3/kept" || fail "mkdir $S3"
if command -v setpriv >/dev/null; then
    chmod 755 "$WORK" && chmod 777 "$S3" || fail "chmod"
    setpriv --reuid=65534 --regid=65534 --clear-groups mkdir "$S3/public" || fail "the pod's mkdir"
    chmod 755 "$S3" && chown root:root "$S3/public" || fail "chmod" # the kubelet makes it as root
fi
STORE="$S3"
DAEMON_LOG="$WORK/daemon3.log"
start_daemon --store-tmpfs huge
line=$(tmpfs_line "$DAEMON_LOG")
echo "$line" | grep -q 'level=warn.*state=fallback .*msg=.*holds files' ||
    fail "no warning that the directory is used as it is: $line"
fallback_shown 1
jq -e '.store_tmpfs.reason | test("holds files")' "$WORK/healthz.json" >/dev/null ||
    fail "/healthz does not say why: $(cat "$WORK/healthz.json")"
! findmnt -n --mountpoint "$S3" >/dev/null || { MOUNTS="$MOUNTS $S3"; fail "mounted over files"; }
[ "$(cat "$S3/kept")" = keep ] || fail "a file in the directory was lost"
"$PROBE" load --store "$STORE" "$WORK/m.safetensors" >/dev/null 2>>"$WORK/probe.log" ||
    fail "load on the directory as it is: $(tail -3 "$WORK/probe.log")"
stop_daemon
note "not empty: $line"

# --- 4. no CAP_SYS_ADMIN: the mount is refused, the directory as it is -------
command -v setpriv >/dev/null || skip "setpriv (util-linux) missing"
S4="$WORK/s4"
STORE="$S4"
DAEMON_LOG="$WORK/daemon4.log"
RECLAIMER_REAL="$RECLAIMER"
cat >"$WORK/no-sys-admin" <<EOF
#!/bin/sh
exec setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin -- "$RECLAIMER_REAL" "\$@"
EOF
chmod +x "$WORK/no-sys-admin"
mkdir "$WORK/nobin" && ln -s "$WORK/no-sys-admin" "$WORK/nobin/tetris-reclaimer" || fail "ln"
BIN_SAVED="$BIN"
BIN="$WORK/nobin"
start_daemon --store-tmpfs huge
BIN="$BIN_SAVED"
line=$(tmpfs_line "$DAEMON_LOG")
echo "$line" | grep -q 'level=warn.*state=fallback .*msg=.*mount tmpfs: Operation not permitted' ||
    fail "no warning that the mount was refused: $line"
fallback_shown 1
! findmnt -n --mountpoint "$S4" >/dev/null || { MOUNTS="$MOUNTS $S4"; fail "mounted anyway"; }
"$PROBE" load --store "$STORE" "$WORK/m.safetensors" >/dev/null 2>>"$WORK/probe.log" ||
    fail "load on the fallback directory: $(tail -3 "$WORK/probe.log")"
[ "$(tensor_count)" = 4 ] || fail "want 4 tensors in the fallback store, have $(tensor_count)"
stop_daemon
note "no CAP_SYS_ADMIN: $line"

# --- 5. none, the YAML setting, a bad value ----------------------------------
S5="$WORK/s5"
"$RECLAIMER" --store "$S5" --store-tmpfs none --mount-only >"$WORK/none.log" 2>&1 ||
    fail "--store-tmpfs none --mount-only: $(cat "$WORK/none.log")"
tmpfs_line "$WORK/none.log" | grep -q 'state=as-is' || fail "none: $(cat "$WORK/none.log")"
! findmnt -n --mountpoint "$S5" >/dev/null || { MOUNTS="$MOUNTS $S5"; fail "none mounted"; }
S6="$WORK/s6"
printf 'store: %s\nstore_tmpfs: plain\n' "$S6" >"$WORK/reclaimer.yaml"
"$RECLAIMER" --config "$WORK/reclaimer.yaml" --mount-only >"$WORK/yaml.log" 2>&1 ||
    fail "store_tmpfs from the config file: $(cat "$WORK/yaml.log")"
MOUNTS="$MOUNTS $S6"
tmpfs_line "$WORK/yaml.log" | grep -q 'state=mounted .*huge=never' || fail "plain: $(cat "$WORK/yaml.log")"
[ "$(findmnt -n -o FSTYPE --mountpoint "$S6")" = tmpfs ] || fail "plain: nothing mounted on $S6"
# A mount namespace that cannot be entered: nothing mounted, exit 0, a line.
"$RECLAIMER" --store "$WORK/s8" --store-tmpfs huge --mount-only \
    --mount-namespace /proc/999999999/ns/mnt >"$WORK/ns-gone.log" 2>&1 ||
    fail "an unreachable mount namespace failed the init step: $(cat "$WORK/ns-gone.log")"
grep -q 'level=warn .*event=store-tmpfs state=fallback .*msg=.*cannot open mount namespace' \
    "$WORK/ns-gone.log" || fail "no fallback line: $(cat "$WORK/ns-gone.log")"
! findmnt -n --mountpoint "$WORK/s8" >/dev/null || { MOUNTS="$MOUNTS $WORK/s8"; fail "mounted anyway"; }
rc=0
"$RECLAIMER" --store "$WORK/s7" --store-tmpfs bogus >"$WORK/bad.log" 2>&1 || rc=$?
[ $rc = 2 ] || fail "--store-tmpfs bogus exited $rc, want 2"
grep -q 'msg=.*bogus: want huge, plain or none' "$WORK/bad.log" || fail "bad value: $(cat "$WORK/bad.log")"

echo "store tmpfs: ok" >&2
