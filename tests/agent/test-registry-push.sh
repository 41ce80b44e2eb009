#!/bin/sh
# tetris-registry push against a real registry (docker-registry on
# loopback): the artifact's tensor layers are the model's distinct tensors,
# each blob's SHA-256 is the tensor's identity, a second push sends nothing,
# a variant sends only the blobs the registry lacks (bytes counted against
# the two manifests), a mount from another repository sends nothing, and a
# REF whose digest is not the artifact's is refused before anything is sent.
set -eu
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/registry.sh"
need_models
registry_start
push="$BIN/tetris-registry"
base="$MODELS/hello_deepa.onnx"
variant="$MODELS/hello_deepa_old.onnx"
host=$REGISTRY_HOST

out=$("$push" push "$base" "oci://$host/models/hello:v1" 2>"$WORK/push1.log") ||
    fail "push: $(cat "$WORK/push1.log")"
[ "$(json_get "$out" uploaded)" = "$(json_get "$out" blobs)" ] || fail "first push: $out"
[ "$(json_get "$out" present)" = 0 ] || fail "first push found blobs: $out"

curl -sf -H "$REGISTRY_ACCEPT" "$REGISTRY/v2/models/hello/manifests/v1" >"$WORK/v1.json" ||
    fail "no manifest v1"
jq -e '.artifactType == "application/vnd.tetris.model.v1" and
       .config.mediaType == "application/vnd.tetris.manifest.v1+json"' "$WORK/v1.json" \
    >/dev/null || fail "not our artifact: $(cat "$WORK/v1.json")"
# The tensor layers are the model's distinct identities.
"$BIN/tetris-agent" index "$base" -o "$WORK/base.manifest" 2>/dev/null
jq -r '.tensors[].digest' "$WORK/base.manifest" | sort -u >"$WORK/want"
jq -r '.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1") | .digest' \
    "$WORK/v1.json" | sort >"$WORK/got"
cmp -s "$WORK/want" "$WORK/got" || fail "tensor layers are not the model's identities"
# A blob's SHA-256 is its tensor's identity.
d=$(head -1 "$WORK/got")
sum=$(curl -sf "$REGISTRY/v2/models/hello/blobs/$d" | sha256sum | cut -d' ' -f1)
[ "sha256:$sum" = "$d" ] || fail "blob $d hashes to $sum"

out=$("$push" push "$base" "oci://$host/models/hello:v1" 2>/dev/null) || fail "second push"
[ "$(json_get "$out" uploaded)" = 0 ] || fail "second push uploaded: $out"
[ "$(json_get "$out" present)" = "$(json_get "$out" blobs)" ] || fail "second push: $out"

# The variant: only the blobs v1 lacks, byte for byte.
out=$("$push" push "$variant" "oci://$host/models/hello:old" 2>/dev/null) || fail "variant push"
curl -sf -H "$REGISTRY_ACCEPT" "$REGISTRY/v2/models/hello/manifests/old" >"$WORK/old.json"
want=$(jq -s '([.[0].config, .[0].layers[]] | map({(.digest): .size}) | add) as $have |
              [.[1].config, .[1].layers[]] | unique_by(.digest) |
              map(select($have[.digest] == null) | .size) | add // 0' \
       "$WORK/v1.json" "$WORK/old.json")
[ "$(json_get "$out" uploaded_bytes)" = "$want" ] ||
    fail "variant sent $(json_get "$out" uploaded_bytes) bytes, not the $want it lacked: $out"
[ "$(json_get "$out" present)" -gt 0 ] || fail "the variant shares nothing: $out"

# Another repository mounts every blob from the first.
out=$("$push" push --from models/hello --chunk-size 4096 "$base" "oci://$host/other/hello:v1" \
      2>/dev/null) || fail "mount push"
[ "$(json_get "$out" mounted)" = "$(json_get "$out" blobs)" ] || fail "not mounted: $out"
[ "$(json_get "$out" uploaded)" = 0 ] || fail "mount push uploaded: $out"

# Chunked upload of a new model.
out=$("$push" push --chunk-size 4096 "$MODELS/silero_vad_v5.onnx" "oci://$host/vad:v5" \
      2>/dev/null) || fail "chunked push"
[ "$(json_get "$out" uploaded)" = "$(json_get "$out" blobs)" ] || fail "chunked: $out"

# A digest that is not the artifact's: usage error, nothing sent.
zero=sha256:0000000000000000000000000000000000000000000000000000000000000000
[ "$(status "$push" push "$base" "oci://$host/pinned@$zero")" = 2 ] || fail "wrong digest accepted"
grep -q "not the one named" "$WORK/status.err" || fail "message: $(cat "$WORK/status.err")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$REGISTRY/v2/pinned/tags/list")" = 404 ] ||
    fail "the pinned push reached the registry"
[ "$(status "$push" push "$base" "oci://$host/Bad")" = 2 ] || fail "bad REF accepted"
[ "$(status "$push" push "$WORK/missing.onnx" "oci://$host/x:y")" = 3 ] || fail "missing model"
"$push" push --help | grep -q -- "--from" || fail "--help"
echo "PASS $PROG"
