#!/bin/sh
# pack-image.sh - packs executables, with every shared library ldd lists for
# them, and plain files into a one-layer OCI image with umoci; optionally
# imports it into the local cluster's containerd (namespace k8s.io, the one
# the kubelet uses), where pods find it with imagePullPolicy: Never.
#
# Usage: pack-image.sh -n NAME[:TAG] [-e ENTRYPOINT]... [-E KEY=VALUE]...
#                      [-x EXE[:DEST]]... [-f SRC:DEST]... [-o OUT.tar] [-i]
#   -n  image reference, e.g. tetris:latest (stored as docker.io/library/...)
#   -e  entrypoint path inside the image; repeated, its arguments
#   -E  environment variable of the image (besides PATH)
#   -x  executable; DEST defaults to /usr/local/bin/<name>
#   -f  file or directory copied to DEST
#   -o  also keep the OCI archive here
#   -i  import into containerd at $TETRIS_CLUSTER_DIR/containerd/containerd.sock
# Exit status: 0 packed (and imported), 1 failure, 2 usage.
set -eu
PROG=pack-image
. "$(dirname "$0")/common.sh"

usage() {
    sed -n '/^# Usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

name="" entrypoint="" env="" out="" import=0
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs/tmp" "$rootfs/etc" "$rootfs/usr/local/bin"
chmod 1777 "$rootfs/tmp"

# copy_path SRC DEST: SRC (symlinks followed) to DEST inside the rootfs.
copy_path() {
    [ -e "$1" ] || die "event=missing-file path=$1"
    mkdir -p "$rootfs$(dirname "$2")"
    cp -rL "$1" "$rootfs$2"
}

# add_executable EXE DEST: EXE plus the libraries the dynamic loader maps
# for it. System libraries keep their paths; any other (a build's rpath, a
# cache) goes to /usr/local/lib, next to /usr/local/bin's $ORIGIN/../lib.
add_executable() {
    copy_path "$1" "$2"
    deps="$(ldd "$1" 2>&1)" || return 0 # static: nothing more to copy
    if echo "$deps" | grep -q 'not found'; then
        die "event=missing-library exe=$1 detail=\"$(echo "$deps" | grep 'not found' | tr '\n' ' ')\""
    fi
    for lib in $(echo "$deps" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
        case "$lib" in
        /lib/* | /lib64/* | /usr/lib/*) dest="$lib" ;;
        *) dest="/usr/local/lib/$(basename "$lib")" ;;
        esac
        [ -e "$rootfs$dest" ] || copy_path "$lib" "$dest"
    done
}

while getopts n:e:E:x:f:o:i opt; do
    case "$opt" in
    n) name="$OPTARG" ;;
    e) entrypoint="$entrypoint $OPTARG" ;;
    E)
        case "$OPTARG" in *=*) ;; *) usage ;; esac
        env="$env $OPTARG"
        ;;
    x)
        src="${OPTARG%%:*}"
        dest="${OPTARG#*:}"
        [ "$dest" = "$OPTARG" ] && dest="/usr/local/bin/$(basename "$src")"
        add_executable "$src" "$dest"
        ;;
    f)
        case "$OPTARG" in *:/*) ;; *) usage ;; esac
        copy_path "${OPTARG%%:*}" "${OPTARG#*:}"
        ;;
    o) out="$OPTARG" ;;
    i) import=1 ;;
    *) usage ;;
    esac
done
[ -n "$name" ] || usage
[ $OPTIND -gt $# ] || usage

# Split NAME into repository and tag and spell the repository the way the
# kubelet normalises image names (docker.io/library/x, localhost/x, ...).
repo="$name" tag=latest
case "${name##*/}" in *:*) repo="${name%:*}" tag="${name##*:}" ;; esac
case "$repo" in */*) first="${repo%%/*}" ;; *) first="" ;; esac
case "$first" in
"") repo="docker.io/library/$repo" ;;
*.* | *:* | localhost) ;;
*) repo="docker.io/$repo" ;;
esac

printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
# The image's own loader cache, so libraries resolve without the host's.
triplet="$(gcc -print-multiarch)"
printf '/usr/local/lib\n/lib/%s\n/usr/lib/%s\n' "$triplet" "$triplet" >"$rootfs/etc/ld.so.conf"
ldconfig -r "$rootfs" 2>/dev/null || die "event=ldconfig-failed"

# The layer is GNU tar's: umoci 0.4.7's own walker (umoci insert) truncates
# large files such as libonnxruntime.
tar --numeric-owner --owner=0 --group=0 -C "$rootfs" -cf "$work/layer.tar" .
img="$work/oci:$tag"
umoci init --layout "$work/oci"
umoci new --image "$img"
umoci raw add-layer --image "$img" "$work/layer.tar"
set -- --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.workingdir /
# shellcheck disable=SC2086 # entrypoint is words
for word in $entrypoint; do set -- "$@" --config.entrypoint "$word"; done
for kv in $env; do set -- "$@" --config.env "$kv"; done
umoci config --image "$img" "$@"
umoci gc --layout "$work/oci"
tar -C "$work/oci" -cf "$work/image.tar" .
[ -n "$out" ] && cp "$work/image.tar" "$out"

if [ "$import" = 1 ]; then
    ctr --address "$CLUSTER_DIR/containerd/containerd.sock" -n k8s.io images import \
        --base-name "$repo" --snapshotter native "$work/image.tar" >/dev/null ||
        die "event=import-failed image=$repo:$tag"
fi
log "event=image-packed image=$repo:$tag imported=$import bytes=$(stat -c %s "$work/image.tar")"
