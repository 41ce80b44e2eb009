#!/bin/bash
# bench/formats/run.sh - what indexing a model costs (parse, hash, manifest)
# for the real ONNX models and the SYNTHETIC BERT-base safetensors model,
# page cache warm. Markdown table on stdout.
# Environment: TETRIS_BIN (required), BENCH_QUICK=1 (fewer repetitions,
# no synthetic model). Exit status: that of tetris-bench-formats.
set -euo pipefail
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the tetris programs}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
MODELS="${TETRIS_MODELS:-$ROOT/.deps/models}"
reps=5
models=("$MODELS"/*.onnx)
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    reps=3
else
    models+=("$("$BIN/tetris-synth-model" bert-base)")
fi
echo "Indexing cost per model: parse the format, hash every tensor (SHA-256 identity +"
echo "CRC32, one core), build the manifest JSON. Medians of $reps runs, page cache warm."
echo
"$BIN/tetris-bench-formats" --reps "$reps" "${models[@]}"
