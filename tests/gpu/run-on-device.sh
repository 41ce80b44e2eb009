#!/bin/sh
# run-on-device.sh - the GPU sharing design on a real GPU, in one bounded
# run (docs/GPU.md "Validated on hardware"): the machine's facts, every
# tetris-gpu-check point, tetris-bench-gpu's figures beside their
# host-to-device baseline, and the node daemon's own GPU path end to end
# (tetris-reclaimer exporting, importers in other PID and network
# namespaces mapping, one copy for N, a killed importer, memory returned
# after the last). It goes on past a failed step and says at the end what
# failed.
#
# usage: tests/gpu/run-on-device.sh [--bundle DIR] [--fake]
#   --bundle DIR  the programs, their libraries, curl, jq and the models
#                 from tests/gpu/device-bundle.sh (default: bin/, .deps/)
#   --fake        against the fake driver, small sizes: checks this
#                 script's own logic on a machine without a GPU
# Exit status: 0 every step passed, 1 a step failed, 2 usage, 77 no GPU.
set -u
bundle=""
driver=real
while [ $# -gt 0 ]; do
    case $1 in
    --bundle) bundle=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    --fake) driver=fake; shift ;;
    -h | --help) sed -n '2,/^# Exit/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "usage: tests/gpu/run-on-device.sh [--bundle DIR] [--fake]" >&2; exit 2 ;;
    esac
done
if [ -n "$bundle" ]; then
    export TETRIS_BIN="$bundle/bin" TETRIS_MODELS="$bundle/models"
    command -v curl >/dev/null && command -v jq >/dev/null || PATH="$bundle/tools:$PATH"
fi
TETRIS_GPU_DRIVER=$driver
export TETRIS_GPU_DRIVER
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$(dirname "$0")/../lib/gpu.sh"

failed=""
# step NAME RC: a step's outcome line; a non-zero RC is remembered.
step() {
    echo "step=$1 rc=$2"
    [ "$2" = 0 ] || failed="$failed $1"
}
# expect NAME 'CONDITION' MESSAGE: one asserted point of the daemon's run.
expect() {
    if eval "$2"; then echo "expect=$1 ok $3"; else echo "expect=$1 FAIL $3"; failed="$failed $1"; fi
}

# ---- the machine ----
echo "== machine"
uname -srm
if [ $driver = real ]; then
    command -v nvidia-smi >/dev/null || skip "no nvidia-smi: no NVIDIA driver here"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
    nvidia-smi | sed -n 's/.*\(CUDA Version: [0-9.]*\).*/\1/p' | head -n 1
    command -v nvcc >/dev/null && nvcc --version | tail -n 2 | head -n 1
    if [ -z "${TETRIS_LIBCUDA:-}" ]; then
        lib=$(ldconfig -p | sed -n 's/.*libcuda\.so\.1 .*=> //p' | head -n 1)
        [ -n "$lib" ] || lib=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name libcuda.so.1 2>/dev/null | head -n 1)
        [ -n "$lib" ] || skip "libcuda.so.1 not found"
        TETRIS_LIBCUDA=$lib
        export TETRIS_LIBCUDA
    fi
    echo "libcuda=$TETRIS_LIBCUDA"
    # The daemon loads only a driver that root owns and nobody else may
    # write, in a directory of the same kind (docs/GPU.md).
    ls -lL "$TETRIS_LIBCUDA"
    ls -ldL "$(dirname "$TETRIS_LIBCUDA")"
    check_size=$((1 << 30))
    bench_large=""
    bench_small="--synthetic-bytes $((4096 * 4096)) --synthetic-tensors 4096"
    tensors=4
    tensor_bytes=$((512 << 20))
else
    check_size=$((8 << 20))
    bench_large="--synthetic-bytes 4000000 --synthetic-tensors 20"
    bench_small="--synthetic-bytes $((4096 * 64)) --synthetic-tensors 64"
    tensors=6
    tensor_bytes=100000
fi
model="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
[ -f "$model" ] || fail "no $model"

# ---- which namespaces let a process start CUDA ----
echo "== cuInit in namespaces (a pod has PID, network and mount namespaces and its own /proc)"
for ns in "" "-n" "-p --fork" "-p --fork --mount-proc" "-pn --fork --mount-proc"; do
    rc=0
    # shellcheck disable=SC2086
    out=$(unshare $ns --kill-child "$IMPORTER" --device cuda:0 --mem-used 2>&1) || rc=$?
    echo "namespaces=\"${ns:-none}\" rc=$rc $(echo "$out" | tail -n 1 | cut -c1-160)"
done

# ---- tetris-gpu-check: every point of docs/GPU.md's hardware list ----
echo "== tetris-gpu-check --size $check_size --model $(basename "$model")"
rc=0
timeout 300 "$BIN/tetris-gpu-check" --size $check_size --model "$model" 2>&1 || rc=$?
[ $rc = 77 ] && skip "tetris-gpu-check: no usable GPU"
step gpu-check $rc

# ---- our CUDA ABI header against the toolkit's cuda.h, where there is one ----
rc=0
sh "$(dirname "$0")/test-abi.sh" 2>&1 || rc=$?
[ $rc = 77 ] || step abi $rc

# ---- tetris-bench-gpu: warm attach against copying host to device ----
for args in "$bench_large" "--model $model" "$bench_small"; do
    echo "== tetris-bench-gpu $args"
    rc=0
    # shellcheck disable=SC2086
    timeout 300 "$BIN/tetris-bench-gpu" $args 2>&1 || rc=$?
    step "bench${args:+ $(echo "$args" | cut -c1-24)}" $rc
done

# ---- the node daemon's GPU path ----
echo "== tetris-reclaimer: $tensors tensors of $tensor_bytes bytes shared on cuda:0"
synth "$WORK/m.safetensors" $tensors $tensor_bytes 41
total=$((tensors * tensor_bytes))
used0=$(gpu_used)
start_daemon --interval 200ms --scrub-rate 0 --keep-alive 1s --gpu-shared-store
gpu_hold A "$WORK/m.safetensors" unshare -pn --fork --mount-proc --kill-child
cat "$WORK/A.json"
expect import-own-namespaces "jq -e '.device_tensors == $tensors and .verified == $tensors and .mismatched == 0' '$WORK/A.json' >/dev/null" \
    "importer A in its own PID and network namespaces maps and reads back every tensor"
used1=$(gpu_used)
copy=$(gpu_metric tetris_gpu_resident_bytes)
echo "device_used_bytes before=$used0 one_importer=$used1 resident=$copy (a daemon context and A's with it)"
gpu_hold B "$WORK/m.safetensors"
gpu_hold C "$WORK/m.safetensors"
used3=$(gpu_used)
for n in B C; do
    expect "import-$n" "jq -e '.verified == $tensors and .mismatched == 0' '$WORK/$n.json' >/dev/null" \
        "importer $n reads back every tensor"
done
expect one-copy "[ \$((used3 - used1)) -lt $total ]" \
    "two more importers added $((used3 - used1)) bytes (their contexts), less than a copy ($total)"
expect metrics "[ \"\$(gpu_metric tetris_gpu_saved_bytes)\" = $((2 * copy)) ]" \
    "resident $copy saved $(gpu_metric tetris_gpu_saved_bytes) (2 x resident)"
rc=0
"$IMPORTER" --store "$STORE" --device cuda:0 --copy-write "$WORK/m.safetensors" </dev/null \
    >"$WORK/W.json" 2>>"$WORK/importer.log" || rc=$?
cat "$WORK/W.json"
expect copy-write-refused "jq -e '.copy_write == \"refused\"' '$WORK/W.json' >/dev/null" \
    "a host-to-device copy into a read-only import is refused (exit $rc)"
kill -KILL "$PID_A"
wait "$PID_A" 2>/dev/null
expect killed-released "wait_until 60 '[ \"\$(gpu_metric tetris_gpu_saved_bytes)\" = $copy ]'" \
    "a SIGKILLed importer's references are released"
gpu_release B
gpu_release C
expect copies-released "wait_until 60 '[ \"\$(gpu_metric tetris_gpu_resident_bytes)\" = 0 ]'" \
    "unreferenced copies released after the keep-alive"
# gpu_used starts a CUDA process (a context each time): polled once a second.
returned() {
    for _i in $(seq 30); do
        [ "$(gpu_used)" -lt $((used1 - total / 2)) ] && return 0
        sleep 1
    done
    return 1
}
expect memory-returned returned \
    "device memory returned after the last importer: $(gpu_used) bytes used, $used1 with one"
daemon_alive
step daemon-alive $?
stop_daemon

echo "== summary"
if [ -n "$failed" ]; then
    echo "result=fail failed=\"${failed# }\""
    exit 1
fi
echo "result=pass"
