#!/bin/bash
# bench/dts/run.sh - DTS vs the GLPK optimum: memory ratio and decision time
# over the sample profiles and over generated config spaces of 10 to 10,000
# configs. Markdown tables on stdout.
# Environment: TETRIS_BIN (required), BENCH_QUICK=1 (smaller spaces, fewer
# repetitions, shorter GLPK limit). Exit status: that of tetris-bench-dts.
set -euo pipefail
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the tetris programs}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    export BENCH_REPS="${BENCH_REPS:-3}" BENCH_ILP_LIMIT_MS="${BENCH_ILP_LIMIT_MS:-2000}"
    sizes="10 100 1000"
else
    export BENCH_REPS="${BENCH_REPS:-5}" BENCH_ILP_LIMIT_MS="${BENCH_ILP_LIMIT_MS:-10000}"
    sizes="10 100 1000 10000"
fi
echo "DTS (Algorithm 1) against the exact integer program (GLPK, limit ${BENCH_ILP_LIMIT_MS} ms);"
echo "DTS/opt = DTS's memory over the optimum's; times are medians of $BENCH_REPS runs."
echo
echo "### Sample profiles (deploy/profiles; see each file's header for measured or illustrative)"
echo
echo "SLOs: 1.5x and 4x the model's fastest b=1 p95 latency."
echo
"$BIN/tetris-bench-dts" profiles "$ROOT"/deploy/profiles/*profile*.yaml
echo
echo "### Generated config spaces (SLO 400 ms, 3 seeded spaces per row)"
echo
# shellcheck disable=SC2086
"$BIN/tetris-bench-dts" spaces $sizes
