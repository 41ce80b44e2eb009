#!/bin/sh
# build-test-tools.sh - makes what the tests need that takes minutes, each
# once into the cache, by the scripts that own them: the Go programs of the
# cluster tests (csi-sanity, Kubernetes, OpenFaaS CE's faas-netes and
# gateway: scripts/build-csi-sanity.sh, scripts/cluster/build-kube.sh,
# scripts/cluster/build-openfaas.sh) and the paper models the slow tier
# runs (scripts/models/paper-models.sh, with PyTorch, which it installs).
#
# `make test` runs it with --background before the first test: the Debian
# packages the builds need are installed first, in the foreground (apt has
# one lock, and the tests install packages too), then the builds run at
# the lowest CPU priority beside the tests that need no cluster, on the
# time those leave idle. A test that needs a program or a model calls its
# script as before, which waits on that build's or export's lock and finds
# it made. A build that fails here is only logged: the test's own call
# builds again and fails with the build's error where it matters. The
# models are checked with the release programs: make them first.
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

# The paper models the tests ask for (paper_model SPEC in tests/; a spec
# is a cache key of its own: bert-base and bert-base:3 are two exports).
PAPER_MODEL_SPECS="bert-base bert-base:3 resnet152 vgg19"

# build SCRIPT [ARGS...]: runs scripts/SCRIPT; 3 from it means its sources
# or PyTorch are not here (its tests skip), not a failure.
build() {
    _script=$1
    shift
    _r=0
    "$ROOT/scripts/$_script" "$@" >/dev/null || _r=$?
    [ $_r -eq 0 ] || [ $_r -eq 3 ] || { log "event=build-failed script=$_script rc=$_r"; return 1; }
}

# build_all: each build in turn, in the order the tests need them
# (csi-sanity and the paper models in the slow tier, then the cluster's).
build_all() {
    _rc=0
    build build-csi-sanity.sh || _rc=1
    # shellcheck disable=SC2086
    build models/paper-models.sh $PAPER_MODEL_SPECS || _rc=1
    build cluster/build-kube.sh || _rc=1
    build cluster/build-openfaas.sh || _rc=1
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
