#!/bin/sh
# bench/derived/run.sh - derived forms against stock ONNX Runtime and the
# current tetris default, interleaved in one run: per model, thread count,
# batch and round, one process each of
#   stock     ONNX Runtime loads the file, optimisation `all`, pre-packing
#             on, telemetry on (its defaults): private weights and packs
#   tetris    store mappings, optimisation off, no pre-packing (the
#             current default, --derived off)
#   derived   store mappings of the derived form: the graph optimised at
#             `all` once per node, pre-packed weights mapped from the store
# each printing its session time, its first inference alone (page faults
# of what the session maps included) and the mean of the BENCH_RUNS - 1
# after it, of one batch on the same seeded inputs (tetris-onnx-run
# --batch; BENCH_RUNS at least 2). Medians
# over BENCH_ROUNDS rounds; beside them the issue's limit, derived run ms
# at most 1.02 x stock's, and whether the outputs are stock's byte for
# byte. Then, per model, the memory an extra instance costs: one instance
# per mode held after its inferences, its PSS without the store's files
# (those are the node's once: the store's tensors, the form's two) and
# what it maps of the store. The derived form is made once before the
# rounds (a node daemon on a private store). Environment: TETRIS_BIN,
# TETRIS_MODELS, BENCH_MODELS, BENCH_ROUNDS (5; 0: memory only), BENCH_RUNS (20),
# BENCH_THREADS ("1"; e.g. "1 2"), BENCH_BATCHES ("1"; e.g. "1 8"),
# BENCH_DIM (tetris-onnx-run's --dim: BERT's sequence; default its own),
# BENCH_STORE_TMPFS (the daemon's --store-tmpfs: huge, a tmpfs of 2 MiB
# pages as the chart mounts it, by default; plain: 4 KiB pages; none:
# /dev/shm as it is; the header says which the store got).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${TETRIS_BIN:-$ROOT/bin}
MODELS=${TETRIS_MODELS:-$ROOT/.deps/models}
rounds=${BENCH_ROUNDS:-5}
runs=${BENCH_RUNS:-20}
[ "$runs" -ge 2 ] || { echo "bench/derived: BENCH_RUNS must be at least 2" >&2; exit 2; }
threads_list=${BENCH_THREADS:-1}
batches=${BENCH_BATCHES:-1}
dim=${BENCH_DIM:+--dim $BENCH_DIM}
models=${BENCH_MODELS:-"ch_PP-OCRv4_rec_infer.onnx ch_PP-OCRv4_det_infer.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx"}
work=$(mktemp -d /dev/shm/tetris-bench-derived.XXXXXX)
# tetris-derive reads the store's public directory as an unprivileged
# user, as on a node where the store's parents are 0755.
chmod 0711 "$work"
daemon=""
holders=""
cleanup() {
    for p in $holders; do kill "$p" 2>/dev/null || true; done
    [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
    # The daemon's tmpfs outlives it by design (reclaimer/store_tmpfs.h).
    ! mountpoint -q "$work/store" 2>/dev/null || umount "$work/store" || umount -l "$work/store"
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
mkdir -p "$work/store"
"$BIN/tetris-reclaimer" --store "$work/store" --listen "" --interval 3600 \
    --store-tmpfs "${BENCH_STORE_TMPFS:-huge}" >"$work/daemon.log" 2>&1 &
daemon=$!
i=0
until grep -q event=serving "$work/daemon.log"; do
    i=$((i + 1)); [ $i -lt 300 ] || { echo "daemon did not start" >&2; exit 1; }; sleep 0.1
done

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# mode_env MODE: the mode's environment: stock keeps ONNX Runtime's
# telemetry, which tetris's programs turn off (agent/ort_adapter.h)
mode_env() { [ "$1" != stock ] || echo "ORT_DISABLE_TELEMETRY=0"; }
# mode_args MODE: tetris-onnx-run's arguments for the mode
mode_args() {
    case $1 in
    stock) echo "--private --graph-opt all --prepack" ;;
    tetris) echo "--store $work/store --derived off" ;;
    derived) echo "--store $work/store --derived use" ;;
    esac
}

for m in $models; do
    # shellcheck disable=SC2086
    "$BIN/tetris-onnx-run" "$MODELS/$m" --store "$work/store" --derived make $dim \
        >/dev/null 2>"$work/make.log" || { echo "$m: $(tail -n 1 "$work/make.log")" >&2; exit 1; }
    # A refused derivation leaves the run on the plain weights: measuring
    # that as "derived" would be wrong.
    grep -q 'event=derive-requested .*result=made' "$work/make.log" ||
        { echo "$m: no derived form: $(grep derive "$work/make.log" | tail -n 1)" >&2; exit 1; }
done
case $(sed -n 's/.*event=store-tmpfs state=\([a-z-]*\) .*huge=\([a-z_]*\).*/\1 \2/p' "$work/daemon.log") in
*within_size) pages="a tmpfs of 2 MiB pages (a derived form's files on 4 KiB pages)" ;;
"mounted never" | "reused never") pages="a tmpfs of 4 KiB pages" ;;
*) pages="$(df --output=fstype "$work/store" | tail -n 1) as it is (4 KiB pages)" ;;
esac
echo "Derived forms against stock ONNX Runtime and the tetris default: $rounds rounds, interleaved;"
echo "run = mean of the $((runs - 1)) runs of one batch after the first; medians; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)${BENCH_DIM:+; --dim $BENCH_DIM};"
echo "store on $pages."
[ "$rounds" -eq 0 ] || echo
# BENCH_ROUNDS=0: the memory table only
[ "$rounds" -gt 0 ] || models_timed=""
[ "$rounds" -eq 0 ] || {
    echo "| model | threads | batch | mode | session ms | first run ms | run ms | run / stock | limit | same output as stock |"
    echo "|---|---:|---:|---|---:|---:|---:|---:|---:|---|"
}
for m in ${models_timed-$models}; do
    for threads in $threads_list; do
        for batch in $batches; do
            : >"$work/r"
            r=0
            while [ $r -lt "$rounds" ]; do
                r=$((r + 1))
                for mode in stock tetris derived; do
                    # shellcheck disable=SC2046,SC2086
                    env $(mode_env $mode) "$BIN/tetris-onnx-run" "$MODELS/$m" $(mode_args $mode) --runs "$runs" \
                        --threads "$threads" --batch "$batch" $dim 2>"$work/err" |
                        jq -r --arg mode $mode '[$mode, .session_ms, (.run_ms * .runs - .first_run_ms) / (.runs - 1), .sha256, .derived // false, .first_run_ms] | @tsv' \
                            >>"$work/r" || { echo "$m $mode: $(tail -n 1 "$work/err")" >&2; exit 1; }
                done
            done
            stock_sha=$(awk -F'\t' '$1 == "stock" { print $4; exit }' "$work/r")
            stock_run=$(awk -F'\t' '$1 == "stock" { print $3 }' "$work/r" | median)
            if awk -F'\t' '$1 == "derived" && $5 != "true" { f = 1 } END { exit !f }' "$work/r"; then
                echo "$m: an instance did not open the derived form" >&2
                exit 1
            fi
            for mode in stock tetris derived; do
                s=$(awk -F'\t' -v m=$mode '$1 == m { print $2 }' "$work/r" | median)
                f=$(awk -F'\t' -v m=$mode '$1 == m { print $6 }' "$work/r" | median)
                t=$(awk -F'\t' -v m=$mode '$1 == m { print $3 }' "$work/r" | median)
                same=$(awk -F'\t' -v m=$mode -v w="$stock_sha" '$1 == m && $4 != w { d = 1 } END { print d ? "no" : "yes" }' "$work/r")
                ratio=$(awk -v a="$t" -v b="$stock_run" 'BEGIN { printf "%.3f", a / b }')
                limit=""; [ $mode != derived ] || limit="<= 1.02"
                printf '| %s | %s | %s | %s | %.0f | %.1f | %.1f | %s | %s | %s |\n' "$m" "$threads" \
                    "$batch" "$mode" "$s" "$f" "$t" "$ratio" "$limit" "$same"
            done
        done
    done
done

# ---- memory of an extra instance ----
# hold MODE MODEL: an instance of MODE held after one inference; its pid
hold() {
    rm -f "$work/in.$1" "$work/hold.$1"
    mkfifo "$work/in.$1"
    # shellcheck disable=SC2046,SC2086
    env $(mode_env "$1") "$BIN/tetris-onnx-run" "$2" $(mode_args "$1") --threads 1 $dim --hold <"$work/in.$1" \
        >"$work/hold.$1" 2>"$work/hold.$1.err" &
    held=$!
    holders="$holders $held"
    exec 3>"$work/in.$1"
    i=0
    until [ -s "$work/hold.$1" ]; do
        kill -0 "$held" 2>/dev/null || { echo "$1: $(tail -n 1 "$work/hold.$1.err")" >&2; exit 1; }
        i=$((i + 1)); [ $i -lt 6000 ] || { echo "$1: no result" >&2; exit 1; }; sleep 0.1
    done
}
# release: the held instance sees its stdin close and exits
release() {
    exec 3>&-
    wait "$held" 2>/dev/null || true
}
# kb PID [PREFIX]: PSS of the process, or of its mappings of files under PREFIX
kb() {
    if [ $# -eq 1 ]; then awk '/^Pss:/ { print $2 }' "/proc/$1/smaps_rollup"; else
        awk -v pre="$2" '/^[0-9a-f]+-[0-9a-f]+ / { on = index($6, pre) == 1 }
            /^Pss:/ && on { k += $2 } END { print k + 0 }' "/proc/$1/smaps"
    fi
}
rkb() {
    awk -v pre="$2" '/^[0-9a-f]+-[0-9a-f]+ / { on = index($6, pre) == 1 }
        /^Rss:/ && on { k += $2 } END { print k + 0 }' "/proc/$1/smaps"
}
echo
echo "Memory of an extra instance (1 thread, batch 1, held after one inference; MB): its own"
echo "PSS without the store's files, and the RSS it maps of the store (the node's once)."
echo
echo "| model | mode | private MB (per extra instance) | store mapped MB |"
echo "|---|---|---:|---:|"
pub=$(realpath "$work/store/public")
for m in $models; do
    for mode in stock tetris derived; do
        hold $mode "$MODELS/$m"
        all=$(kb "$held")
        store=$(kb "$held" "$pub/")
        mapped=$(rkb "$held" "$pub/")
        release
        awk -v m="$m" -v mode=$mode -v own=$((all - store)) -v mapped="$mapped" \
            'BEGIN { printf "| %s | %s | %.1f | %.1f |\n", m, mode, own / 1024, mapped / 1024 }'
    done
done
