#!/bin/sh
# build-kube.sh - builds kube-apiserver, kube-scheduler, kubelet and
# kube-controller-manager (deployments, daemonsets, jobs, garbage collection) from
# Debian's `kubernetes` source package with Debian's Go, once, into
# $TETRIS_CACHE/kubernetes-<version>/bin. Later runs find them and return.
#
# Debian ships the source but no apiserver binary. The deb-src entry apt needs
# is derived at run time from the machine's own deb entries, so no mirror
# address lives in the repo. The vendored reflect2 (v1.0.1) breaks under
# Go >= 1.18 (the apiserver panics decoding JSON maps); Debian's 1.0.2 replaces it.
#
# Binaries are checked one by one: only the missing ones are built.
#
# Exit status: 0 binaries present, 1 build failed.
set -eu
PROG=build-kube
. "$(dirname "$0")/common.sh"

BINARIES="kube-apiserver kube-scheduler kubelet kube-controller-manager"

missing_binaries() {
    for b in $BINARIES; do [ -x "$KUBE_BIN/$b" ] || printf '%s ' "$b"; done
}
have_all() {
    [ -z "$(missing_binaries)" ] && [ -f "$KUBE_CACHE/pause/pause.c" ]
}
have_all && exit 0

# One build at a time, whoever asks: a second caller waits, then finds the
# binaries the first one built.
mkdir -p "$KUBE_CACHE"
exec 9>"$KUBE_CACHE/.build.lock"
flock 9
have_all && exit 0

apt_require $GO_BUILD_PACKAGES

# A private apt configuration whose only source list is the deb-src twin of
# the machine's debian.sources: the system's apt setup stays untouched.
APT_DIR="$KUBE_CACHE/apt"
mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/sources.list.d" "$KUBE_CACHE/src"
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
        >"$APT_DIR/sources.list.d/debian-src.sources"
elif [ -f /etc/apt/sources.list ]; then
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >"$APT_DIR/sources.list.d/debian-src.list"
else
    die "event=no-apt-sources want=/etc/apt/sources.list.d/debian.sources"
fi
cat >"$APT_DIR/apt.conf" <<CONF
Dir::Etc::SourceList "/dev/null";
Dir::Etc::SourceParts "$APT_DIR/sources.list.d";
Dir::State::Lists "$APT_DIR/lists";
APT::Sandbox::User "root";
CONF
export APT_CONFIG="$APT_DIR/apt.conf"

cd "$KUBE_CACHE/src"
# Debian versions it "1.20.5+really1.20.2": the tree inside is 1.20.2.
if ! ls kubernetes_*.orig.tar.* >/dev/null 2>&1; then
    log "event=apt-source package=kubernetes"
    apt-get update -qq || die "event=apt-update-failed"
    apt-get source --download-only -qq kubernetes >/dev/null ||
        die "event=apt-source-failed"
fi
orig="$(ls kubernetes_*.orig.tar.* | head -1)"

# Build in a fresh tree each time: a half-built tree from a killed run is
# not worth trusting.
rm -rf "$KUBE_CACHE/build"
mkdir -p "$KUBE_CACHE/build"
tar xf "$orig" -C "$KUBE_CACHE/build"
tree="$KUBE_CACHE/build/kubernetes-$KUBE_VERSION"
[ -d "$tree/vendor" ] || die "event=bad-source-tree dir=$tree"

reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
rm -rf "$tree/vendor/github.com/modern-go/reflect2"
cp -r "$reflect2" "$tree/vendor/github.com/modern-go/reflect2"
rm -f "$tree/vendor/github.com/modern-go/reflect2/go.mod"
find "$tree/vendor/github.com/modern-go/reflect2" -name '*_test.go' -delete

# Debian's rules: a GOPATH workspace pointing at the source root.
mkdir -p "$tree/.go/src/k8s.io"
ln -sfn "$tree" "$tree/.go/src/k8s.io/kubernetes"
missing="$(missing_binaries)"
what=""
for b in $missing; do what="$what cmd/$b"; done
log "event=build-start what=\"$missing\" dir=$tree"
[ -z "$what" ] || (
    cd "$tree/.go/src/k8s.io/kubernetes"
    export GOPATH="$tree/.go" CGO_ENABLED=0 GOCACHE="$KUBE_CACHE/gocache" \
        HOME="$KUBE_CACHE/home"
    mkdir -p "$HOME"
    make WHAT="$what" >"$KUBE_CACHE/build.log" 2>&1
) || die "event=build-failed log=$KUBE_CACHE/build.log"

# Each binary appears under its final name only when complete.
mkdir -p "$KUBE_BIN" "$KUBE_CACHE/pause"
for b in $missing; do
    cp "$tree/_output/bin/$b" "$KUBE_BIN/$b.tmp"
    mv "$KUBE_BIN/$b.tmp" "$KUBE_BIN/$b"
done
# The pause container's source comes with the same tree.
cp "$tree/build/pause/linux/pause.c" "$KUBE_CACHE/pause/pause.c"
rm -rf "$KUBE_CACHE/build" "$KUBE_CACHE/gocache"
log "event=build-done dir=$KUBE_BIN"
