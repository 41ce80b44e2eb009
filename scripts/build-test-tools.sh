#!/bin/sh
# build-test-tools.sh - builds the Go programs the cluster tests need
# (csi-sanity, Kubernetes, OpenFaaS CE's faas-netes and gateway), each once
# into the cache, by the scripts that own them (scripts/build-csi-sanity.sh,
# scripts/cluster/build-kube.sh, scripts/cluster/build-openfaas.sh).
#
# `make test` runs it with --background before the first test: the Debian
# packages the builds need are installed first, in the foreground (apt has
# one lock, and the tests install packages too), then the builds run at
# the lowest CPU priority beside the tests that need no cluster, on the
# time those leave idle. A test that needs a program calls its build
# script as before, which waits on that build's lock and finds the program
# made. A build that fails here is only logged: the test's own call builds
# again and fails with the build's error where it matters.
#
# Usage: scripts/build-test-tools.sh [--background]
# Environment: TETRIS_CACHE (default ~/.cache/tetris); the build scripts'
# own (TETRIS_OPENFAAS_SRC, TETRIS_CSI_TEST_SRC).
# Output: --background logs to $TETRIS_CACHE/build-test-tools.log.
# Exit status: 0 built (or, with --background, started), 1 a build failed,
# 2 usage.
set -eu
PROG=build-test-tools
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/scripts/cluster/common.sh"

case "${1:-}" in
--background) background=1 ;;
"") background=0 ;;
-h | --help)
    sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
*)
    echo "usage: scripts/build-test-tools.sh [--background]" >&2
    exit 2
    ;;
esac

# build_all: each build in turn, in the order the tests need them
# (csi-sanity in the slow tier, then the cluster's); 3 from a script means
# its sources are not here (its tests skip), not a failure.
build_all() {
    _rc=0
    for _b in build-csi-sanity.sh cluster/build-kube.sh cluster/build-openfaas.sh; do
        _r=0
        "$ROOT/scripts/$_b" >/dev/null || _r=$?
        [ $_r -eq 0 ] || [ $_r -eq 3 ] || { log "event=build-failed script=$_b rc=$_r"; _rc=1; }
    done
    return $_rc
}

if [ $background = 0 ]; then
    build_all
    exit $?
fi

apt_require $GO_BUILD_PACKAGES
mkdir -p "$TETRIS_CACHE"
log "event=background-build log=$TETRIS_CACHE/build-test-tools.log"
nice -n 19 "$0" >"$TETRIS_CACHE/build-test-tools.log" 2>&1 </dev/null &
