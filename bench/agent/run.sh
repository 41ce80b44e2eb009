#!/bin/sh
# run.sh (bench/agent) - how much of a model's weights ONNX Runtime really reads
# from the store mappings instead of copying, per session setting.
#
# For each model and setting, one instance holds the model after one
# inference, first with a private load, then mapped from a warm store. We
# read its anonymous (private) memory from /proc/PID/status (RssAnon): the
# drop from private to store mode is what sharing removed from every
# instance; "removed %" compares it with the model's weight bytes. Near or
# above 100% means ORT keeps no copy of the weights (above: a private
# session also keeps protobuf copies); well below means ORT derived private
# weights (fusions, pre-packing). "all@reg": the model optimised once with
# --graph-opt all and saved (--save-optimized), then run without further
# optimisation, so the fused weights are shared too. Also checks both
# outputs are identical.
# Usage: bench/agent/run.sh [MODEL...]   (TETRIS_BIN: programs)
set -eu
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${TETRIS_BIN:-$ROOT/bin}"
if [ $# -eq 0 ]; then
    set -- "$ROOT/.deps/models/ch_PP-OCRv4_rec_infer.onnx" "$ROOT/.deps/models/ch_PP-OCRv4_det_infer.onnx" \
           "$ROOT/.deps/models/silero_vad_v5.onnx"
fi
parent=/dev/shm; [ -w "$parent" ] || parent="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$parent/tetris-bench-ort.XXXXXX")"
trap 'chmod -R u+w "$WORK"; rm -rf "$WORK"' EXIT
mkdir "$WORK/store"

# anon_kb ARGS...: prints "RssAnon-kB output-sha256" of an instance holding
# the model after one inference.
anon_kb() {
    rm -f "$WORK/out" "$WORK/in"
    mkfifo "$WORK/in"
    "$BIN/tetris-onnx-run" "$@" --hold <"$WORK/in" >"$WORK/out" 2>"$WORK/err" &
    pid=$!
    exec 4>"$WORK/in"
    while [ ! -s "$WORK/out" ]; do
        kill -0 $pid 2>/dev/null || { cat "$WORK/err" >&2; exit 1; }
        sleep 0.05
    done
    kb=$(awk '/^RssAnon:/ { print $2 }' /proc/$pid/status)
    sha=$(jq -r .sha256 "$WORK/out")
    exec 4>&-
    wait $pid
    echo "$kb $sha"
}

printf "%-34s %-9s %-7s %9s %11s %11s %9s %8s\n" model graph-opt prepack "weights" "anon priv" "anon store" "removed" outputs
printf "%-34s %-9s %-7s %9s %11s %11s %9s %8s\n" "" "" "" MiB MiB MiB "%" ""
# row MODEL OPT PREPACK LABEL: one measurement, printed.
row() {
    flag=""; [ "$3" = on ] && flag=--prepack
    # shellcheck disable=SC2086
    read -r priv psha <<EOT
$(anon_kb "$1" --private --graph-opt "$2" $flag)
EOT
    # shellcheck disable=SC2086
    read -r stor ssha <<EOT
$(anon_kb "$1" --store "$WORK/store" --direct --graph-opt "$2" $flag)
EOT
    awk -v m="$(basename "$1")" -v o="$4" -v p="$3" -v w="$weights" -v a="$priv" -v b="$stor" \
        -v same="$([ "$psha" = "$ssha" ] && echo same || echo DIFFER)" 'BEGIN {
        printf "%-34s %-9s %-7s %9.1f %11.1f %11.1f %9.0f %8s\n", m, o, p, w / 1048576,
               a / 1024, b / 1024, 100 * (a - b) * 1024 / w, same }'
}

for m in "$@"; do
    "$BIN/tetris-agent" load --direct --store "$WORK/store" "$m" >"$WORK/load" 2>/dev/null
    weights=$(jq -r .bytes "$WORK/load")
    for opt in none basic all; do
        for pp in off on; do
            row "$m" $opt $pp $opt
        done
    done
    # optimised once (at registration), then shared: the fused weights are
    # what the store holds and every instance maps
    opt_model="$WORK/$(basename "$m" .onnx).opt.onnx"
    "$BIN/tetris-onnx-run" "$m" --private --graph-opt all --save-optimized "$opt_model" \
        >/dev/null 2>&1
    "$BIN/tetris-agent" load --direct --store "$WORK/store" "$opt_model" >"$WORK/load" 2>/dev/null
    weights=$(jq -r .bytes "$WORK/load")
    row "$opt_model" none off "all@reg"
done
