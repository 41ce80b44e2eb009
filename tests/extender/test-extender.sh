#!/bin/sh
# test-extender.sh - runs the C-driven scheduler extender tests (no cluster).
set -eu
. "$(dirname "$0")/../lib/common.sh"
"$BIN/extender-test"
