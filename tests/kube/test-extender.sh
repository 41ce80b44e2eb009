#!/bin/sh
# test-extender.sh - runs the C-driven scheduler extender tests (no cluster).
set -eu
exec "$TETRIS_BIN/extender-test"
