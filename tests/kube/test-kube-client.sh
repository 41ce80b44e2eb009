#!/bin/sh
# test-kube-client.sh - runs the C-driven Kubernetes client fault tests.
set -eu
exec "$TETRIS_BIN/kube-client-test"
