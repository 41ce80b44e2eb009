#!/bin/sh
# test-kube-client.sh - runs the C-driven Kubernetes client fault tests.
set -eu
. "$(dirname "$0")/../lib/common.sh"
"$BIN/kube-client-test"
