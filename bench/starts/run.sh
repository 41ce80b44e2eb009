#!/bin/sh
# run.sh (bench/starts) - the start of a small real model, private against a
# warm tetris start, and where a warm start's time goes.
#
# For each model (default: the small real models the build installs), the
# node daemon serves a store on a tmpfs of its own (2 MiB pages, as the
# chart mounts it; the directory as it is where this user may not mount),
# the model is registered (tetris-agent index) and ingested once (the cold
# start, not counted), then REPS private and REPS warm starts of
# tetris-onnx-run run interleaved, one at a time. A start is what
# tetris-onnx-run reports as load_ms + session_ms: the agent's load (warm:
# connect, register, map) and ONNX Runtime's session; the private start is
# ONNX Runtime opening the file itself. The steps are the medians of the
# agent's event=start-steps line (agent.h, struct agent_steps).
# With BENCH_BIN_BEFORE (the programs of another build, e.g. the commit
# before a change) a warm start of that build's tetris-onnx-run joins each
# round, on the same store, so a change is measured beside its limit in
# one interleaved run; its median peak RSS too (/usr/bin/time).
# Usage: bench/starts/run.sh [MODEL...]  (TETRIS_BIN: programs, default bin/;
# BENCH_REPS: starts per mode, default 9; BENCH_BIN_BEFORE: see above)
set -eu
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${TETRIS_BIN:-$ROOT/bin}"
BEFORE="${BENCH_BIN_BEFORE:-}"
REPS="${BENCH_REPS:-9}"
case "$REPS" in '' | *[!0-9]*) echo "bench/starts: BENCH_REPS must be a number" >&2; exit 2 ;; esac
if [ $# -eq 0 ]; then
    for m in ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx \
        ch_ppocr_mobile_v2.0_cls_infer.onnx silero_vad_v5.onnx; do
        set -- "$@" "$ROOT/.deps/models/$m"
    done
fi
parent=/dev/shm; [ -w "$parent" ] || parent="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$parent/tetris-bench-starts.XXXXXX")"
DAEMON_PID=""
cleanup() {
    [ -z "$DAEMON_PID" ] || { kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null || true; }
    for m in $(findmnt -rn -o TARGET 2>/dev/null | grep "^$WORK/"); do umount -l "$m" || true; done
    chmod -R u+w "$WORK" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. "$ROOT/scripts/lib/serving.sh"
daemon_start "$WORK/store" "$WORK/daemon.log" || { echo "bench/starts: $DAEMON_ERROR" >&2; exit 1; }
pages=$(sed -n 's/.*event=store-tmpfs state=\([a-z-]*\) .*/\1/p' "$WORK/daemon.log")

# median: of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# start OUT ARGS...: one tetris-onnx-run (of $RUN_BIN, default $BIN); its
# JSON to OUT.json, its log to OUT.log, its peak RSS (kB) to OUT.rss
TIME=""; [ ! -x /usr/bin/time ] || TIME="/usr/bin/time -f %M -o"
start() {
    out=$1; shift
    echo 0 >"$out.rss" # without GNU time: no peak RSS
    $TIME${TIME:+ $out.rss} "${RUN_BIN:-$BIN}/tetris-onnx-run" "$@" >"$out.json" 2>"$out.log" ||
        { echo "bench/starts: tetris-onnx-run $* failed:" >&2; cat "$out.log" >&2; exit 1; }
    jq -r '.load_ms + .session_ms' "$out.json"
}
STEPS="read store connect register watch map private"

before_head="" before_rule=""
[ -z "$BEFORE" ] || before_head=" before: warm start ms | before: warm session ms | before: warm peak RSS MB | warm peak RSS MB |" before_rule="---:|---:|---:|---:|"
echo "| model | tensors | private start ms | warm start ms | warm / private | warm: load ms | warm: session ms | warm steps ms: $(echo "$STEPS" | sed 's/ / \/ /g') |$before_head"
echo "|---|---:|---:|---:|---:|---:|---:|---|$before_rule"
for model in "$@"; do
    name=$(basename "$model")
    "$BIN/tetris-agent" index "$model" -o "$WORK/$name.manifest.json" 2>/dev/null
    set -- --store "$WORK/store" --manifest "$WORK/$name.manifest.json"
    start "$WORK/$name.cold" "$model" "$@" >/dev/null
    : >"$WORK/$name.private"; : >"$WORK/$name.warm"; : >"$WORK/$name.before"
    r=1
    while [ "$r" -le "$REPS" ]; do
        start "$WORK/$name.p$r" "$model" --private >>"$WORK/$name.private"
        start "$WORK/$name.w$r" "$model" "$@" >>"$WORK/$name.warm"
        grep -q 'event=load .* store=hit' "$WORK/$name.w$r.log" ||
            { echo "bench/starts: $name start $r was not a warm hit:" >&2; cat "$WORK/$name.w$r.log" >&2; exit 1; }
        [ -z "$BEFORE" ] || RUN_BIN=$BEFORE start "$WORK/$name.b$r" "$model" "$@" >>"$WORK/$name.before"
        r=$((r + 1))
    done
    p=$(median <"$WORK/$name.private")
    w=$(median <"$WORK/$name.warm")
    load=$(cat "$WORK/$name".w*.json | jq -r .load_ms | median)
    session=$(cat "$WORK/$name".w*.json | jq -r .session_ms | median)
    tensors=$(sed -n "s/.*event=load .* tensors=\([0-9]*\) .*/\1/p" "$WORK/$name.w1.log")
    steps=""
    for s in $STEPS; do
        v=$(sed -n "s/.*event=start-steps .* ${s}_ms=\([0-9.]*\).*/\1/p" "$WORK/$name".w*.log | median)
        steps="$steps${steps:+ / }$v"
    done
    before=""
    if [ -n "$BEFORE" ]; then
        mb() { cat "$@" | awk '{ printf "%.1f\n", $1 / 1024 }' | median; }
        before=" $(median <"$WORK/$name.before") | $(cat "$WORK/$name".b*.json | jq -r .session_ms | median) | $(mb "$WORK/$name".b*.rss) | $(mb "$WORK/$name".w*.rss) |"
    fi
    echo "| $name | $tensors | $p | $w | $(awk -v a="$w" -v b="$p" 'BEGIN { printf "%.2f", a / b }') | $load | $session | $steps |$before"
done
echo
echo "Store tmpfs: ${pages:-unknown}; $REPS starts per mode, interleaved; medians; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)."
