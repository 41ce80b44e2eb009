#!/bin/sh
# run-fuzzers.sh - runs each fuzzer (the parsers', the ONNX rewriter's)
# for FUZZ_SECONDS (default 60) from a seed corpus made now from the real
# models (.deps/models) and the synthetic valid and malformed files of
# tetris-gen-model-corpus. The corpus grows under build/fuzz/corpus and is
# kept between runs; crashes land in build/fuzz/artifacts.
# Usage: run-fuzzers.sh FUZZ_DIR GEN_CORPUS_BIN
# Exit status: 0 no fuzzer found anything, 1 otherwise.
set -eu
dir=$1
gen=$2
secs=${FUZZ_SECONDS:-60}
models=.deps/models
seeds=$dir/seeds
rm -rf "$seeds"
mkdir -p "$seeds/files" "$seeds/safetensors" "$seeds/onnx" "$seeds/manifest" "$dir/artifacts"

"$gen" --valid "$seeds/files" >/dev/null
cp "$seeds"/files/*.safetensors "$seeds/safetensors/"
cp "$seeds"/files/*.onnx "$seeds/onnx/"
# Real models up to a few MB keep each run fast enough to mutate.
for m in silero_vad_v5.onnx silero_vad_legacy.onnx hello_deepa.onnx \
         ch_ppocr_mobile_v2.0_cls_infer.onnx; do
    [ -f "$models/$m" ] && cp "$models/$m" "$seeds/onnx/"
done
# The rewriter (what ONNX Runtime is handed in store mode) reads ONNX too.
cp -r "$seeds/onnx" "$seeds/onnx_rewrite"
"$dir/seed-manifests" "$seeds/manifest" "$seeds/files/valid-features.onnx" \
    "$seeds/files/valid-features.safetensors" "$models/hello_deepa.onnx"

failed=0
for t in safetensors onnx onnx_rewrite manifest; do
    mkdir -p "$dir/corpus/$t"
    dict=""
    case $t in onnx*) ;; *) dict="-dict=$(pwd)/fuzz/json.dict" ;; esac
    echo "fuzz target=$t seconds=$secs"
    # Inputs may name external data files: run where none exist.
    if ! (cd "$dir" && ./fuzz_$t $dict -max_total_time="$secs" -timeout=10 \
            -rss_limit_mb=2048 -max_len=4194304 -print_final_stats=1 \
            -artifact_prefix="artifacts/$t-" "corpus/$t" "seeds/$t" \
            >"fuzz_$t.log" 2>&1); then
        failed=1
        echo "FAIL fuzz target=$t (see $dir/fuzz_$t.log)"
        tail -40 "$dir/fuzz_$t.log"
    else
        grep -E "^stat::number_of_executed_units|^Done" "$dir/fuzz_$t.log" || true
        echo "PASS fuzz target=$t"
    fi
done
exit $failed
