#!/bin/sh
# test-openfaas-image.sh - the image as OpenFaaS runs it: faas-netes sets no
# command and no port, only environment, so the image's entrypoint must be
# tetris-function serving HTTP on :8080 (TETRIS_PORT in the image's config)
# on every address, with /_/health for its probes. Packs the image
# (deploy/images/build.sh -o, a model under /models), checks its config and
# files, then runs the program with no arguments and the environment
# OpenFaaS gives it (the port moved off 8080, which this machine may use).
set -eu
. "$(dirname "$0")/../lib/function.sh"
need_package umoci
model=silero_vad_v5.onnx

mkdir -p "$WORK/bin" "$WORK/oci"
cp "$BIN/tetris-function" "$WORK/bin/"
"$ROOT/deploy/images/build.sh" -b "$WORK/bin" -n tetris-openfaas-test:latest \
    -m "$MODELS/$model" -o "$WORK/image.tar" 2>"$WORK/build.log" || fail "build: $(cat "$WORK/build.log")"
tar -xf "$WORK/image.tar" -C "$WORK/oci"
manifest=$(jq -r '.manifests[0].digest' "$WORK/oci/index.json" | sed 's/^sha256://')
config=$(jq -r .config.digest "$WORK/oci/blobs/sha256/$manifest" | sed 's/^sha256://')
layer=$(jq -r '.layers[0].digest' "$WORK/oci/blobs/sha256/$manifest" | sed 's/^sha256://')
jq -e '.config.Entrypoint == ["/usr/local/bin/tetris-function"] and
       (.config.Env | index("TETRIS_PORT=8080") != null)' "$WORK/oci/blobs/sha256/$config" >/dev/null ||
    fail "image config: $(jq -c .config "$WORK/oci/blobs/sha256/$config")"
tar -tzf "$WORK/oci/blobs/sha256/$layer" >"$WORK/files" 2>/dev/null || tar -tf "$WORK/oci/blobs/sha256/$layer" >"$WORK/files"
grep -qx "./models/$model" "$WORK/files" || fail "/models/$model not in the image"
grep -qx "./usr/local/bin/tetris-function" "$WORK/files" || fail "tetris-function not in the image"

# No arguments; the environment of a faas-netes pod (fprocess only when
# given, the user's variables) plus the image's.
port=$(free_port)
env -i PATH=/usr/bin:/bin TETRIS_PORT="$port" TETRIS_MODEL="$MODELS/$model" \
    "$BIN/tetris-function" >"$WORK/ready" 2>"$WORK/fn.log" &
pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $pid"
wait_output $pid "$WORK/ready" "tetris-function" "$WORK/fn.log"
ss -Htln "sport = :$port" | awk '{ print $4 }' | grep -qE '^(\*|0\.0\.0\.0|\[::\]):' ||
    fail "not listening on every address: $(ss -Htln "sport = :$port")"
url="http://127.0.0.1:$port"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/_/health")" = 200 ] || fail "/_/health not 200"
got=$(fn_post "$url" '{"seed":5}')
[ "${got%% *}" = 200 ] || fail "POST /: $got"
[ "$(printf '%s' "${got#* }" | jq -r .sha256)" = "$(want_sha "$MODELS/$model" 5)" ] ||
    fail "outputs differ from tetris-onnx-run: $got"
echo "ok image runs as an OpenFaaS function: entrypoint, :\$TETRIS_PORT on every address, /_/health, outputs"
