#!/bin/sh
# test-concurrent.sh - 32 processes publish and map the same tensors at
# once: exactly one publish and one file per digest, identical bytes in every
# process, and their (deliberately unclosed) holders found dead and released.
# Then 32 processes race to fill a store that has a capacity.
set -eu
. "$(dirname "$0")/../lib/common.sh"

for seed in 1 2 3; do
    "$BIN/tetris-store-stress" concurrent --store "$WORK/store-$seed" --procs 32 --tensors 24 \
        --seed "$seed" || fail "concurrent run with seed $seed"
done

# Many processes racing on few tensors (most lock waits, most re-checks).
"$BIN/tetris-store-stress" concurrent --store "$WORK/hot" --procs 32 --tensors 2 --seed 9 ||
    fail "concurrent run on 2 hot tensors"

# 32 processes fill a store with a capacity at once: usage never passes it.
"$BIN/tetris-store-stress" fill --store "$WORK/full" --procs 32 --capacity 8000000 \
    --max-bytes 131072 --seed 5 || fail "concurrent fill past the capacity"

# Usage errors are reported, not crashed on.
if "$BIN/tetris-store-stress" concurrent 2>/dev/null; then fail "missing --store accepted"; fi
rc=0
"$BIN/tetris-store-stress" bogus --store "$WORK/x" 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "unknown mode exited $rc, not 2 (usage)"
