#!/bin/sh
# run-eval.sh - the cluster evaluation behind docs/EVAL.md (`make eval`):
# runs tetris-eval over every application, trace and policy, then its scale
# mode (1,000 nodes, 10,000 functions, and DTS against the GLPK optimum on
# the run's decisions; then the same functions as variants of shared
# bases), and draws the PNG plots with gnuplot (installed
# from Debian's gnuplot-nox when missing and apt-get can; without it the
# plots are skipped with a line saying so).
#
# Environment:
#   TETRIS_BIN     programs (required; `make eval` sets it)
#   EVAL_OUT       results folder (default docs/eval)
#   EVAL_DATA      per-second series and tables (default build/eval-data)
#   EVAL_ARGS      extra tetris-eval options (e.g. "--duration 600")
#   EVAL_SCALE_ARGS  the scale run's options (default "--nodes 1000
#                  --functions 10000"; "none" skips it)
# Exit status: 0 done, 1 the evaluation or a plot failed, 2 setup error.
set -eu

BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the tetris programs}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${EVAL_OUT:-$ROOT/docs/eval}"
DATA="${EVAL_DATA:-$ROOT/build/eval-data}"
mkdir -p "$OUT" "$DATA" || exit 2

echo "+ tetris-eval --profiles deploy/profiles --out $DATA ${EVAL_ARGS:-}" >&2
# shellcheck disable=SC2086
"$BIN/tetris-eval" --profiles "$ROOT/deploy/profiles" --out "$DATA" ${EVAL_ARGS:-} \
    | tee "$OUT/results.txt" || exit 1

# The scale run, once per DTS plan mode: each mode's gap to the optimum is
# then measured on the decisions of a run in that mode.
SCALE_ARGS="${EVAL_SCALE_ARGS:---nodes 1000 --functions 10000}"
if [ "$SCALE_ARGS" != none ]; then
    for mode in refined paper; do
        txt="$OUT/scale.txt"
        [ "$mode" = refined ] || txt="$OUT/scale-$mode.txt"
        echo "+ tetris-eval --profiles deploy/profiles --out $DATA/scale-$mode --mode $mode $SCALE_ARGS" >&2
        # shellcheck disable=SC2086
        "$BIN/tetris-eval" --profiles "$ROOT/deploy/profiles" --out "$DATA/scale-$mode" \
            --mode "$mode" $SCALE_ARGS >"$txt" || exit 1
        cat "$txt"
    done
    # The same functions as variants of 20 shared bases per model.
    echo "+ tetris-eval --profiles deploy/profiles --out $DATA/scale-bases $SCALE_ARGS --bases 20 --gap-samples 0" >&2
    # shellcheck disable=SC2086
    "$BIN/tetris-eval" --profiles "$ROOT/deploy/profiles" --out "$DATA/scale-bases" \
        $SCALE_ARGS --bases 20 --gap-samples 0 >"$OUT/scale-bases.txt" || exit 1
    cat "$OUT/scale-bases.txt"
fi

if ! command -v gnuplot >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 &&
    [ "$(id -u)" -eq 0 ]; then
    apt-get install -y -q gnuplot-nox >/dev/null 2>&1 || true
fi
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plots skipped: gnuplot is not installed (Debian: apt-get install gnuplot-nox)" >&2
    exit 0
fi

# policy_histogram TSV PNG TITLE YLABEL: one clustered bar per application
# (TSV: application, then tetris, tetris-RO, INFless-like, Photons-like).
policy_histogram() {
    gnuplot <<GP || exit 1
set terminal pngcairo size 800,450
set output "$2"
set title "$3"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:*]
set ylabel "$4"
set key top left
plot "$1" using 2:xtic(1) title "tetris", '' using 3 title "tetris-RO", \
     '' using 4 title "INFless-like", '' using 5 title "Photons-like"
GP
}

# Mean memory per application and policy, normalised to INFless (Fig. 13's
# form), one plot per trace.
for trace in stable periodic bursty; do
    awk -F'\t' -v tr="$trace" 'NR > 1 && $2 == tr { m[$1, $3] = $4; order[++n] = $1 }
        END { for (i = 1; i <= n; i++) { a = order[i]; if (seen[a]++) continue
                  b = m[a, "infless"]; printf "%s\t%.3f\t%.3f\t%.3f\t%.3f\n", a,
                      m[a, "tetris"] / b, m[a, "tetris-ro"] / b, 1, m[a, "photons"] / b } }' \
        "$DATA/results.tsv" >"$DATA/memory-$trace.tsv"
    policy_histogram "$DATA/memory-$trace.tsv" "$OUT/memory-$trace.png" \
        "Mean memory normalised to INFless-like, $trace trace (simulated)" "mean memory / INFless-like"
done

# SLO violations per application and policy (Fig. 14(a)'s form), bursty trace.
awk -F'\t' 'NR > 1 && $2 == "bursty" { v[$1, $3] = 100 * $7; order[++n] = $1 }
    END { for (i = 1; i <= n; i++) { a = order[i]; if (seen[a]++) continue
              printf "%s\t%.3f\t%.3f\t%.3f\t%.3f\n", a, v[a, "tetris"], v[a, "tetris-ro"],
                  v[a, "infless"], v[a, "photons"] } }' \
    "$DATA/results.tsv" >"$DATA/violations-bursty.tsv"
policy_histogram "$DATA/violations-bursty.tsv" "$OUT/violations-bursty.png" \
    "SLO violations, bursty trace (simulated; requests beyond capacity)" "violations (% of requests)"

# Memory over time for SVT (two fine-tuned ResNet-152s of one base) under
# the bursty trace, every policy.
d="$DATA"
gnuplot <<GP || exit 1
set terminal pngcairo size 900,450
set output "$OUT/timeline-svt-bursty.png"
set title "SVT (VGG19 + 2 fine-tuned ResNet-152), bursty trace: cluster memory over time (simulated)"
set xlabel "time (s)"
set ylabel "memory (MiB)"
set y2label "requests per second"
set y2tics
set key top left
plot "$d/series-svt-bursty-infless.tsv" using 1:4 with lines title "INFless-like", \
     "$d/series-svt-bursty-photons.tsv" using 1:4 with lines title "Photons-like", \
     "$d/series-svt-bursty-tetris-ro.tsv" using 1:4 with lines title "tetris-RO", \
     "$d/series-svt-bursty-tetris.tsv" using 1:4 with lines lw 2 title "tetris", \
     "$d/series-svt-bursty-tetris.tsv" using 1:2 axes x1y2 with lines lc rgb "#aaaaaa" title "arrivals"
GP

if [ "$SCALE_ARGS" != none ]; then
    # The scale run (refined mode): mean and peak memory per policy; DTS/opt
    # in each plan mode on the decisions of that mode's run.
    awk -F'\t' 'NR > 1 { printf "%s\t%.1f\t%.1f\n", $1, $4 / 1024, $5 / 1024 }' \
        "$DATA/scale-refined/scale.tsv" >"$DATA/scale-memory.tsv"
    n=$(awk -F'\t' 'NR == 2 { printf "%s nodes, %s functions", $2, $3 }' \
        "$DATA/scale-refined/scale.tsv")
    gnuplot <<GP || exit 1
set terminal pngcairo size 800,450
set output "$OUT/scale-memory.png"
set title "Cluster memory at scale: $n (simulated)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:*]
set ylabel "memory (GiB)"
set key below
plot "$DATA/scale-memory.tsv" using 2:xtic(1) title "mean", '' using 3 title "peak"
GP
    awk -F'\t' 'FNR > 1 && FILENAME ~ "-" $1 "/" { r[$2, $1] = $4 "\t" $5 "\t" $6
              if (!seen[$2]++) order[++n] = $2 }
        END { for (i = 1; i <= n; i++) printf "%s\t%s\t%s\n", order[i], r[order[i], "paper"],
                  r[order[i], "refined"] }' \
        "$DATA/scale-paper/scale-gap.tsv" "$DATA/scale-refined/scale-gap.tsv" \
        >"$DATA/scale-gap-plot.tsv"
    gnuplot <<GP || exit 1
set terminal pngcairo size 800,450
set output "$OUT/scale-gap.png"
set title "DTS memory / GLPK optimum on the scale runs' decisions (each mode its own run)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0.9:*]
set ylabel "DTS / optimum"
set key below
plot "$DATA/scale-gap-plot.tsv" using 2:xtic(1) title "paper mode, mean", \
     '' using 4 title "paper mode, max", '' using 5 title "refined mode, mean", \
     '' using 7 title "refined mode, max"
GP
fi
echo "plots: $OUT/*.png" >&2
