#!/bin/sh
# test-openfaas-models.sh - every model in .deps/models answers Open
# Inference Protocol requests through the real OpenFaaS CE gateway with
# exactly the outputs of a private run. One tetris-function image carries
# all models (deploy/images/build.sh -m ... -m ...); a function per model
# is deployed with POST /system/functions (TETRIS_MODEL selects it), all at
# once so that their pods start together; each is sent tetris-onnx-run's
# seeded request through $GW/function/NAME/v2/models/NAME/infer as JSON and
# in the binary tensor data extension (binary outputs asked for), each
# answer's output bytes hashed and compared with `tetris-onnx-run --private
# --seed N`; then all are deleted (DELETE /system/functions) and nothing of
# any is left. The
# functions run without the store (no annotation: private weights): what
# is checked is the protocol through OpenFaaS for every model's inputs and
# outputs; sharing through OpenFaaS is test-openfaas.sh's and
# test-openfaas-docs.sh's. SKIPs where the OpenFaaS sources and binaries
# are both absent.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
k8s_release_only tetris-function
need_models
k8s_openfaas_bin
k8s_cluster_up
k8s_namespace openfaas-fn
ns="$K8S_NS"
work="$WORK"

set --
for m in "$MODELS"/*.onnx; do set -- "$@" -m "$m"; done
[ $# -ge 2 ] || fail "no models in $MODELS"
image=tetris-openfaas-models:latest
"$ROOT/deploy/images/build.sh" -b "$BIN" -n "$image" "$@" 2>"$work/image.log" ||
    fail "function image: $(tail -3 "$work/image.log")"

k8s_openfaas "$ns"
gw="$OF_GW"

seed=11
# deploy FN FILE: POST /system/functions for the model FILE
deploy() {
    curl -fsS --max-time 30 -X POST "$gw/system/functions" -H 'Content-Type: application/json' \
        --data-binary @- >"$work/$1.deploy" 2>&1 <<JSON || fail "$2: deploy: $(cat "$work/$1.deploy")"
{"service": "$1", "image": "$image", "namespace": "$ns",
 "envVars": {"TETRIS_MODEL": "/models/$2", "TETRIS_MODEL_NAME": "$1"},
 "labels": {"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"},
 "constraints": ["kubernetes.io/hostname=$NODE_NAME"]}
JSON
}

# ---- every function deployed at once ----
n=0
for m in "$MODELS"/*.onnx; do
    n=$((n + 1))
    deploy "model-$n" "$(basename "$m")"
done

# ---- each answers as the private run ----
n=0
for m in "$MODELS"/*.onnx; do
    file="$(basename "$m")"
    n=$((n + 1))
    fn="model-$n"
    "$BIN/tetris-onnx-run" "$m" --private --seed "$seed" --oip-request "$work/$fn.json" >"$work/$fn.run" ||
        fail "$file: tetris-onnx-run --private failed"
    want="$(jq -r .sha256 "$work/$fn.run")"
    hl="$("$ROOT/tests/function/oip_tool.py" binary "$work/$fn.json" "$work/$fn.bin" --binary-outputs)" ||
        fail "$file: cannot make the binary request"
    kc -n "$ns" rollout status "deployment/$fn" --timeout="${K8S_TIMEOUT}s" >/dev/null 2>&1 ||
        fail "$file: $fn never became ready: $(kc -n "$ns" get pods -l "faas_function=$fn" -o wide 2>&1 | tail -2)"
    url="$gw/function/$fn/v2/models/$fn/infer"
    # The gateway answers 502/503 until its provider sees the endpoint.
    wait_until 60 "curl -fsS --max-time 5 -o /dev/null $gw/function/$fn/v2/models/$fn" ||
        fail "$file: the gateway never reached $fn"
    curl -fsS --max-time 60 --data-binary @"$work/$fn.json" "$url" >"$work/$fn.answer.json" ||
        fail "$file: JSON request failed: $(head -c 300 "$work/$fn.answer.json")"
    got="$("$ROOT/tests/function/oip_tool.py" hash "$work/$fn.answer.json")" || fail "$file: malformed JSON answer"
    [ "$got" = "$want" ] || fail "$file: JSON answer hashes to $got, the private run to $want"
    curl -fsS --max-time 60 -D "$work/$fn.headers" -H "Inference-Header-Content-Length: $hl" \
        -H 'Content-Type: application/octet-stream' --data-binary @"$work/$fn.bin" "$url" \
        >"$work/$fn.answer.bin" || fail "$file: binary request failed: $(head -c 300 "$work/$fn.answer.bin")"
    rhl="$(tr -d '\r' <"$work/$fn.headers" | awk -F': ' 'tolower($1) == "inference-header-content-length" { print $2 }')"
    [ -n "$rhl" ] || fail "$file: the binary answer has no Inference-Header-Content-Length"
    got="$("$ROOT/tests/function/oip_tool.py" hash "$work/$fn.answer.bin" "$rhl")" || fail "$file: malformed binary answer"
    [ "$got" = "$want" ] || fail "$file: binary answer hashes to $got, the private run to $want"
    echo "ok $file: JSON and binary answers through the gateway equal the private run ($want)"
done

# ---- all deleted: nothing of any is left ----
i=0
while [ "$i" -lt "$n" ]; do
    i=$((i + 1))
    curl -fsS --max-time 30 -X DELETE "$gw/system/functions" -H 'Content-Type: application/json' \
        -d "{\"functionName\": \"model-$i\"}" >/dev/null || fail "model-$i: delete failed"
done
i=0
while [ "$i" -lt "$n" ]; do
    i=$((i + 1))
    fn="model-$i"
    kc -n "$ns" wait --for=delete "deployment/$fn" "service/$fn" --timeout="${K8S_TIMEOUT}s" >/dev/null 2>&1 ||
        fail "$fn's Deployment or Service outlived its deletion"
    kc -n "$ns" wait --for=delete pod -l "faas_function=$fn" --timeout="${K8S_TIMEOUT}s" >/dev/null 2>&1 ||
        fail "$fn's pod outlived its deletion"
    left="$(kc -n "$ns" get deployments,replicasets,services,pods -l "faas_function=$fn" -o name)"
    [ -z "$left" ] || fail "$fn left $left behind"
done
echo "ok all $n models; every function deleted, nothing left"
