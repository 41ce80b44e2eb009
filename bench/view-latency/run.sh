#!/bin/sh
# run.sh (bench/view-latency) - per-request latency of a stock runtime on a
# model view's derived form against the same runtime's own defaults: the
# Node.js function's path (stock onnxruntime-node; function/node/), the
# latency target of the speed work for functions in other languages than C.
#
# Modes, one process each (bench/view-latency/latency.js), interleaved per
# model, thread count and round:
#   stock     onnxruntime-node opens the model file at its defaults
#             (optimisation `all`, pre-packing on): private weights and
#             packs
#   form      under `tetris-agent exec --derived use --runtime` (as the
#             function is deployed): the view's derived form made by this
#             onnxruntime-node's own library, optimisation off, its
#             pre-packed weights mapped from the store, which the daemon
#             wrote on 4 KiB pages and exec keeps there
#   form 2M   the same form after khugepaged has moved it onto 2 MiB pages,
#             read by a process not under exec (a second store whose form's
#             data is collapsed at once with MADV_COLLAPSE, where khugepaged
#             takes minutes): what a stock runtime reading a view outside
#             exec comes to. Only where the store is a tmpfs of 2 MiB pages
#             (the daemon mounts one as root, as the chart does) and the
#             kernel collapses on request (Linux 6.1).
# Each prints its session time, its first inference alone and the mean of
# the BENCH_RUNS - 1 after it, on the same seeded Open Inference Protocol
# request (tetris-onnx-run --oip-request). Medians over the rounds; each
# mode's ratio to stock twice: of the medians, and round by round (the
# machine's drift between rounds cancels out of that one). Beside them:
# whether the outputs are stock's byte for byte, and how the form's data
# was mapped (kB through 2 MiB entries; mappings khugepaged could collapse
# it through). The target: form at most 1.02x stock.
#
# Usage: bench/view-latency/run.sh [MODEL...]  Default: PP-OCRv4 rec and,
# when the paper-model cache has it (or can make it:
# scripts/models/paper-models.sh), BERT-base at sequence 128.
# Environment: TETRIS_BIN (programs, default bin/), BENCH_QUICK=1 (3 rounds
# of 6 runs), BENCH_ROUNDS (default 5), BENCH_RUNS (default 12, at least
# 2), BENCH_THREADS (default "1 2").
# Exit status: 0 done, 1 a measurement failed, 2 setup error.
set -eu
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${TETRIS_BIN:-$ROOT/bin}"
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    ROUNDS=${BENCH_ROUNDS:-3} RUNS=${BENCH_RUNS:-6}
else
    ROUNDS=${BENCH_ROUNDS:-5} RUNS=${BENCH_RUNS:-12}
fi
THREADS=${BENCH_THREADS:-"1 2"}
say() { echo "bench/view-latency: $*" >&2; }
case "$ROUNDS" in '' | *[!0-9]* | 0) say "BENCH_ROUNDS must be a positive number"; exit 2 ;; esac
case "$RUNS" in '' | *[!0-9]* | 0 | 1) say "BENCH_RUNS must be at least 2"; exit 2 ;; esac
. "$ROOT/scripts/lib/serving.sh"
export NODE_PATH="${NODE_PATH:-$ROOT/.deps/node_modules}"
LATENCY="$ROOT/bench/view-latency/latency.js"
command -v node >/dev/null || { say "node is not installed (make deps)"; exit 2; }
LIB=$(find "$NODE_PATH/onnxruntime-node/bin" -path '*/linux/x64/libonnxruntime.so.1' 2>/dev/null | head -n 1)
[ -f "$LIB" ] || { say "no onnxruntime-node in $NODE_PATH (make deps)"; exit 2; }
RUNTIME="onnxruntime $(node -e "process.stdout.write(require('onnxruntime-node').env.versions.node)")"
if [ $# -eq 0 ]; then
    set -- "$ROOT/.deps/models/ch_PP-OCRv4_rec_infer.onnx"
    if bert=$("$ROOT/scripts/models/paper-models.sh" bert-base 2>/dev/null | grep '/bert-base.onnx$'); then
        set -- "$@" "$bert"
    else
        say "no BERT-base (scripts/models/paper-models.sh bert-base failed): PP-OCRv4 rec only"
    fi
fi

parent=/dev/shm; [ -w "$parent" ] || parent="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$parent/tetris-bench-view-latency.XXXXXX")"
# The derivation child (uid 65534) reads the stores' public directories by
# their names, as on a node, where the store's parents are 0755.
chmod 0711 "$WORK"
export TMPDIR="$WORK" # the views exec writes
DAEMONS=""
cleanup() {
    for p in $DAEMONS; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
    # the daemons' tmpfs outlive them by design (reclaimer/store_tmpfs.h)
    for m in $(findmnt -rn -o TARGET 2>/dev/null | grep "^$WORK/" | sort -r); do umount -l "$m" || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# The daemons derive with onnxruntime-node's own library, from a directory
# only root may write (they refuse any other).
mkdir -m 0755 "$WORK/runtimes"
cp "$LIB" "$WORK/runtimes/"
for s in form collapsed; do
    daemon_start "$WORK/$s" "$WORK/$s.log" --derive-runtimes "$WORK/runtimes/libonnxruntime.so.1" ||
        { say "$DAEMON_ERROR"; exit 1; }
    DAEMONS="$DAEMONS $DAEMON_PID"
done
if grep -q 'event=store-tmpfs state=mounted .*huge=within_size' "$WORK/collapsed.log"; then
    HUGE=1
else
    HUGE=0
    say "the store is not a tmpfs of 2 MiB pages here: no form 2M mode ($(grep event=store-tmpfs "$WORK/collapsed.log" | head -n 1))"
fi

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# field TAG KEY: the median of KEY over TAG's rounds
field() { for f in "$WORK/$TAG.$1".*.json; do jq -r ".$2" "$f"; done | median; }
# round_ratios MODE: MODE's run ms over stock's of the same round, every
# round: "median (lowest-highest)"
round_ratios() {
    for r in $(seq "$ROUNDS"); do
        awk -v a="$(jq .run_ms "$WORK/$TAG.$1.$r.json")" -v b="$(jq .run_ms "$WORK/$TAG.stock.$r.json")" \
            'BEGIN { printf "%.3f\n", a / b }'
    done | sort -g | awk '{ v[NR] = $1 } END { printf "%.3f (%.3f-%.3f)", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }'
}
# measure OUT CMD...: one process; its JSON line to OUT.json, its log to OUT.log
measure() {
    out=$1; shift
    "$@" >"$out.json" 2>"$out.log" && jq -e .run_ms "$out.json" >/dev/null 2>&1 ||
        { say "$(basename "$out") failed:"; tail -n 5 "$out.log" >&2; exit 1; }
}

echo "Stock onnxruntime-node ($RUNTIME) on a model view's derived form against its own defaults on the"
echo "model file; $ROUNDS rounds, interleaved; run = the mean of $((RUNS - 1)) inferences after the first; medians."
echo "Target: form at most 1.02x stock per request."
echo
echo "| model | threads | mode | session ms | first run ms | run ms | run / stock | run / stock, round by round | same output as stock | form's data through 2 MiB entries kB | form's mappings THPeligible |"
echo "|---|---:|---|---:|---:|---:|---:|---|---|---:|---:|"
for model in "$@"; do
    [ -f "$model" ] || { say "no model $model"; exit 2; }
    name=$(basename "$model")
    case "$name" in bert-*) dim="--dim 128" ;; *) dim="" ;; esac
    # shellcheck disable=SC2086 # dim is zero or two words
    "$BIN/tetris-onnx-run" "$model" --private --seed 1 $dim --oip-request "$WORK/$name.req" \
        >/dev/null 2>"$WORK/$name.req.log" || { say "no request for $name: $(tail -n 2 "$WORK/$name.req.log")"; exit 1; }
    # Each store's form, made once (not timed).
    for s in form collapsed; do
        "$BIN/tetris-agent" view --store "$WORK/$s" --derived make --runtime "$RUNTIME" "$model" \
            "$WORK/$name.$s.view" >"$WORK/$name.$s.view.json" 2>"$WORK/$name.$s.view.log" ||
            { say "view of $name: $(tail -n 2 "$WORK/$name.$s.view.log")"; exit 1; }
        [ "$(jq -r .derived "$WORK/$name.$s.view.json")" = "$RUNTIME" ] ||
            { say "no $RUNTIME form of $name: $(grep event=derive "$WORK/$name.$s.view.log" | tail -n 1)"; exit 1; }
    done
    modes="stock form"
    if [ $HUGE = 1 ]; then
        data=$(realpath "$WORK/$name.collapsed.view/$(jq -r .derived.data.file "$WORK/$name.collapsed.view/tensors.json")")
        if "$SERVING_PY" -c 'import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ).madvise(25)  # MADV_COLLAPSE' "$data" 2>"$WORK/collapse.err"; then
            modes="$modes form2M"
        else
            say "MADV_COLLAPSE refused on $name's form ($(tail -n 1 "$WORK/collapse.err")): no form 2M mode"
        fi
    fi
    for threads in $THREADS; do
        TAG="$name.t$threads"
        for r in $(seq "$ROUNDS"); do
            measure "$WORK/$TAG.stock.$r" node "$LATENCY" "$model" "$WORK/$name.req" "$RUNS" "$threads"
            measure "$WORK/$TAG.form.$r" "$BIN/tetris-agent" exec --store "$WORK/form" --model "$model" \
                --derived use --runtime "$RUNTIME" -- node "$LATENCY" "$model" "$WORK/$name.req" "$RUNS" "$threads"
            case "$modes" in *form2M*)
                measure "$WORK/$TAG.form2M.$r" env TETRIS_MODEL_VIEW="$WORK/$name.collapsed.view" \
                    node "$LATENCY" "$model" "$WORK/$name.req" "$RUNS" "$threads" ;;
            esac
        done
        stock_run=$(field stock run_ms)
        stock_out=$(jq -r '"\(.sha256) \(.output_bytes)"' "$WORK/$TAG.stock.1.json")
        for mode in $modes; do
            same=yes
            for f in "$WORK/$TAG.$mode".*.json; do
                [ "$(jq -r '"\(.sha256) \(.output_bytes)"' "$f")" = "$stock_out" ] || same=no
            done
            run=$(field "$mode" run_ms)
            if [ "$mode" = stock ]; then
                ratio="1.000" rounds="" pmd="" eligible=""
            else
                ratio=$(awk -v a="$run" -v b="$stock_run" 'BEGIN { printf "%.3f", a / b }')
                rounds=$(round_ratios "$mode")
                pmd=$(printf '%.0f' "$(field "$mode" form_pmd_kb)")
                eligible=$(printf '%.0f' "$(field "$mode" form_eligible)")
            fi
            label=$mode; [ "$mode" = form2M ] && label="form, 2 MiB pages"
            echo "| $name | $threads | $label | $(field "$mode" session_ms) | $(field "$mode" first_ms) | $run | $ratio | $rounds | $same | $pmd | $eligible |"
        done
    done
done
echo
echo "$(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), Linux $(uname -r), transparent huge pages $(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo n/a), load $(cut -d' ' -f1-3 /proc/loadavg)."
