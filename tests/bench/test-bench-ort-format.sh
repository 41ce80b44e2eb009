#!/bin/sh
# test-bench-ort-format.sh - tetris-bench-ort-format writes a real model's
# ORT-format file, and every pre-packing mode's start answers with stock
# ONNX Runtime's outputs (tetris-onnx-run's seeded inputs and hash), which
# --outputs writes and --against compares with; an ORT file that is not
# one (random bytes, empty, truncated, missing) fails with an error line
# and exit 1, bad usage with exit 2.
set -eu
. "$(dirname "$0")/../lib/common.sh"

model="$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx"
[ -r "$model" ] || skip "no $model (make deps)"
B="$BIN/tetris-bench-ort-format"

"$B" --make "$WORK/cls.ort" "$model" >"$WORK/make.json" 2>"$WORK/make.log" ||
    fail "--make failed: $(tail -n 1 "$WORK/make.log")"
jq -e --arg out "$WORK/cls.ort" '.ort == $out and .bytes > 0 and .save_prepacked == false and
    .data_bytes == 0 and (.runtime | startswith("onnxruntime ")) and .make_ms > 0' \
    "$WORK/make.json" >/dev/null || fail "--make reported $(cat "$WORK/make.json")"
[ "$(stat -c %s "$WORK/cls.ort")" = "$(jq .bytes "$WORK/make.json")" ] || fail "--make: bytes differ from the file's"
head -c 8 "$WORK/cls.ort" | tail -c 4 | grep -q ORTM || fail "--make: no ORT file identifier"
"$B" --make "$WORK/pp.ort" --save-prepacked "$model" >"$WORK/pp.json" 2>>"$WORK/make.log" ||
    fail "--make --save-prepacked failed: $(tail -n 1 "$WORK/make.log")"
jq -e '.save_prepacked == true and (.data_bytes | type) == "number"' "$WORK/pp.json" >/dev/null ||
    fail "--save-prepacked reported $(cat "$WORK/pp.json")"

want=$("$BIN/tetris-onnx-run" "$model" --private --graph-opt all --prepack 2>>"$WORK/run.log" | jq -r .sha256)
[ -n "$want" ] && [ "$want" != null ] || fail "tetris-onnx-run gave no hash: $(tail -n 1 "$WORK/run.log")"
for mode in stock ort ort-copy ort-mmap; do
    f="$WORK/cls.ort"; [ $mode != stock ] || f="$model"
    "$B" --mode $mode "$f" >"$WORK/$mode.json" 2>"$WORK/$mode.log" || fail "$mode: $(tail -n 1 "$WORK/$mode.log")"
    jq -e --arg m $mode --arg sha "$want" '.mode == $m and .sha256 == $sha and .session_ms > 0 and
        .first_run_ms > 0 and .output_bytes > 0 and (.tmpfs | type) == "boolean"' \
        "$WORK/$mode.json" >/dev/null || fail "$mode: not stock's answer: $(cat "$WORK/$mode.json") (want $want)"
done
# --outputs writes the bytes hashed; --against compares with them: none
# differ in place, and without pre-packing (other kernels) few and little.
"$B" --mode stock --outputs "$WORK/want.out" "$model" >"$WORK/want.json" 2>>"$WORK/stock.log"
[ "$(stat -c %s "$WORK/want.out")" = "$(jq .output_bytes "$WORK/want.json")" ] ||
    fail "--outputs wrote $(stat -c %s "$WORK/want.out") bytes, the outputs are $(jq .output_bytes "$WORK/want.json")"
[ "$(sha256sum <"$WORK/want.out" | cut -d' ' -f1)" = "$want" ] || fail "--outputs: not the bytes hashed"
"$B" --mode ort --against "$WORK/want.out" "$WORK/cls.ort" >"$WORK/same.json" 2>>"$WORK/ort.log"
jq -e '.elements > 0 and .elements_differ == 0 and .max_abs_diff == 0' "$WORK/same.json" >/dev/null ||
    fail "ort --against stock: $(cat "$WORK/same.json")"
"$B" --mode ort-noprepack --against "$WORK/want.out" "$WORK/cls.ort" >"$WORK/noprepack.json" 2>>"$WORK/ort.log" ||
    fail "ort-noprepack: $(tail -n 1 "$WORK/ort.log")"
jq -e '.elements > 0 and .elements_differ <= .elements and .max_abs_diff < 0.001 and
    ((.elements_differ == 0) == (.max_abs_diff == 0))' "$WORK/noprepack.json" >/dev/null ||
    fail "ort-noprepack --against stock: $(cat "$WORK/noprepack.json")"
head -c 3 "$WORK/want.out" >"$WORK/short.out"
set +e
"$B" --mode ort --against "$WORK/short.out" "$WORK/cls.ort" >"$WORK/out" 2>"$WORK/err"; rc_short=$?
set -e
[ $rc_short -eq 1 ] && grep -q 'has 3 bytes' "$WORK/err" || fail "--against a short file: exit $rc_short, $(cat "$WORK/err")"

# --runs: every run hashes alike, run_ms their mean.
"$B" --mode ort --runs 3 "$WORK/cls.ort" >"$WORK/runs.json" 2>>"$WORK/ort.log" || fail "--runs 3: $(tail -n 1 "$WORK/ort.log")"
jq -e --arg sha "$want" '.runs == 3 and .sha256 == $sha and .run_ms > 0 and .first_run_ms > 0' \
    "$WORK/runs.json" >/dev/null || fail "--runs 3: $(cat "$WORK/runs.json")"

# Another seed, other inputs, other outputs: the hash follows the inputs.
"$B" --mode ort --seed 2 "$WORK/cls.ort" >"$WORK/seed2.json" 2>>"$WORK/ort.log"
[ "$(jq -r .sha256 "$WORK/seed2.json")" != "$want" ] || fail "--seed 2 gave seed 1's outputs"

# Files that are no ORT model: an error line and exit 1, never a crash.
head -c 100000 /dev/urandom >"$WORK/random.ort"
: >"$WORK/empty.ort"
head -c 300000 "$WORK/cls.ort" >"$WORK/truncated.ort"
for f in random empty truncated missing; do
    for mode in ort ort-copy ort-mmap ort-noprepack; do
        set +e
        "$B" --mode $mode "$WORK/$f.ort" >"$WORK/out" 2>"$WORK/err"
        rc=$?
        set -e
        [ $rc -eq 1 ] || fail "$mode on a $f file: exit $rc, want 1"
        grep -q 'level=error' "$WORK/err" || fail "$mode on a $f file: no error line"
        [ ! -s "$WORK/out" ] || fail "$mode on a $f file: a result was printed"
    done
done
set +e
"$B" --make "$WORK/x.ort" "$WORK/random.ort" >/dev/null 2>&1; rc_make=$?
"$B" "$model" >/dev/null 2>&1; rc_none=$?
"$B" --make "$WORK/x.ort" --mode ort "$model" >/dev/null 2>&1; rc_both=$?
"$B" --mode ort --save-prepacked "$WORK/cls.ort" >/dev/null 2>&1; rc_pp=$?
"$B" --mode nonsense "$model" >/dev/null 2>&1; rc_mode=$?
"$B" --mode ort >/dev/null 2>&1; rc_file=$?
"$B" --make "$WORK/x.ort" --against "$WORK/want.out" "$model" >/dev/null 2>&1; rc_against=$?
set -e
[ $rc_make -eq 1 ] || fail "--make of random bytes: exit $rc_make, want 1"
[ $rc_none -eq 2 ] || fail "neither --make nor --mode: exit $rc_none, want 2"
[ $rc_both -eq 2 ] || fail "--make with --mode: exit $rc_both, want 2"
[ $rc_pp -eq 2 ] || fail "--save-prepacked with --mode: exit $rc_pp, want 2"
[ $rc_mode -eq 2 ] || fail "an unknown mode: exit $rc_mode, want 2"
[ $rc_file -eq 2 ] || fail "no FILE: exit $rc_file, want 2"
[ $rc_against -eq 2 ] || fail "--against with --make: exit $rc_against, want 2"
echo "ok bench-ort-format"
