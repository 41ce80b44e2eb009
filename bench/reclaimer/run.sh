#!/bin/bash
# bench/reclaimer/run.sh - tetris-reclaimer at scale, Markdown tables on stdout:
#   1. one reclaim pass over N resident tensors (default 100k): the parts
#      run without locks (full and light repair, walk of tensors/) and the part ingests
#      wait for (marking live references, freeing), warm and cold, and the
#      pass that frees all N;
#   2. /metrics and /inventory latency with N resident tensors (inventory
#      first render, cached, and 304 Not Modified);
#   3. ingest of a synthetic 256 MiB model through the daemon vs direct
#      (the instance publishing into the store itself).
# Environment: TETRIS_BIN (required), BENCH_QUICK=1 (20k tensors, 3 reps),
# BENCH_RECLAIMER_TENSORS, BENCH_REPS, BENCH_STORE_ROOT (default /dev/shm).
# Exit status: 0 done, 1 a step failed, 2 setup error.
set -uo pipefail
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the tetris programs}"
RECLAIMER="$BIN/tetris-reclaimer"
PROBE="$BIN/tetris-ingest-probe"
for p in "$RECLAIMER" "$PROBE"; do [ -x "$p" ] || { echo "bench: $p missing (run make)" >&2; exit 2; }; done
if [ "${BENCH_QUICK:-0}" = 1 ]; then N=${BENCH_RECLAIMER_TENSORS:-20000}; REPS=${BENCH_REPS:-3}
else N=${BENCH_RECLAIMER_TENSORS:-100000}; REPS=${BENCH_REPS:-5}; fi
ROOT="${BENCH_STORE_ROOT:-/dev/shm}"
WORK="$(mktemp -d /tmp/tetris-bench-reclaimer.XXXXXX)" || exit 2
STORE="$ROOT/tetris-bench-reclaimer.$$"
DAEMON_PID=""
HOLD_PID=""
cleanup() {
    for p in $HOLD_PID $DAEMON_PID; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$WORK" "$STORE" "$STORE.direct"
}
trap cleanup EXIT
progress() { if [ -t 2 ]; then printf '\r\033[K[bench reclaimer] %s' "$*" >&2; fi; }
die() { [ -t 2 ] && printf '\r\033[K' >&2; echo "bench reclaimer: $*" >&2; exit 1; }

start_daemon() { # STORE ARGS...
    local store=$1; shift
    : >"$WORK/daemon.log"
    TETRIS_LOG_LEVEL=debug "$RECLAIMER" --store "$store" --listen 127.0.0.1:0 "$@" >>"$WORK/daemon.log" 2>&1 &
    DAEMON_PID=$!
    for _ in $(seq 600); do grep -q event=serving "$WORK/daemon.log" && break; sleep 0.1; done
    grep -q event=serving "$WORK/daemon.log" || die "daemon did not start"
    PORT=$(grep -o 'event=http-listening.*port=[0-9]*' "$WORK/daemon.log" | sed 's/.*port=//')
}
stop_daemon() { kill -TERM "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=""; }
metric() { curl -s "http://127.0.0.1:$PORT/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
wait_passes() { # N: N more passes
    local target=$(( $(metric tetris_reclaim_passes_total) + $1 ))
    for _ in $(seq 1200); do [ "$(metric tetris_reclaim_passes_total)" -ge $target ] && return 0; sleep 0.1; done
    die "reclaim passes stalled"
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# pass_field FIELD COUNT: the last COUNT passes' values of FIELD (ms) that ran.
pass_field() { grep event=reclaim-pass "$WORK/daemon.log" | tail -n "$2" | grep -o " $1=[-0-9.]*" | cut -d= -f2 | awk '$1 >= 0'; }

# ---- 1. reclaim pass over N tensors ----
progress "synthetic model of $N tensors"
"$PROBE" synth --out "$WORK/many.safetensors" --tensors "$N" --bytes 256 --seed 5 || die "synth"
start_daemon "$STORE" --interval 1 --keep-alive 1h --scrub-rate 0
progress "ingesting $N tensors through the daemon"
"$PROBE" load --store "$STORE" --no-map --hold "$WORK/many.safetensors" </dev/null >"$WORK/many.json" 2>"$WORK/probe.log" &
HOLD_PID=$!
for _ in $(seq 6000); do grep -q '"pid"' "$WORK/many.json" && break; sleep 0.1; done
grep -q "\"ingested\":$N" "$WORK/many.json" || die "ingest of $N tensors: $(cat "$WORK/many.json")"
ingest_many_ms=$(jq .load_ms "$WORK/many.json")

progress "passes with $N referenced tensors"
wait_passes $((REPS + 20))  # long enough for the duty-cycled walk and repair to run too
warm_locked=$(pass_field mark_ms "$((REPS))" | median); warm_free=$(pass_field free_ms "$REPS" | median)
warm_repair=$(pass_field repair_ms 60 | median | awk '{ printf "%.1f", $1 }')
warm_light=$(pass_field light_repair_ms 60 | median | awk '{ printf "%.1f", $1 }')
warm_list=$(pass_field list_ms 60 | median | awk '{ printf "%.1f", $1 }')

# HTTP latency with N resident tensors.
progress "HTTP latency"
lat() { # URL [HEADER]: median seconds of REPS GETs -> ms
    for _ in $(seq "$REPS"); do
        curl -s -o /dev/null -w '%{time_total}\n' ${2:+-H "$2"} "$1"
    done | median | awk '{ printf "%.2f", $1 * 1000 }'
}
inv_bytes=$(curl -s "http://127.0.0.1:$PORT/inventory" | wc -c)
etag=$(curl -s -D - -o /dev/null "http://127.0.0.1:$PORT/inventory" | tr -d '\r' | awk 'tolower($1) == "etag:" { print $2 }')
m_ms=$(lat "http://127.0.0.1:$PORT/metrics")
m_bytes=$(curl -s "http://127.0.0.1:$PORT/metrics" | wc -c)
inv_ms=$(lat "http://127.0.0.1:$PORT/inventory")
inv304_ms=$(lat "http://127.0.0.1:$PORT/inventory" "If-None-Match: $etag")
# First render after a change: a 1-tensor model changes the generation.
firsts=""
for i in $(seq "$REPS"); do
    "$PROBE" synth --out "$WORK/one$i.safetensors" --tensors 1 --bytes 256 --seed $((900 + i)) || die synth
    "$PROBE" load --store "$STORE" --no-map "$WORK/one$i.safetensors" >/dev/null 2>>"$WORK/probe.log" || die "load one"
    firsts="$firsts $(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT/inventory")"
done
inv_first_ms=$(echo $firsts | tr ' ' '\n' | median | awk '{ printf "%.2f", $1 * 1000 }')

progress "passes with $N cold tensors"
kill -TERM "$HOLD_PID"; wait "$HOLD_PID" 2>/dev/null; HOLD_PID=""
wait_passes $((REPS + 2))
cold_locked=$(pass_field mark_ms "$REPS" | median); cold_free=$(pass_field free_ms "$REPS" | median)
progress "the pass that frees $N tensors"
kill -TERM "$DAEMON_PID"; wait "$DAEMON_PID"
TETRIS_LOG_LEVEL=debug "$RECLAIMER" --store "$STORE" --once --keep-alive 0 --scrub-rate 0 >"$WORK/once.log" 2>&1 ||
    die "--once"
free_all_ms=$(grep -o 'free_ms=[0-9.]*' "$WORK/once.log" | tail -n 1 | cut -d= -f2)
freed=$(grep -o 'freed=[0-9]*' "$WORK/once.log" | tail -n 1 | cut -d= -f2)
DAEMON_PID=""

echo "### One reclaim pass over $N resident tensors"
echo
echo "Ingest of the $N-tensor synthetic model through the daemon: $(printf '%.0f' "$ingest_many_ms") ms."
echo "The full repair and the walk of tensors/ run without locks, each at most 10% of the"
echo "time; the light repair (dead holders, temp files) runs in the other passes;"
echo "ingests and loaders wait only for the locked part (mark live references, free cold)."
echo
echo "| scenario | tensors | full repair, unlocked (ms) | light repair, unlocked (ms) | walk, unlocked (ms) | mark, locked (ms) | free, locked (ms) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
echo "| all referenced by a live holder | $N | $warm_repair | $warm_light | $warm_list | $warm_locked | $warm_free |"
echo "| none referenced, within keep-alive | $N | - | - | - | $cold_locked | $cold_free |"
echo "| none referenced, keep-alive 0 (frees $freed) | $N | - | - | - | - | $free_all_ms |"
echo
echo "### HTTP latency with $N resident tensors (median of $REPS)"
echo
echo "| request | ms | body |"
echo "|---|---:|---:|"
echo "| GET /metrics | $m_ms | $m_bytes B |"
echo "| GET /inventory, first render after a change | $inv_first_ms | $inv_bytes B |"
echo "| GET /inventory, cached | $inv_ms | $inv_bytes B |"
echo "| GET /inventory, If-None-Match current (304) | $inv304_ms | 0 B |"

# ---- 3. ingest through the daemon vs direct ----
progress "ingest through the daemon vs direct"
rm -rf "$STORE" "$STORE.direct"
"$PROBE" synth --out "$WORK/big.safetensors" --tensors 32 --bytes $((8 * 1048576)) --seed 6 || die synth
MB=256
daemon_ms=""; direct_ms=""
for i in $(seq "$REPS"); do
    rm -rf "$STORE"
    start_daemon "$STORE" --interval 1h --keep-alive 1h --scrub-rate 0
    "$PROBE" load --store "$STORE" "$WORK/big.safetensors" >"$WORK/d.json" 2>>"$WORK/probe.log" || die "daemon load"
    grep -q '"ingested":32' "$WORK/d.json" || die "daemon ingest: $(cat "$WORK/d.json")"
    daemon_ms="$daemon_ms $(jq .load_ms "$WORK/d.json")"
    stop_daemon
    rm -rf "$STORE.direct"
    "$RECLAIMER" --store "$STORE.direct" --once >/dev/null 2>&1 || die "create store"
    "$PROBE" load --store "$STORE.direct" --direct "$WORK/big.safetensors" >"$WORK/x.json" 2>>"$WORK/probe.log" || die "direct load"
    grep -q '"fallback":false' "$WORK/x.json" || die "direct ingest: $(cat "$WORK/x.json")"
    direct_ms="$direct_ms $(jq .load_ms "$WORK/x.json")"
done
dm=$(echo $daemon_ms | tr ' ' '\n' | median); xm=$(echo $direct_ms | tr ' ' '\n' | median)
[ -t 2 ] && printf '\r\033[K' >&2
echo
echo "### Cold ingest of a synthetic 256 MiB model (32 x 8 MiB), median of $REPS"
echo
echo "Both include hashing, publishing, then mapping every tensor and reading each page."
echo
echo "| path | ms | MB/s |"
echo "|---|---:|---:|"
echo "| through the daemon (SCM_RIGHTS, daemon reads and hashes) | $(printf '%.0f' "$dm") | $(awk -v m="$dm" -v b=$MB 'BEGIN { printf "%.0f", b * 1048576 / 1e6 / (m / 1000) }') |"
echo "| direct (the instance writes the store) | $(printf '%.0f' "$xm") | $(awk -v m="$xm" -v b=$MB 'BEGIN { printf "%.0f", b * 1048576 / 1e6 / (m / 1000) }') |"
