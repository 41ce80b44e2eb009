#!/bin/sh
# test-openfaas-unit.sh - runs the C-driven tests of the autoscaler's
# OpenFaaS functions against the fault-injecting API server.
set -eu
. "$(dirname "$0")/../lib/common.sh"
"$BIN/autoscaler-test"
