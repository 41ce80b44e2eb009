# tests/lib/gpu.sh - helpers for the GPU sharing tests (sourced after
# tests/lib/reclaimer.sh): the fake driver (tests/gpu/fake_libcuda.c) on a
# fake machine of the test's own, the importer that plays a function
# instance on a device, and the device's used bytes as the driver reports
# them.
# shellcheck shell=sh disable=SC2034
IMPORTER="$BIN/tetris-test-gpu-importer"
[ -x "$IMPORTER" ] || fail "tetris-test-gpu-importer missing"
# TETRIS_GPU_DRIVER=real (tests/gpu/run-on-device.sh): the machine's own
# driver, libcuda.so.1 or $TETRIS_LIBCUDA, and its GPU.
if [ "${TETRIS_GPU_DRIVER:-fake}" != real ]; then
    TETRIS_LIBCUDA="${TETRIS_BUILD:-$ROOT/build/release}/fakecuda/libcuda.so.1"
    [ -f "$TETRIS_LIBCUDA" ] || fail "fake driver missing: $TETRIS_LIBCUDA (make all)"
    # 64 KiB granularity keeps the padding of small synthetic tensors small.
    TETRIS_FAKE_CUDA_GRANULARITY=65536
    TETRIS_FAKE_CUDA_TOTAL=$((64 << 20))
    TETRIS_FAKE_CUDA_ID="$PROG-$$"
    export TETRIS_LIBCUDA TETRIS_FAKE_CUDA_GRANULARITY TETRIS_FAKE_CUDA_TOTAL TETRIS_FAKE_CUDA_ID
fi

# gpu_used: bytes in use on cuda:0, all processes (the fake counts its
# allocations; a real driver counts every process's context too).
gpu_used() { "$IMPORTER" --device cuda:0 --mem-used 2>>"$WORK/importer.log"; }

# gpu_metric NAME: a per-GPU metric of the daemon for cuda:0.
gpu_metric() {
    http_get /metrics | sed -n "s/^$1{gpu=\"cuda:0\"} //p"
}

# gpu_hold NAME MODEL [ARGS...]: an importer that loads MODEL on cuda:0
# and holds it until $WORK/NAME.in is closed (exec 7>... by the caller is
# not needed: the fifo is held open by a sleeping writer, killed by
# gpu_release NAME). Sets PID_<NAME>; its JSON goes to $WORK/NAME.json.
gpu_hold() {
    _n=$1; _m=$2; shift 2
    mkfifo "$WORK/$_n.in"
    sleep 100000 >"$WORK/$_n.in" &
    eval "W_$_n=$!"
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    "$@" "$IMPORTER" --store "$STORE" --device cuda:0 --hold --label "$_n" "$_m" \
        <"$WORK/$_n.in" >"$WORK/$_n.json" 2>>"$WORK/importer.log" &
    eval "PID_$_n=$!"
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    wait_until 60 "grep -q device_tensors '$WORK/$_n.json'" || fail "importer $_n did not load"
}

# gpu_release NAME: the importer's stdin closes; it unmaps and exits.
gpu_release() {
    eval "kill \$W_$1"
    eval "wait \$PID_$1" || fail "importer $1 did not exit cleanly"
}
