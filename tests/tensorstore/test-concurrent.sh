#!/bin/sh
# test-concurrent.sh - 32 processes publish and map the same tensors at
# once: exactly one publish and one file per digest, identical bytes in every
# process, and their (deliberately unclosed) holders found dead and released.
# Then 32 processes race to fill a store that has a capacity.
set -eu
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the programs under test}"
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || shm="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$shm/tetris-store-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT INT TERM

for seed in 1 2 3; do
    "$BIN/tetris-store-stress" concurrent --store "$WORK/store-$seed" --procs 32 --tensors 24 \
        --seed "$seed" || { echo "FAIL: concurrent run with seed $seed" >&2; exit 1; }
done

# Many processes racing on few tensors (most lock waits, most re-checks).
"$BIN/tetris-store-stress" concurrent --store "$WORK/hot" --procs 32 --tensors 2 --seed 9 ||
    { echo "FAIL: concurrent run on 2 hot tensors" >&2; exit 1; }

# 32 processes fill a store with a capacity at once: usage never passes it.
"$BIN/tetris-store-stress" fill --store "$WORK/full" --procs 32 --capacity 8000000 \
    --max-bytes 131072 --seed 5 ||
    { echo "FAIL: concurrent fill past the capacity" >&2; exit 1; }

# Usage errors are reported, not crashed on.
if "$BIN/tetris-store-stress" concurrent 2>/dev/null; then
    echo "FAIL: missing --store accepted" >&2; exit 1
fi
rc=0
"$BIN/tetris-store-stress" bogus --store "$WORK/x" 2>/dev/null || rc=$?
[ "$rc" = 2 ] || { echo "FAIL: unknown mode exited $rc, not 2 (usage)" >&2; exit 1; }
