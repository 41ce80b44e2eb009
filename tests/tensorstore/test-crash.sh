#!/bin/sh
# test-crash.sh - 300 trials of a loader SIGKILLed at a random instant of
# its ingest. After each kill nothing partial is mappable (every tensors/
# file verifies, every resident tensor has exactly its bytes); after
# store_repair there are no temp files, no dead holders, and the store
# verifies clean. The helper fails if no kill landed mid-ingest.
set -eu
BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the programs under test}"
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || shm="${TMPDIR:-/tmp}"
WORK="$(mktemp -d "$shm/tetris-store-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT INT TERM

"$BIN/tetris-store-stress" crash --store "$WORK/store" --trials 300 --tensors 6 \
    --max-bytes 262144 --seed "${TETRIS_TEST_SEED:-$$}" ||
    { echo "FAIL: crash trials (seed ${TETRIS_TEST_SEED:-$$})" >&2; exit 1; }
