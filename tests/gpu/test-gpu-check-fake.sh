#!/bin/sh
# test-gpu-check-fake.sh - tetris-gpu-check's whole run (importers in their
# own PID and network namespaces, kernels, the writer's fault, the
# lifetime deltas, the matrix-vector product over a real model's layer)
# against the fake driver, whose kernels run on the host: every check must
# pass; and tetris-bench-gpu's run (its figures mean nothing on the fake).
# It shows the programs' own logic, not the hardware's behaviour.
set -u
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/gpu.sh"
unshare -pn --fork --mount-proc --kill-child true 2>/dev/null ||
    skip "cannot make PID and network namespaces (unshare -pn: root needed)"
model=$(ls "$MODELS"/silero_vad_v5.onnx 2>/dev/null || true)
rc=0
"$BIN/tetris-gpu-check" --size $((8 << 20)) ${model:+--model "$model"} \
    >"$WORK/check.log" 2>"$WORK/check.err" || rc=$?
[ $rc = 0 ] || fail "tetris-gpu-check on the fake driver: exit $rc: $(grep FAIL "$WORK/check.log")"
[ "$(grep -c '^check=.* ok ' "$WORK/check.log")" -ge 20 ] || fail "too few checks ran"
grep -q 'check=3 ok importer 0 (own PID+net namespaces).*pid_here=1$' "$WORK/check.log" ||
    fail "importer 0 was not in a PID namespace of its own"
grep -q 'check=4 ok kernel store into read-only: .*sync=700' "$WORK/check.log" ||
    fail "the writer's fault did not show"
note "$(tail -n 1 "$WORK/check.log") $(grep -o 'matvec [^ ]* rows=[0-9]* cols=[0-9]*' "$WORK/check.log")"
"$BIN/tetris-bench-gpu" --synthetic-bytes 4000000 --synthetic-tensors 20 >"$WORK/bench.log" \
    2>"$WORK/bench.err" || fail "tetris-bench-gpu on the fake driver: $(cat "$WORK/bench.err")"
grep -q '^attach_ms=.* copy_ms=' "$WORK/bench.log" && grep -q '^import_map_us p50=' "$WORK/bench.log" &&
    grep -q '^daemon_fill_ms=.* padding_bytes=' "$WORK/bench.log" ||
    fail "tetris-bench-gpu printed: $(cat "$WORK/bench.log")"
echo "ok $PROG"
