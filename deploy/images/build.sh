#!/bin/sh
# build.sh - the project's OCI image: every program in a bin directory, the
# shared libraries they load and libonnxruntime, in /usr/local/{bin,lib},
# /bin/sh, the system's CA bundle, and the library stock onnxruntime-node runs, under
# /opt/tetris/runtimes/ (for the daemon's --derive-runtimes). Its entrypoint is tetris-function listening on :8080
# (TETRIS_PORT), so OpenFaaS (faas-netes sets no command) runs it as a
# function; every other use names its program as the container's command.
# Packed with umoci (scripts/cluster/pack-image.sh); when the local cluster
# runs, imported into its containerd. Skips the work when the inputs have not
# changed since the last import.
#
# A function image needs no weights when its model is in a registry
# (tetris-registry push): -r packs tetris-function alone and names the
# model by its reference (TETRIS_MODEL_REF in the image's environment);
# the node's daemon pulls the tensors its store lacks when the function
# starts (docs/OPENFAAS.md, "Models from a registry"). With -m too, the
# file is the fallback should the pull fail.
#
# Usage: deploy/images/build.sh [-b BIN_DIR] [-n NAME[:TAG]] [-m MODEL]...
#                               [-r oci://HOST:PORT/REPO[:TAG|@sha256:HEX]]
#                               [-o OUT.tar]
#   -b  programs to pack (default: bin/ of the source tree)
#   -n  image reference (default tetris:latest)
#   -m  a model file, packed as /models/<its name> (for OpenFaaS functions,
#       which cannot mount one)
#   -r  the model's registry reference: the image holds tetris-function
#       (of BIN_DIR) and no weights, TETRIS_MODEL_REF=REF in its environment
#   -o  write the OCI archive here instead of importing it
# Exit status: 0 image ready, 1 failure, 2 usage.
set -eu
PROG=image-build
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
. "$ROOT/scripts/cluster/common.sh"

bin_dir="$ROOT/bin" name="tetris:latest" out="" models="" ref=""
while getopts b:n:m:r:o: opt; do
    case "$opt" in
    b) bin_dir="$OPTARG" ;;
    n) name="$OPTARG" ;;
    m)
        [ -f "$OPTARG" ] || die "event=missing-model path=$OPTARG"
        models="$models $OPTARG"
        ;;
    r)
        case "$OPTARG" in
        oci://?*/?*) ref="$OPTARG" ;;
        *) die "event=bad-reference ref=$OPTARG hint=\"oci://HOST:PORT/REPO[:TAG|@sha256:HEX]\"" ;;
        esac
        ;;
    o) out="$OPTARG" ;;
    *) sed -n '/^# Usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done

case "$name" in *:*) ;; *) name="$name:latest" ;; esac

ort="$ROOT/.deps/onnxruntime/lib/libonnxruntime.so.1"
[ -f "$ort" ] || die "event=missing-onnxruntime path=$ort hint=\"run make deps\""
# Every program, or for a function of a pulled model the program alone.
if [ -n "$ref" ]; then
    [ -x "$bin_dir/tetris-function" ] ||
        die "event=missing-program path=$bin_dir/tetris-function hint=\"run make\""
    set -- "$bin_dir/tetris-function"
else
    set -- "$bin_dir"/*
fi
for p; do
    shift
    [ -f "$p" ] && [ -x "$p" ] && set -- "$@" -x "$p"
done
[ $# -gt 0 ] || die "event=no-programs dir=$bin_dir hint=\"run make\""
set -- "$@" -f "$ort:/usr/local/lib/libonnxruntime.so.1"
# The node daemon's image also carries the ONNX Runtime that stock
# onnxruntime-node runs, for --derive-runtimes (the chart's
# reclaimer.deriveRuntimes): Node.js functions then map forms made by
# their own runtime. A file the daemon runs code from, so root's alone.
node_ort=""
for lib in "$ROOT"/.deps/node_modules/onnxruntime-node/bin/napi-v*/linux/x64/libonnxruntime.so.1; do
    if [ -f "$lib" ]; then node_ort=$lib; fi
done
node_ort_version=$(sed -n 's/^ *"version": *"\([0-9.]*\)".*/\1/p' \
    "$ROOT/.deps/node_modules/onnxruntime-node/package.json" 2>/dev/null | head -n 1)
if [ -z "$ref" ] && [ -n "$node_ort" ] && [ -n "$node_ort_version" ]; then
    node_ort_dest=/opt/tetris/runtimes/onnxruntime-node-$node_ort_version/libonnxruntime.so.1
    set -- "$@" -f "$node_ort:$node_ort_dest"
else
    node_ort=""
fi
# libonnxruntime popen()s a shell while creating a session and crashes on a
# NULL dereference when there is none.
set -- "$@" -x /bin/sh:/bin/sh -x "$(command -v hostname):/bin/hostname"
# The CAs that verify a registry's TLS certificate where libcurl looks for
# them: without the bundle every https request fails before its handshake
# (reclaimer.registryCA adds a private CA).
cas=/etc/ssl/certs/ca-certificates.crt
[ -f "$cas" ] || die "event=missing-ca-bundle path=$cas hint=\"apt-get install ca-certificates\""
set -- "$@" -f "$cas:$cas"
for m in $models; do set -- "$@" -f "$m:/models/$(basename "$m")"; done
# Config, not files: part of what decides whether to import again.
config="-e /usr/local/bin/tetris-function -E TETRIS_PORT=8080${ref:+ -E TETRIS_MODEL_REF=$ref}"
# shellcheck disable=SC2086 # config is words
set -- "$@" $config

if [ -n "$out" ]; then
    exec "$ROOT/scripts/cluster/pack-image.sh" -n "$name" "$@" -o "$out"
fi

# Import only when the programs or the runtime changed.
stamp="$CLUSTER_DIR/images/$(echo "$name" | tr '/:' '__').sha256"
mkdir -p "$CLUSTER_DIR/images"
# shellcheck disable=SC2086 # models is words
sum="$( (if [ -n "$ref" ]; then cat "$bin_dir/tetris-function"; else cat "$bin_dir"/*; fi
        cat "$ort" $node_ort "$cas" $models; echo "$config") | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ] &&
    ctr --address "$CLUSTER_DIR/containerd/containerd.sock" -n k8s.io images ls -q |
    grep -qE "(^|/)$name\$"; then
    log "event=image-current image=$name"
    exit 0
fi
"$ROOT/scripts/cluster/pack-image.sh" -n "$name" "$@" -i
echo "$sum" >"$stamp"
