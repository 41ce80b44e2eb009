#!/bin/sh
# test-cgroup.sh - the accounting invariant with real cgroup v1 memory
# cgroups: the daemon runs in cgroup A, a function instance in cgroup B
# loads a 256 MiB synthetic model through the daemon and maps it. The
# shared pages are charged to A (the daemon wrote them into tmpfs), and B
# is charged less than 5% of the model's bytes. As a control, an instance
# in cgroup C that loads privately (no daemon) is charged the whole model.
# Under AddressSanitizer the instance also carries shadow memory, an eighth
# of every byte it maps (32 MiB for this model, anonymous, charged to B):
# the sanitizer's, not the store's, so it is measured in the instance's
# smaps and left out of B's charge. Skipped where no writable memory
# cgroup is available.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
asan_memory_as_release

CG_REL=$(grep -E '^[0-9]+:([^:]*,)?memory(,[^:]*)?:' /proc/self/cgroup | head -n 1 | cut -d: -f3)
CG_ROOT="/sys/fs/cgroup/memory$CG_REL"
if [ -z "$CG_REL" ] || [ ! -w "$CG_ROOT" ] || ! mkdir "$CG_ROOT/tetris-probe-$$" 2>/dev/null; then
    skip "no writable cgroup v1 memory controller here"
fi
rmdir "$CG_ROOT/tetris-probe-$$"
CG_A="$CG_ROOT/tetris-$$-daemon"
CG_B="$CG_ROOT/tetris-$$-shared"
CG_C="$CG_ROOT/tetris-$$-private"
mkdir "$CG_A" "$CG_B" "$CG_C" || fail "cannot create cgroups"
# At exit, once the processes in them are gone.
cg_cleanup() {
    rm -rf "$STORE"
    for g in "$CG_A" "$CG_B" "$CG_C"; do rmdir "$g" 2>/dev/null; done
}
at_exit cg_cleanup

usage() { cat "$1/memory.usage_in_bytes"; }
stat_of() { awk -v k="$2" '$1 == k { print $2 }' "$1/memory.stat"; }

# shadow_kb PID: anonymous kB in the process's sanitizer shadow, the only
# mappings of more than a TiB (0 without a sanitizer).
shadow_kb() {
    awk '/^[0-9a-f]+-[0-9a-f]+ / { big = 0 } /^Size:/ { big = $2 > 1073741824 }
         /^Anonymous:/ { if (big) s += $2 } END { print s + 0 }' "/proc/$1/smaps"
}

# smaps_summary PID: what the process's memory is, to tell a failure's
# cause: the totals, then its five largest anonymous mappings.
smaps_summary() {
    awk '/^[0-9a-f]+-[0-9a-f]+ / { range = $1; name = $6 }
         /^Rss:/ { rss += $2 } /^Anonymous:/ { anon += $2; a[range " " name] += $2 }
         /^AnonHugePages:/ { huge += $2 } /^Shared_Clean:/ { shared += $2 }
         END { printf "smaps of %s: rss %d kB, anonymous %d kB (huge %d kB), shared clean %d kB\n",
                      pid, rss, anon, huge, shared
               n = 0; for (k in a) if (a[k] > 0) print "  anonymous " a[k] " kB " k | "sort -k2 -rn | head -n 5" }' \
        pid="$1" "/proc/$1/smaps"
    echo "threads $(awk '/^Threads:/ { print $2 }' "/proc/$1/status"); CPUs $(nproc); THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
}

MODEL="$WORK/synthetic-256m.safetensors"
synth "$MODEL" 64 $((4 * 1048576)) 7          # 64 x 4 MiB = 256 MiB
MODEL_BYTES=$((64 * 4 * 1048576))

# The daemon, started inside cgroup A.
sh -c "echo \$\$ >'$CG_A/cgroup.procs' && exec '$RECLAIMER' --store '$STORE' --listen 127.0.0.1:0 \
    --interval 1 --scrub-rate 0" >>"$DAEMON_LOG" 2>&1 &
RECLAIMER_PID=$!
KILL_ON_EXIT="$KILL_ON_EXIT $RECLAIMER_PID"
wait_until 60 'grep -q "event=serving" "$DAEMON_LOG"' || fail "daemon did not start"
A_BEFORE=$(usage "$CG_A")

# The function instance, inside cgroup B, loads through the daemon and holds.
sh -c "echo \$\$ >'$CG_B/cgroup.procs' && exec '$PROBE' load --store '$STORE' --hold '$MODEL'" \
    </dev/null >"$WORK/b.json" 2>>"$WORK/probe.log" &
B_PID=$!
KILL_ON_EXIT="$KILL_ON_EXIT $B_PID"
wait_until 300 "grep -q '\"pid\"' '$WORK/b.json'" || fail "instance in B did not load"
grep -q "\"mapped_bytes\":$MODEL_BYTES" "$WORK/b.json" || fail "B did not map the whole model: $(cat "$WORK/b.json")"
B_USAGE=$(usage "$CG_B")
A_USAGE=$(( $(usage "$CG_A") - A_BEFORE ))
smaps_summary "$B_PID" >"$WORK/b-smaps.log"
B_SHADOW=$(( $(shadow_kb "$B_PID") * 1024 ))
note "model $MODEL_BYTES B; daemon cgroup A +$A_USAGE B (shmem $(stat_of "$CG_A" shmem)); instance cgroup B $B_USAGE B (rss $(stat_of "$CG_B" rss), mapped_file $(stat_of "$CG_B" mapped_file), rss_huge $(stat_of "$CG_B" rss_huge)), of which sanitizer shadow $B_SHADOW B"
[ $((B_USAGE - B_SHADOW)) -lt $((MODEL_BYTES / 20)) ] ||
    fail "B charged $B_USAGE B ($B_SHADOW B sanitizer shadow), not < 5% of $MODEL_BYTES: $(cat "$WORK/b-smaps.log")"
[ "$A_USAGE" -ge $((MODEL_BYTES * 9 / 10)) ] || fail "daemon's cgroup charged only $A_USAGE B for a $MODEL_BYTES B model"

# Control: the same model loaded privately in cgroup C is charged to C.
sh -c "echo \$\$ >'$CG_C/cgroup.procs' && exec '$PROBE' load --store '$STORE' --socket '$WORK/none.sock' --hold '$MODEL'" \
    </dev/null >"$WORK/c.json" 2>>"$WORK/probe.log" &
C_PID=$!
KILL_ON_EXIT="$KILL_ON_EXIT $C_PID"
wait_until 300 "grep -q '\"pid\"' '$WORK/c.json'" || fail "private instance in C did not load"
grep -q '"fallback":true' "$WORK/c.json" || fail "C should have loaded privately"
C_USAGE=$(usage "$CG_C")
note "private control: cgroup C $C_USAGE B"
[ "$C_USAGE" -ge $((MODEL_BYTES * 9 / 10)) ] || fail "private load charged only $C_USAGE B: measurement broken"
echo "ok $PROG"
