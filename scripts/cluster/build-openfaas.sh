#!/bin/sh
# build-openfaas.sh - builds OpenFaaS CE's faas-netes and gateway from their
# MIT-licensed 2023 source tarballs (vendor/ included) with Debian's Go,
# offline, once, into $TETRIS_CACHE/openfaas-<netes>-<gateway>/bin. Later runs
# find the binaries and return; the sources are then no longer needed.
#
# The tarballs are faas-netes-20ef99ef.tar.gz (openfaas/faas-netes at
# 20ef99ef27a4, go 1.18, client-go v0.22.2) and faas-gateway-c0d710c9.tar.gz
# (openfaas/faas at c0d710c97ff7, `gateway/` only, go 1.19): the last CE
# commits under the MIT licence that build with Go 1.19. Nothing is patched.
#
# Usage: scripts/cluster/build-openfaas.sh
# Environment:
#   TETRIS_OPENFAAS_SRC  folder holding the two tarballs
#                        (../shared/openfaas beside the repository)
#   TETRIS_CACHE         cache for the binaries ($HOME/.cache/tetris)
# Prints the folder holding faas-netes and gateway on stdout.
# Exit status: 0 binaries present, 1 build failed, 3 neither binaries nor
# sources (callers skip what needs OpenFaaS).
set -eu
PROG=build-openfaas
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
. "$ROOT/scripts/cluster/common.sh"

NETES_TAR=faas-netes-20ef99ef.tar.gz
GATEWAY_TAR=faas-gateway-c0d710c9.tar.gz
SRC="${TETRIS_OPENFAAS_SRC:-$ROOT/../shared/openfaas}"
OF_CACHE="$TETRIS_CACHE/openfaas-20ef99ef-c0d710c9"
OF_BIN="$OF_CACHE/bin"

have_all() { [ -x "$OF_BIN/faas-netes" ] && [ -x "$OF_BIN/gateway" ]; }
done_ok() {
    echo "$OF_BIN"
    exit 0
}
have_all && done_ok

if [ ! -f "$SRC/$NETES_TAR" ] || [ ! -f "$SRC/$GATEWAY_TAR" ]; then
    log "event=no-openfaas-source dir=$SRC want=\"$NETES_TAR $GATEWAY_TAR\""
    exit 3
fi

# One build at a time: a second caller waits, then finds the binaries.
mkdir -p "$OF_CACHE"
exec 9>"$OF_CACHE/.build.lock"
flock 9
have_all && done_ok

apt_require golang-go ca-certificates

# build_one TARBALL MODULE_DIR OUTPUT: an offline, vendored, static build of
# the Go module at MODULE_DIR inside TARBALL.
build_one() {
    _work="$OF_CACHE/src/${1%.tar.gz}"
    rm -rf "$_work"
    mkdir -p "$_work"
    tar -xzf "$SRC/$1" -C "$_work"
    _dir="$_work/$2"
    [ -f "$_dir/go.mod" ] || die "event=bad-tarball file=$1 want=$2/go.mod"
    log "event=go-build what=$3 dir=$_dir"
    (cd "$_dir" && CGO_ENABLED=0 GOFLAGS=-mod=vendor GOPROXY=off \
        GOCACHE="$OF_CACHE/go-cache" GOPATH="$OF_CACHE/gopath" \
        go build -o "$OF_BIN/$3.tmp" .) >"$OF_CACHE/build-$3.log" 2>&1 ||
        die "event=go-build-failed what=$3 log=$OF_CACHE/build-$3.log"
    mv "$OF_BIN/$3.tmp" "$OF_BIN/$3"
}

mkdir -p "$OF_BIN"
[ -x "$OF_BIN/faas-netes" ] || build_one "$NETES_TAR" faas-netes faas-netes
[ -x "$OF_BIN/gateway" ] || build_one "$GATEWAY_TAR" faas/gateway gateway
rm -rf "$OF_CACHE/src"
log "event=built dir=$OF_BIN"
done_ok
