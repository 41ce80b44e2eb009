#!/bin/sh
# bench/derived/run.sh - derived forms against stock ONNX Runtime and the
# current tetris default, interleaved in one run: per model and round,
# one process each of
#   stock     ONNX Runtime loads the file, optimisation `all`, pre-packing
#             on (its defaults): private weights and packs
#   tetris    store mappings, optimisation off, no pre-packing (the
#             current default, --derived off)
#   derived   store mappings of the derived form: the graph optimised at
#             `all` once per node, pre-packed weights mapped from the store
# each printing its session time and the mean of BENCH_RUNS inferences on
# the same seeded input (tetris-onnx-run). Medians over BENCH_ROUNDS
# rounds. The derived form is made once before the rounds (a node daemon
# on a private store). Environment: TETRIS_BIN, TETRIS_MODELS,
# BENCH_MODELS, BENCH_ROUNDS (5), BENCH_RUNS (20), BENCH_THREADS (1).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${TETRIS_BIN:-$ROOT/bin}
MODELS=${TETRIS_MODELS:-$ROOT/.deps/models}
rounds=${BENCH_ROUNDS:-5}
runs=${BENCH_RUNS:-20}
threads=${BENCH_THREADS:-1}
models=${BENCH_MODELS:-"ch_PP-OCRv4_rec_infer.onnx ch_PP-OCRv4_det_infer.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx"}
work=$(mktemp -d /dev/shm/tetris-bench-derived.XXXXXX)
# tetris-derive reads the store's public directory as an unprivileged
# user, as on a node where the store's parents are 0755.
chmod 0711 "$work"
daemon=""
cleanup() {
    [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
mkdir -p "$work/store"
"$BIN/tetris-reclaimer" --store "$work/store" --listen "" --interval 3600 >"$work/daemon.log" 2>&1 &
daemon=$!
i=0
until grep -q event=serving "$work/daemon.log"; do
    i=$((i + 1)); [ $i -lt 300 ] || { echo "daemon did not start" >&2; exit 1; }; sleep 0.1
done

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for m in $models; do
    "$BIN/tetris-onnx-run" "$MODELS/$m" --store "$work/store" --derived make --threads "$threads" \
        >/dev/null 2>"$work/make.log" || { echo "$m: $(tail -n 1 "$work/make.log")" >&2; exit 1; }
    # A refused derivation leaves the run on the plain weights: measuring
    # that as "derived" would be wrong.
    grep -q 'event=derive-requested .*result=' "$work/make.log" ||
        { echo "$m: no derived form: $(grep derive "$work/make.log" | tail -n 1)" >&2; exit 1; }
done
echo "Derived forms against stock ONNX Runtime and the tetris default: $rounds rounds, interleaved;"
echo "$threads thread(s); run = mean of $runs inferences; medians; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| model | mode | session ms | run ms | same output as stock |"
echo "|---|---|---:|---:|---|"
for m in $models; do
    : >"$work/r"
    r=0
    while [ $r -lt "$rounds" ]; do
        r=$((r + 1))
        for mode in stock tetris derived; do
            case $mode in
            stock) args="--private --graph-opt all --prepack" ;;
            tetris) args="--store $work/store --derived off" ;;
            derived) args="--store $work/store" ;;
            esac
            # shellcheck disable=SC2086
            "$BIN/tetris-onnx-run" "$MODELS/$m" $args --runs "$runs" --threads "$threads" 2>/dev/null |
                jq -r --arg mode $mode '[$mode, .session_ms, .run_ms, .sha256, .derived // false] | @tsv' >>"$work/r"
        done
    done
    stock_sha=$(awk -F'\t' '$1 == "stock" { print $4; exit }' "$work/r")
    for mode in stock tetris derived; do
        s=$(awk -F'\t' -v m=$mode '$1 == m { print $2 }' "$work/r" | median)
        t=$(awk -F'\t' -v m=$mode '$1 == m { print $3 }' "$work/r" | median)
        same=$(awk -F'\t' -v m=$mode -v w="$stock_sha" '$1 == m && $4 != w { d = 1 } END { print d ? "no" : "yes" }' "$work/r")
        if [ $mode = derived ] && awk -F'\t' '$1 == "derived" && $5 != "true" { f = 1 } END { exit !f }' "$work/r"; then
            echo "$m: an instance did not open the derived form" >&2
            exit 1
        fi
        printf '| %s | %s | %.0f | %.1f | %s |\n' "$m" "$mode" "$s" "$t" "$same"
    done
done
