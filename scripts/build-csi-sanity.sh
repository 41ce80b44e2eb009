#!/bin/sh
# build-csi-sanity.sh - builds csi-sanity, the CSI community's conformance
# suite (kubernetes-csi/csi-test v5.2.0, commit 1153a7c6, Apache-2.0, its
# dependencies vendored), from its source tarball with Debian's Go,
# offline, once, into $TETRIS_CACHE/csi-sanity-5.2.0/bin. Later runs find
# the binary and return; the source is then no longer needed. Nothing is
# patched.
#
# Usage: scripts/build-csi-sanity.sh
# Environment:
#   TETRIS_CSI_TEST_SRC  folder holding csi-test-v5.2.0.tar.gz
#                        (../shared/csi beside the repository)
#   TETRIS_CACHE         cache for the binary ($HOME/.cache/tetris)
# Prints the binary's path on stdout.
# Exit status: 0 binary present, 1 build failed, 3 neither binary nor
# source (callers skip what needs csi-sanity).
set -eu
PROG=build-csi-sanity
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/scripts/cluster/common.sh"

TARBALL=csi-test-v5.2.0.tar.gz
SRC="${TETRIS_CSI_TEST_SRC:-$ROOT/../shared/csi}"
CS_CACHE="$TETRIS_CACHE/csi-sanity-5.2.0"
CS_BIN="$CS_CACHE/bin/csi-sanity"

done_ok() {
    echo "$CS_BIN"
    exit 0
}
[ -x "$CS_BIN" ] && done_ok

if [ ! -f "$SRC/$TARBALL" ]; then
    log "event=no-csi-test-source dir=$SRC want=$TARBALL"
    exit 3
fi

# One build at a time: a second caller waits, then finds the binary.
mkdir -p "$CS_CACHE"
exec 9>"$CS_CACHE/.build.lock"
flock 9
[ -x "$CS_BIN" ] && done_ok

apt_require golang-go ca-certificates
work="$CS_CACHE/src"
rm -rf "$work"
mkdir -p "$work" "$CS_CACHE/bin"
tar -xzf "$SRC/$TARBALL" -C "$work"
dir="$work/csi-test-5.2.0"
[ -f "$dir/go.mod" ] || die "event=bad-tarball file=$TARBALL want=csi-test-5.2.0/go.mod"
log "event=go-build what=csi-sanity dir=$dir"
(cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=vendor GOPROXY=off \
    GOCACHE="$CS_CACHE/go-cache" GOPATH="$CS_CACHE/gopath" \
    go build -o "$CS_BIN.tmp" ./cmd/csi-sanity) >"$CS_CACHE/build.log" 2>&1 ||
    die "event=go-build-failed what=csi-sanity log=$CS_CACHE/build.log"
mv "$CS_BIN.tmp" "$CS_BIN"
rm -rf "$work" "$CS_CACHE/gopath"
log "event=built path=$CS_BIN"
done_ok
