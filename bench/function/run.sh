#!/bin/bash
# bench/function/run.sh - runtime sharing end to end: real tetris-function
# processes under an open-loop load at a fixed rate and latency SLO, with
# the instance configs chosen from a measured profile by
#   dts          tetris-autoscaler plan (DTS over every <c, b, p>)
#   batching     the same over p = 1 configs only (INFless-like)
#   concurrency  the same over b = 1 configs only (Photons-like)
# each with tensor sharing (weights mapped from one store through the node
# daemon; the plan's memory term is private memory, --sharing) and without
# (every instance loads its own weights). Per run: the configs, the memory
# the plan expected, the memory measured (every instance's private memory,
# smaps, plus the store's bytes once), the p95 latency and the SLO
# violations (requests over the SLO or failed). Markdown on stdout.
#
# Environment:
#   TETRIS_BIN          programs under test (required)
#   BENCH_PROFILE       measured profile (default deploy/profiles/ocr-rec.profile.yaml)
#   BENCH_MODEL         its model (default .deps/models/<model_file>)
#   BENCH_RATES         requests per second, one table block each (default "10 20")
#   BENCH_SLO_MS        latency SLO (default 600)
#   BENCH_LATENCY       which profiled latency plans use (tetris-autoscaler
#                       --latency): default "p95"; "p95 mean" runs both
#   BENCH_MODES         DTS plan modes (tetris-autoscaler --mode): default
#                       "paper refined" runs both (paper: capacity b*p/l;
#                       refined: the profile's measured saturation throughput)
#   BENCH_DURATION      measured seconds per run (default 20; quick 8)
#   BENCH_QUICK=1       shorter runs
# Exit status: 0 every run finished, 1 a run failed, 2 setup error.
set -uo pipefail
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the tetris programs}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PROFILE="${BENCH_PROFILE:-$ROOT/deploy/profiles/ocr-rec.profile.yaml}"
if [ "${BENCH_QUICK:-0}" = 1 ]; then DURATION="${BENCH_DURATION:-8}"; else DURATION="${BENCH_DURATION:-20}"; fi
RATES="${BENCH_RATES:-10 20}"
SLO_MS="${BENCH_SLO_MS:-600}"
LATENCIES="${BENCH_LATENCY:-p95}"
MODES="${BENCH_MODES:-paper refined}"
WARMUP=2
model_file="$(sed -n 's/^model_file: "\(.*\)"$/\1/p' "$PROFILE")"
MODEL="${BENCH_MODEL:-$ROOT/.deps/models/$model_file}"
WORK="$(mktemp -d /dev/shm/tetris-bench-function.XXXXXX)" || exit 2
STORE="$WORK/store"
PIDS=()
DAEMON=
CGROUPS=()

die() { echo "bench/function: $*" >&2; exit 2; }
progress() { if [ -t 2 ]; then printf '\r\033[K[bench/function] %s' "$*" >&2; fi; }

stop_instances() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    PIDS=()
    for cg in "${CGROUPS[@]}"; do rmdir "$cg" 2>/dev/null; done
    CGROUPS=()
}
cleanup() {
    stop_instances
    [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null
    chmod -R u+w "$WORK" 2>/dev/null
    rm -rf "$WORK"
    if [ -t 2 ]; then printf '\r\033[K' >&2; fi
}
trap cleanup EXIT

[ -f "$PROFILE" ] || die "no profile $PROFILE"
[ -f "$MODEL" ] || die "no model $MODEL (run scripts/deps.sh)"
for p in tetris-function tetris-profiler tetris-autoscaler tetris-reclaimer; do
    [ -x "$BIN/$p" ] || die "$BIN/$p not built"
done

# The cpu cgroup instances are limited in: a child of our own, as the
# profiler does; without a writable one instances run unlimited (said below).
CPU_ROOT=""
own="$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}cpu\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup | head -1)"
for mnt in /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do
    if [ -n "$own" ] && [ -w "$mnt${own%/}/" ] && [ -f "$mnt${own%/}/cpu.cfs_quota_us" ]; then
        CPU_ROOT="$mnt${own%/}"
        break
    fi
done

# start_instance C B P SHARING: one function, its URL appended to $WORK/urls.
start_instance() {
    local c=$1 b=$2 p=$3 sharing=$4 i=${#PIDS[@]} cg=""
    local threads
    threads=$(awk -v c="$c" -v p="$p" 'BEGIN { t = int(c / p); print (t < 1 ? 1 : t) }')
    if [ -n "$CPU_ROOT" ]; then
        cg="$CPU_ROOT/tetris-bench-function-$$-$i"
        mkdir -p "$cg" && echo 100000 >"$cg/cpu.cfs_period_us" &&
            awk -v c="$c" 'BEGIN { printf "%d\n", c * 100000 }' >"$cg/cpu.cfs_quota_us" ||
            die "cannot set up cgroup $cg"
        CGROUPS+=("$cg")
    fi
    rm -f "$WORK/ready.$i" # an earlier run's instance $i must not be mistaken for this one
    local store_args=(--private)
    [ "$sharing" = yes ] && store_args=(--store "$STORE")
    (
        [ -n "$cg" ] && echo $BASHPID >"$cg/cgroup.procs"
        exec env TETRIS_MODEL="$MODEL" TETRIS_BATCH="$b" TETRIS_CONCURRENCY="$p" \
            TETRIS_THREADS="$threads" "$BIN/tetris-function" --listen 127.0.0.1:0 "${store_args[@]}"
    ) >"$WORK/ready.$i" 2>>"$WORK/functions.log" &
    PIDS+=($!)
    local n=0
    while [ ! -s "$WORK/ready.$i" ]; do
        kill -0 "${PIDS[$i]}" 2>/dev/null || die "instance $i exited; see $WORK/functions.log"
        n=$((n + 1)); [ $n -lt 600 ] || die "instance $i not ready"
        sleep 0.1
    done
    jq -e '.fell_back == false' "$WORK/ready.$i" >/dev/null || die "instance $i fell back to private"
}

# private_kib PID: its own memory (Private_Clean + Private_Dirty) outside the store.
private_kib() {
    awk -v store="$STORE/" '
        /^[0-9a-f]+-[0-9a-f]+ / { in_store = (index($6, store) == 1); next }
        !in_store && ($1 == "Private_Clean:" || $1 == "Private_Dirty:") { kib += $2 }
        END { print kib + 0 }' "/proc/$1/smaps"
}

policy_name() {
    case "$1" in
    all) echo "DTS" ;;
    batching) echo "batching only (INFless-like)" ;;
    concurrency) echo "concurrency only (Photons-like)" ;;
    esac
}

# run_policy RATE LATENCY MODE SHARING SPACE: plan, start, load, measure; prints a table row.
run_policy() {
    local rate=$1 latency=$2 mode=$3 sharing=$4 space=$5
    local plan_args=(--profile "$PROFILE" --rps "$rate" --slo-ms "$SLO_MS" --space "$space"
                     --latency "$latency" --mode "$mode")
    [ "$sharing" = yes ] && plan_args+=(--sharing)
    local plan
    if ! plan="$("$BIN/tetris-autoscaler" plan "${plan_args[@]}" 2>"$WORK/plan.err")"; then
        printf '| %s | %s | %s | %s | %s | no config meets the SLO | | | | | |\n' "$rate" "$latency" \
            "$mode" "$sharing" "$(policy_name "$space")"
        return 0
    fi
    : >"$WORK/urls"
    local targets=() configs="" c b p count cap
    while read -r c b p count cap; do
        configs="$configs ${count}x<$c,$b,$p>"
        for _ in $(seq "$count"); do
            progress "$sharing $space: instance <$c,$b,$p>"
            start_instance "$c" "$b" "$p" "$sharing"
            targets+=("http://127.0.0.1:$(jq -r .port "$WORK/ready.$((${#PIDS[@]} - 1))")=$cap")
        done
    done < <(printf '%s\n' "$plan" | jq -r '.configs[] | "\(.c) \(.b) \(.p) \(.count) \(.capacity_rps / .count)"')
    progress "$sharing $space: ${#PIDS[@]} instances, $rate req/s for ${DURATION}s"
    local result
    result="$("$BIN/tetris-profiler" load "${targets[@]}" --rate "$rate" --duration "$DURATION" \
        --warmup "$WARMUP" --slo-ms "$SLO_MS" 2>>"$WORK/load.log")" || { stop_instances; return 1; }
    local kib=0 pid
    for pid in "${PIDS[@]}"; do kib=$((kib + $(private_kib "$pid"))); done
    local store_kib=0
    [ "$sharing" = yes ] && store_kib=$(du -sk "$STORE" | awk '{ print $1 }')
    stop_instances
    printf '| %s | %s | %s | %s | %s |%s | %d | %.0f | %.1f | %.1f | %.1f%% |\n' "$rate" "$latency" \
        "$mode" "$sharing" "$(policy_name "$space")" \
        "$configs" "$(printf '%s' "$plan" | jq .instances)" "$(printf '%s' "$plan" | jq .memory_mib)" \
        "$(awk -v k=$((kib + store_kib)) 'BEGIN { print k / 1024 }')" \
        "$(printf '%s' "$result" | jq .latency_ms.p95)" "$(printf '%s' "$result" | jq '.slo_violation_ratio * 100')"
}

mkdir -p "$STORE"
"$BIN/tetris-reclaimer" --store "$STORE" --listen "" --interval 3600 2>"$WORK/daemon.log" &
DAEMON=$!
n=0
while [ ! -S "$STORE/public/ingest.sock" ]; do
    kill -0 "$DAEMON" 2>/dev/null || die "node daemon died: $(cat "$WORK/daemon.log")"
    n=$((n + 1)); [ $n -lt 300 ] || die "node daemon socket did not appear"
    sleep 0.1
done

kind=illustrative
grep -q '^measured: true$' "$PROFILE" && kind=measured
echo "Model $(basename "$MODEL"), profile $(basename "$PROFILE") ($kind);"
echo "open loop at a fixed rate for ${DURATION} s after ${WARMUP} s warm-up, SLO ${SLO_MS} ms"
echo "(a request over the SLO or failed is a violation; p95 is end to end, client side)."
if [ -n "$CPU_ROOT" ]; then
    echo "Each instance is limited to its c CPUs by a cgroup CPU quota; $(nproc) CPUs in all."
else
    echo "No writable cpu cgroup: instances run without their CPU limit; $(nproc) CPUs in all."
fi
echo "Memory: every instance's private memory (smaps, store mappings excluded) plus,"
echo "with sharing, the store's tensor bytes once; plan = what tetris-autoscaler expected."
echo
echo "| req/s | plan on l = | DTS mode | sharing | configs chosen by | configs <c,b,p> | instances | plan MiB | measured MiB | p95 ms | SLO violations |"
echo "|---:|---|---|---|---|---|---:|---:|---:|---:|---:|"
failed=0
for rate in $RATES; do
    for latency in $LATENCIES; do
        for mode in $MODES; do
            for sharing in no yes; do
                for space in all batching concurrency; do
                    run_policy "$rate" "$latency" "$mode" "$sharing" "$space" ||
                        { echo "bench/function: $rate $latency $mode $sharing $space failed" >&2; failed=1; }
                done
            done
        done
    done
done
exit $failed
