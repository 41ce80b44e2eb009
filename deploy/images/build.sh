#!/bin/sh
# build.sh - the project's OCI image: every program in a bin directory, the
# shared libraries they load and libonnxruntime, in /usr/local/{bin,lib}, and
# /bin/sh. Its entrypoint is tetris-function listening on :8080
# (TETRIS_PORT), so OpenFaaS (faas-netes sets no command) runs it as a
# function; every other use names its program as the container's command.
# Packed with umoci (scripts/cluster/pack-image.sh); when the local cluster
# runs, imported into its containerd. Skips the work when the inputs have not
# changed since the last import.
#
# Usage: deploy/images/build.sh [-b BIN_DIR] [-n NAME[:TAG]] [-m MODEL]...
#                               [-o OUT.tar]
#   -b  programs to pack (default: bin/ of the source tree)
#   -n  image reference (default tetris:latest)
#   -m  a model file, packed as /models/<its name> (for OpenFaaS functions,
#       which cannot mount one)
#   -o  write the OCI archive here instead of importing it
# Exit status: 0 image ready, 1 failure, 2 usage.
set -eu
PROG=image-build
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
. "$ROOT/scripts/cluster/common.sh"

bin_dir="$ROOT/bin" name="tetris:latest" out="" models=""
while getopts b:n:m:o: opt; do
    case "$opt" in
    b) bin_dir="$OPTARG" ;;
    n) name="$OPTARG" ;;
    m)
        [ -f "$OPTARG" ] || die "event=missing-model path=$OPTARG"
        models="$models $OPTARG"
        ;;
    o) out="$OPTARG" ;;
    *) sed -n '/^# Usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done

case "$name" in *:*) ;; *) name="$name:latest" ;; esac

ort="$ROOT/.deps/onnxruntime/lib/libonnxruntime.so.1"
[ -f "$ort" ] || die "event=missing-onnxruntime path=$ort hint=\"run make deps\""
set --
for p in "$bin_dir"/*; do
    [ -f "$p" ] && [ -x "$p" ] && set -- "$@" -x "$p"
done
[ $# -gt 0 ] || die "event=no-programs dir=$bin_dir hint=\"run make\""
set -- "$@" -f "$ort:/usr/local/lib/libonnxruntime.so.1"
# libonnxruntime popen()s a shell while creating a session and crashes on a
# NULL dereference when there is none.
set -- "$@" -x /bin/sh:/bin/sh -x "$(command -v hostname):/bin/hostname"
for m in $models; do set -- "$@" -f "$m:/models/$(basename "$m")"; done
# Config, not files: part of what decides whether to import again.
config="-e /usr/local/bin/tetris-function -E TETRIS_PORT=8080"
# shellcheck disable=SC2086 # config is words
set -- "$@" $config

if [ -n "$out" ]; then
    exec "$ROOT/scripts/cluster/pack-image.sh" -n "$name" "$@" -o "$out"
fi

# Import only when the programs or the runtime changed.
stamp="$CLUSTER_DIR/images/$(echo "$name" | tr '/:' '__').sha256"
mkdir -p "$CLUSTER_DIR/images"
# shellcheck disable=SC2086 # models is words
sum="$( (cat "$bin_dir"/* "$ort" $models; echo "$config") | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ] &&
    ctr --address "$CLUSTER_DIR/containerd/containerd.sock" -n k8s.io images ls -q |
    grep -qE "(^|/)$name\$"; then
    log "event=image-current image=$name"
    exit 0
fi
"$ROOT/scripts/cluster/pack-image.sh" -n "$name" "$@" -i
echo "$sum" >"$stamp"
