#!/bin/sh
# build-template.sh - an OpenFaaS function image from a template and the
# user's handler: Node.js (node from Debian, function/node/ with stock
# onnxruntime-node from the npm cache; the handler is DIR/handler.js) or
# Python (python3 and numpy from Debian, the package python/tetris/; the
# handler is DIR/handler.py, served by `python3 -m tetris.template`). Its
# entrypoint is `tetris-agent exec -- <the template's server>`: the wrapper
# loads the model through the node's tensor store (TETRIS_MODEL,
# TETRIS_STORE and TETRIS_MANIFEST, as the webhook sets them), writes the
# model view and runs the server with TETRIS_MODEL_VIEW, which listens on
# :8080 (TETRIS_PORT). DIR's files are copied into /function beside the
# template's own (which win). Packed with umoci
# (scripts/cluster/pack-image.sh); when the local cluster runs, imported
# into its containerd. Skips the work when the inputs have not changed
# since the last import.
#
# Usage: deploy/images/build-template.sh -l node|python -d DIR -n NAME[:TAG]
#                                        [-b BIN_DIR] [-m MODEL]... [-r REF]
#                                        [-o OUT.tar]
#   -l  the template's language
#   -d  the function's folder, holding handler.js or handler.py
#   -n  image reference
#   -b  where tetris-agent is (default: bin/ of the source tree)
#   -m  a model file, packed as /models/<its name>
#   -r  the model's registry reference (oci://HOST:PORT/REPO[:TAG|@sha256:HEX]),
#       TETRIS_MODEL_REF in the image's environment: the wrapper has the
#       node's daemon pull it, so the image needs no weights (with -m too,
#       the file is the fallback should the pull fail)
#   -o  write the OCI archive here instead of importing it
# Exit status: 0 image ready, 1 failure, 2 usage.
set -eu
PROG=image-build
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
. "$ROOT/scripts/cluster/common.sh"

usage() {
    sed -n '/^# Usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

lang="" dir="" name="" bin_dir="$ROOT/bin" out="" models="" ref=""
while getopts l:d:n:b:m:r:o: opt; do
    case "$opt" in
    l) lang="$OPTARG" ;;
    d) dir="$OPTARG" ;;
    n) name="$OPTARG" ;;
    b) bin_dir="$OPTARG" ;;
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
    *) usage ;;
    esac
done
[ -n "$lang" ] && [ -n "$dir" ] && [ -n "$name" ] && [ $OPTIND -gt $# ] || usage
case "$name" in *:*) ;; *) name="$name:latest" ;; esac
agent="$bin_dir/tetris-agent"
[ -x "$agent" ] || die "event=missing-program path=$agent hint=\"run make\""

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/function"
# The user's files first, the template's over them.
cp -rL "$dir/." "$stage/function/"
set -- -x "$agent" -x /bin/sh:/bin/sh -E TETRIS_PORT=8080 -e /usr/local/bin/tetris-agent -e exec -e --
case "$lang" in
node)
    [ -f "$dir/handler.js" ] || die "event=missing-handler path=$dir/handler.js"
    node="$(command -v node)" || die "event=missing-node hint=\"apt-get install nodejs\""
    nm="$ROOT/.deps/node_modules"
    [ -d "$nm/onnxruntime-node" ] || die "event=missing-onnxruntime-node path=$nm hint=\"run make deps\""
    cp "$ROOT"/function/node/index.js "$ROOT"/function/node/oip.js "$ROOT"/function/node/tetris-view.js \
        "$ROOT"/function/node/view-session.js \
        "$ROOT"/function/node/package.json "$stage/function/"
    # onnxruntime-node with its linux x64 binding only (the package holds
    # every platform's), and the one package it requires.
    ort="$stage/function/node_modules/onnxruntime-node"
    mkdir -p "$ort/bin/napi-v6/linux"
    cp -rL "$nm/onnxruntime-node/package.json" "$nm/onnxruntime-node/dist" "$ort/"
    cp -rL "$nm/onnxruntime-node/bin/napi-v6/linux/x64" "$ort/bin/napi-v6/linux/"
    cp -rL "$nm/onnxruntime-common" "$stage/function/node_modules/"
    set -- "$@" -x "$node:/usr/bin/node" -e /usr/bin/node -e /function/index.js
    ;;
python)
    [ -f "$dir/handler.py" ] || die "event=missing-handler path=$dir/handler.py"
    py="$(readlink -f /usr/bin/python3)"
    ver="$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    numpy="$(/usr/bin/python3 -c 'import numpy, os; print(os.path.dirname(numpy.__file__))')" ||
        die "event=missing-numpy hint=\"apt-get install python3-numpy\""
    mkdir -p "$stage/stdlib" "$stage/tetris"
    # The standard library without its tests, IDLE and Tk.
    tar -C "/usr/lib/python$ver" --exclude=test --exclude=tests --exclude=idlelib --exclude=tkinter \
        --exclude=turtledemo --exclude=__pycache__ --exclude="config-*" -cf - . | tar -C "$stage/stdlib" -xf -
    tar -C "$ROOT/python" --exclude=__pycache__ -cf - tetris | tar -C "$stage/tetris" -xf -
    set -- "$@" -x "$py:/usr/bin/python3" -f "$stage/stdlib:/usr/lib/python$ver" \
        -f "$numpy:/usr/lib/python3/dist-packages/numpy" -f "$stage/tetris/tetris:/opt/tetris/python/tetris"
    # numpy's extension modules, with the libraries they load (OpenBLAS).
    for so in $(find "$numpy" -name '*.so'); do set -- "$@" -x "$so:$so"; done
    numpy_libs="$(dirname "$numpy")/numpy.libs"
    [ -d "$numpy_libs" ] && set -- "$@" -f "$numpy_libs:$numpy_libs"
    set -- "$@" -E PYTHONPATH=/opt/tetris/python -E TETRIS_HANDLER=/function/handler.py \
        -E PYTHONDONTWRITEBYTECODE=1 -e /usr/bin/python3 -e -m -e tetris.template
    ;;
*) usage ;;
esac
set -- "$@" -f "$stage/function:/function"
if [ "$lang" = node ]; then
    # After /function: the libraries ONNX Runtime loads (librt, ...).
    lib=/function/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1
    set -- "$@" -x "$stage$lib:$lib"
fi
for m in $models; do set -- "$@" -f "$m:/models/$(basename "$m")"; done
[ -z "$ref" ] || set -- "$@" -E "TETRIS_MODEL_REF=$ref"

if [ -n "$out" ]; then
    "$ROOT/scripts/cluster/pack-image.sh" -n "$name" "$@" -o "$out"
    exit 0
fi

# Import only when the inputs changed.
stamp="$CLUSTER_DIR/images/$(echo "$name" | tr '/:' '__').sha256"
mkdir -p "$CLUSTER_DIR/images"
# shellcheck disable=SC2086 # models is words
sum="$( (echo "$lang $ref"; cat "$agent" $models; tar -C "$stage" -cf - function tetris 2>/dev/null) |
    sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ] &&
    ctr --address "$CLUSTER_DIR/containerd/containerd.sock" -n k8s.io images ls -q |
    grep -qE "(^|/)$name\$"; then
    log "event=image-current image=$name"
    exit 0
fi
"$ROOT/scripts/cluster/pack-image.sh" -n "$name" "$@" -i
echo "$sum" >"$stamp"
