#!/bin/sh
# test-crash.sh - 300 trials of a loader SIGKILLed at a random instant of
# its ingest, in a store without a capacity (unnamed temp files) and in
# one with a capacity (named temp files, its reservations). After each
# kill nothing partial is mappable (every tensors/ file verifies, every
# resident tensor has exactly its bytes); after store_repair there are no
# temp files, no dead holders, and the store verifies clean. The helper
# fails if no kill landed mid-ingest (and, with named temp files, if no
# kill left one for repair).
set -eu
. "$(dirname "$0")/../lib/common.sh"

"$BIN/tetris-store-stress" crash --store "$WORK/store" --trials 300 --tensors 6 \
    --max-bytes 262144 --seed "${TETRIS_TEST_SEED:-$$}" || fail "crash trials (seed ${TETRIS_TEST_SEED:-$$})"
"$BIN/tetris-store-stress" crash --store "$WORK/store-capacity" --capacity 1073741824 \
    --trials 300 --tensors 6 --max-bytes 262144 --seed "${TETRIS_TEST_SEED:-$$}" ||
    fail "crash trials with a capacity (seed ${TETRIS_TEST_SEED:-$$})"
