#!/bin/sh
# test-image-registry.sh - an OpenFaaS function image without weights:
# deploy/images/build.sh -r REF packs tetris-function alone (no other
# program, nothing under /models) with TETRIS_MODEL_REF=REF and
# TETRIS_PORT=8080 in its environment; the program run with only that
# environment and the store the webhook adds has the node's daemon pull
# the model from a real registry (docker-registry on loopback) and serves
# what a private run of the file computes. A reference that is not oci://
# is refused.
set -eu
. "$(dirname "$0")/../lib/function.sh"
. "$(dirname "$0")/../lib/registry.sh"
need_package umoci
model=silero_vad_v5.onnx
registry_start
host="127.0.0.1:$REGISTRY_PORT"
"$BIN/tetris-registry" push "$MODELS/$model" "oci://$host/models/vad:v5" >"$WORK/push.out" \
    2>"$WORK/push.log" || fail "push: $(cat "$WORK/push.log")"
ref="oci://$host/models/vad@$(jq -r .digest "$WORK/push.out")"

mkdir -p "$WORK/bin" "$WORK/oci"
cp "$BIN/tetris-function" "$BIN/tetris-agent" "$WORK/bin/"
"$ROOT/deploy/images/build.sh" -b "$WORK/bin" -n tetris-ref-test:latest -r "$ref" \
    -o "$WORK/image.tar" 2>"$WORK/build.log" || fail "build: $(cat "$WORK/build.log")"
tar -xf "$WORK/image.tar" -C "$WORK/oci"
manifest=$(jq -r '.manifests[0].digest' "$WORK/oci/index.json" | sed 's/^sha256://')
config=$(jq -r .config.digest "$WORK/oci/blobs/sha256/$manifest" | sed 's/^sha256://')
jq -e --arg r "TETRIS_MODEL_REF=$ref" '.config.Entrypoint == ["/usr/local/bin/tetris-function"] and
       (.config.Env | index("TETRIS_PORT=8080") != null) and (.config.Env | index($r) != null)' \
    "$WORK/oci/blobs/sha256/$config" >/dev/null ||
    fail "image config: $(jq -c .config "$WORK/oci/blobs/sha256/$config")"
: >"$WORK/files"
for layer in $(jq -r '.layers[].digest' "$WORK/oci/blobs/sha256/$manifest" | sed 's/^sha256://'); do
    tar -tzf "$WORK/oci/blobs/sha256/$layer" >>"$WORK/files" 2>/dev/null ||
        tar -tf "$WORK/oci/blobs/sha256/$layer" >>"$WORK/files"
done
grep -qx "./usr/local/bin/tetris-function" "$WORK/files" || fail "tetris-function not in the image"
! grep -q "^\./models" "$WORK/files" || fail "the image holds models: $(grep '^\./models' "$WORK/files")"
! grep -qx "./usr/local/bin/tetris-agent" "$WORK/files" || fail "the image holds other programs"
weights=$(stat -c %s "$MODELS/$model")
size=$(jq '[.layers[].size] | add' "$WORK/oci/blobs/sha256/$manifest")
echo "ok image: tetris-function, TETRIS_MODEL_REF, no /models ($size bytes packed; the model is $weights)"

[ "$(status "$ROOT/deploy/images/build.sh" -b "$WORK/bin" -n x -r "/models/$model" -o "$WORK/x.tar")" != 0 ] ||
    fail "a reference that is not oci:// was packed"
grep -q "event=bad-reference" "$WORK/status.err" || fail "bad reference: $(cat "$WORK/status.err")"

# The image's environment, the webhook's store, nothing else.
store="$WORK/store"
mkdir -p "$store"
reclaimer_start "$store" "$WORK/daemon.log" --listen 127.0.0.1:0 --interval 3600 --registries "$host"
port=$(free_port)
env -i PATH=/usr/bin:/bin TETRIS_PORT="$port" TETRIS_MODEL_REF="$ref" TETRIS_STORE="$store" \
    "$BIN/tetris-function" >"$WORK/ready" 2>"$WORK/fn.log" &
pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $pid"
wait_output $pid "$WORK/ready" "tetris-function" "$WORK/fn.log"
jq -e --arg r "$ref" '.model == $r and .mode == "store" and .fell_back == false and .shared_bytes > 0' \
    "$WORK/ready" >/dev/null || fail "ready line: $(cat "$WORK/ready")"
got=$(fn_post "http://127.0.0.1:$port" '{"seed":5}')
[ "$(printf '%s' "${got#* }" | jq -r .sha256)" = "$(want_sha "$MODELS/$model" 5)" ] ||
    fail "outputs differ from a private run: $got"
[ "$(metric_at "http://127.0.0.1:$RECLAIMER_PORT" tetris_pull_tensors_total)" -gt 0 ] ||
    fail "the daemon pulled nothing"
echo "ok the image's environment pulls the model and serves a private run's outputs"
echo "PASS $PROG"
