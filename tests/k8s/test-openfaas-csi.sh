#!/bin/sh
# test-openfaas-csi.sh - functions deployed through the real OpenFaaS CE
# gateway get their model as tetris-csi's volume, on the local cluster's
# real kubelet, and serve from it as restricted pods:
#  1. tetris-webhook --volume csi, faas-netes run as OpenFaaS' chart runs it
#     with functions.setNonRootUser (every function container uid 12000);
#     a C function (tetris-function, the project's image), a Node.js and a
#     Python function (deploy/images/build-template.sh: `tetris-agent exec`
#     uses the view the platform mounted) deployed with
#     POST /system/functions; each admitted pod has the webhook's CSI volume
#     (read-only, the model the manifest names), no hostPath, and passes the
#     "restricted" profile's rules (tests/lib/pod_security.jq);
#  2. each answers Open Inference Protocol requests through the gateway
#     with exactly the outputs of a private run (C and Node.js: PaddleOCR's
#     recognition model, `tetris-onnx-run --private`; Python: the template's
#     perceptron over its safetensors file, computed on the host);
#  3. the store holds one copy of each model: the C and the Node.js
#     function map the same files of PP-OCRv4 rec (each one's PSS of them
#     about half its RSS), the two Python replicas those of the perceptron,
#     one kept holder per volume, and the C function says what it maps
#     (tetris_function_shared_tensor_bytes, through the gateway);
#  4. DELETE /system/functions unpublishes every volume: no volume, kept
#     holder or mount is left.
# The plugin and the node daemon run on this machine (as the chart's
# DaemonSet would, with the kubelet's directories); the functions are real
# pods. The images are the ones the other tests build (tetris:latest, and
# docs/OPENFAAS.md's tetris-node-ocr-rec and tetris-py-mlp). SKIPs where the
# OpenFaaS sources and binaries are both absent.
. "$(dirname "$0")/../lib/k8s.sh"
. "$ROOT/tests/lib/csi-k8s.sh"

k8s_skip_unless_possible
k8s_release_only tetris-function
need_models
k8s_openfaas_bin
k8s_cluster_up
k8s_image
k8s_namespace openfaas-csi
ns="$K8S_NS"
store="$WORK/store"
models="$WORK/models"
mkdir -p "$store" "$models" "$WORK/node-fn" "$WORK/py-fn"
OCR=ch_PP-OCRv4_rec_infer.onnx
cp "$MODELS/$OCR" "$models/"
/usr/bin/python3 "$ROOT/templates/python/make-model.py" "$models/mlp.safetensors" >/dev/null ||
    fail "templates/python/make-model.py"
uid=12000

# ---- the images: docs/OPENFAAS.md's, built the same way ----
cp "$ROOT/templates/node/handler.js" "$WORK/node-fn/"
cp "$ROOT/templates/python/handler.py" "$WORK/py-fn/"
"$ROOT/deploy/images/build-template.sh" -b "$BIN" -l node -d "$WORK/node-fn" -n tetris-node-ocr-rec \
    -m "$MODELS/$OCR" 2>"$WORK/image-node.log" || fail "Node.js image: $(tail -3 "$WORK/image-node.log")"
"$ROOT/deploy/images/build-template.sh" -b "$BIN" -l python -d "$WORK/py-fn" -n tetris-py-mlp \
    -m "$models/mlp.safetensors" 2>"$WORK/image-py.log" || fail "Python image: $(tail -3 "$WORK/image-py.log")"

# ---- the node: its daemon and tetris-csi; the webhook; OpenFaaS ----
metrics_port="$(free_port)"
reclaimer_start "$store" "$WORK/daemon.log" --listen "127.0.0.1:$metrics_port" --interval 1s
csi_start "$store" "$models"
csi_cleanup_at_exit "$store" "$ns"
csi_register
# The manifests name the models as the node has them: what the volume loads.
k8s_manifest "$ns" ocr-rec "$models/$OCR" "$WORK/ocr-rec.json"
k8s_manifest "$ns" mlp "$models/mlp.safetensors" "$WORK/mlp.json"
sel=tetris.io/openfaas-csi-test
kc label namespace "$ns" "$sel=$ns" >/dev/null
k8s_webhook "tetris-webhook-openfaas-csi-$ns" "$sel" "$ns" "$WORK/webhook.log" --volume csi \
    --namespace "$ns" --manifest-namespace "$ns" --scheduler ""
k8s_openfaas "$ns" set_nonroot_user=true
echo "ok tetris-csi registered with the kubelet; the webhook (--volume csi) and OpenFaaS serve"

# ---- 1. three functions through the gateway ----
# deploy NAME IMAGE MODEL REPLICAS: POST /system/functions, as faas-cli
# deploy sends it; the annotation opts it in, the constraint keeps it on
# the real node (API-only nodes run nothing).
deploy() {
    curl -fsS --max-time 30 -X POST "$OF_GW/system/functions" -H 'Content-Type: application/json' \
        --data-binary @- >"$WORK/$1.deploy" 2>&1 <<JSON || fail "deploy $1: $(cat "$WORK/$1.deploy")"
{"service": "$1", "image": "$2", "namespace": "$ns",
 "envVars": {"TETRIS_MODEL_NAME": "$3"},
 "annotations": {"tetris.io/model": "$3"},
 "labels": {"com.openfaas.scale.min": "$4", "com.openfaas.scale.max": "$4"},
 "constraints": ["kubernetes.io/hostname=$NODE_NAME"]}
JSON
}
diagnose() {
    kc -n "$ns" get pods -o wide >&2 2>/dev/null
    for p in $(kc -n "$ns" get pods -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
        k8s_describe "$ns" "$p"
        k8s_pod_log "$ns" "$p" 2>/dev/null | tail -n 10 >&2
    done
    tail -n 5 "$WORK/csi.log" "$WORK/faas-netes.log" >&2
}
deploy ocr-c tetris:latest ocr-rec 1
deploy ocr-node tetris-node-ocr-rec:latest ocr-rec 1
deploy mlp-py tetris-py-mlp:latest mlp 2
pods=4
for fn in ocr-c ocr-node mlp-py; do
    kc -n "$ns" rollout status "deployment/$fn" --timeout="${K8S_TIMEOUT}s" >"$WORK/rollout.out" 2>&1 || {
        diagnose
        fail "$fn never became ready: $(cat "$WORK/rollout.out")"
    }
done
kc -n "$ns" get pods -l faas_function -o json >"$WORK/pods.json"
[ "$(jq '.items | length' "$WORK/pods.json")" = $pods ] || fail "want $pods function pods: $(jq -c '[.items[].metadata.name]' "$WORK/pods.json")"
for name in $(jq -r '.items[].metadata.name' "$WORK/pods.json"); do
    pod="$(jq -c --arg n "$name" '.items[] | select(.metadata.name == $n)' "$WORK/pods.json")"
    model="$(printf '%s' "$pod" | jq -r '.metadata.annotations["tetris.io/model"]')"
    case $model in ocr-rec) file="$models/$OCR" ;; *) file="$models/mlp.safetensors" ;; esac
    printf '%s' "$pod" | jq -e --arg d "$CSI_DRIVER" --arg m "$file" --argjson u $uid '.spec |
        ([.volumes[] | select(.csi != null) | .csi] == [{driver: $d, readOnly: true, volumeAttributes: {model: $m}}])
        and ([.volumes[] | select(.hostPath != null)] == [])
        and (.containers[0].volumeMounts | any(.mountPath == "/var/run/tetris/model" and .readOnly == true))
        and (.containers[0].env | any(.name == "TETRIS_MODEL_VIEW" and .value == "/var/run/tetris/model"))
        and .containers[0].securityContext.runAsUser == $u' >/dev/null ||
        fail "$name: not the webhook's CSI volume, or hostPath, or not uid $uid: $(printf '%s' "$pod" | jq -c '.spec | {volumes, c: .containers[0] | {securityContext, volumeMounts}}')"
    v="$(printf '%s' "$pod" | jq -c -L "$ROOT/tests/lib" 'include "pod_security"; restricted_violations')"
    [ "$v" = "[]" ] || fail "$name breaks the restricted profile: $v"
done
echo "ok 1. C, Node.js and Python functions deployed through the gateway: $pods restricted pods (uid $uid), each with the CSI volume, no hostPath"

# ---- 2. real requests through the gateway ----
"$BIN/tetris-onnx-run" "$models/$OCR" --private --seed 7 --oip-request "$WORK/ocr-request.json" |
    jq -r .sha256 >"$WORK/ocr-want"
TETRIS_HANDLER="$ROOT/templates/python/handler.py" TETRIS_MODEL="$models/mlp.safetensors" \
    PYTHONPATH="$ROOT/python" /usr/bin/python3 - "$WORK" <<'PY' >"$WORK/mlp-want" || fail "the private run of mlp"
import hashlib, json, os, sys, numpy as np
from tetris.template import Model, load_handler
x = np.random.default_rng(7).standard_normal((4, 256), np.float32)
json.dump({"inputs": [{"name": "x", "datatype": "FP32", "shape": [4, 256], "data": x.ravel().tolist()}]},
          open(sys.argv[1] + "/mlp-request.json", "w"))
model = Model(load_handler(os.environ["TETRIS_HANDLER"]))
print(hashlib.sha256(model.run({"x": x})["y"].tobytes()).hexdigest())
PY
# ask FUNCTION MODEL REQUEST WANT [TIMES]: the answers through the gateway
# (TIMES requests: each replica of a two-replica function gets some) hash to WANT.
ask() {
    wait_until 60 "curl -fsS --max-time 5 -o /dev/null $OF_GW/function/$1/v2/models/$2" ||
        fail "the gateway never reached $1"
    _i=0
    while [ $_i -lt "${5:-1}" ]; do
        curl -fsS --max-time 60 --data-binary @"$3" "$OF_GW/function/$1/v2/models/$2/infer" \
            >"$WORK/$1.answer" || fail "$1: request failed: $(head -c 300 "$WORK/$1.answer")"
        _got="$("$ROOT/tests/function/oip_tool.py" hash "$WORK/$1.answer")" || fail "$1: malformed answer"
        [ "$_got" = "$(cat "$4")" ] || fail "$1 answers $_got, the private run $(cat "$4")"
        _i=$((_i + 1))
    done
}
ask ocr-c ocr-rec "$WORK/ocr-request.json" "$WORK/ocr-want"
ask ocr-node ocr-rec "$WORK/ocr-request.json" "$WORK/ocr-want"
ask mlp-py mlp "$WORK/mlp-request.json" "$WORK/mlp-want" 4
echo "ok 2. each answers through the gateway with the private run's outputs"

# ---- 3. one copy in the store, mapped by all ----
# Both models' tensors, each once.
want=$(jq -s '[.[].tensors[].digest] | unique | length' "$WORK/ocr-rec.json" "$WORK/mlp.json")
copy=$(find "$store/public/tensors" -type f | wc -l)
[ "$copy" = "$want" ] || fail "the store holds $copy tensor files, want one copy of the $want tensors"
[ "$(csi_volumes "$store")" = $pods ] && [ "$(csi_keeps "$store")" = $pods ] ||
    fail "volumes $(csi_volumes "$store"), kept holders $(csi_keeps "$store"), want $pods"
# shared_by MODEL N: N processes map MODEL's files in the store (the
# functions' runtimes); of the pages they touched (a replica the gateway
# sent no request may have touched none), each has about its 1/K share, K
# the processes that touched them.
shared_by() {
    mkdir -p "$WORK/$1-files"
    for _d in $(jq -r '.tensors[].digest | sub("sha256:"; "")' "$WORK/$1.json" | sort -u); do
        _f="$store/public/tensors/$(printf '%s' "$_d" | cut -c1-2)/$_d"
        [ -f "$_f" ] || fail "the store lacks $_d of $1"
        ln -sf "$_f" "$WORK/$1-files/$_d"
    done
    store_mappers "$WORK/$1-files/" "$WORK/$1.mappers"
    [ "$(wc -l <"$WORK/$1.mappers")" = "$2" ] ||
        fail "want $2 processes mapping $1's tensors: $(cat "$WORK/$1.mappers")"
    _k=$(awk '$2 > 0' "$WORK/$1.mappers" | wc -l)
    [ "$_k" -ge 1 ] || fail "no process touched $1's pages: $(cat "$WORK/$1.mappers")"
    while read -r _p _r _s; do
        [ $((_s * _k)) -le $((_r + _r / 10 + 8)) ] || fail "$_p: PSS $_s kB of RSS $_r kB of $1's files: not shared by $_k"
    done <"$WORK/$1.mappers"
}
# PP-OCRv4 rec: the C and the Node.js function; mlp: the two Python replicas.
shared_by ocr-rec 2
[ "$(awk '$2 > 0' "$WORK/ocr-rec.mappers" | wc -l)" = 2 ] || fail "both ocr-rec functions ran: $(cat "$WORK/ocr-rec.mappers")"
shared_by mlp 2
shared="$(curl -fsS --max-time 10 "$OF_GW/function/ocr-c/metrics" |
    awk '$1 == "tetris_function_shared_tensor_bytes" { print $2 }')"
[ "${shared:-0}" -gt 0 ] || fail "the C function maps nothing from its volume: shared_tensor_bytes=${shared:-none}"
curl -fsS "http://127.0.0.1:$metrics_port/metrics" |
    grep -E '^tetris_store_(holders|resident_bytes|tensors) ' >"$WORK/store.metrics" || true
echo "ok 3. one copy: $copy tensor files for $pods volumes ($pods kept holders); the C and Node.js functions share ocr-rec's pages, the Python replicas mlp's; the C function maps $shared bytes"

# ---- 4. deleting the functions unpublishes the volumes ----
for fn in ocr-c ocr-node mlp-py; do
    curl -fsS --max-time 30 -X DELETE "$OF_GW/system/functions" -H 'Content-Type: application/json' \
        -d "{\"functionName\": \"$fn\"}" >/dev/null || fail "cannot delete $fn"
done
wait_until "$K8S_TIMEOUT" "[ -z \"\$(kc -n $ns get pods -o name)\" ] && [ \$(csi_volumes '$store') = 0 ]" ||
    fail "after the deletes: pods $(kc -n "$ns" get pods -o name | tr '\n' ' '), $(csi_volumes "$store") volumes"
[ "$(csi_keeps "$store")" = 0 ] || fail "kept holders left: $(find "$store" -name 'csi-*.keep')"
[ "$(csi_mounts)" = 0 ] || fail "mounts left under the kubelet's pods directory"
[ "$(grep -c 'event=unpublished .*known=true' "$WORK/csi.log")" -ge $pods ] ||
    fail "$(grep -c 'event=unpublished .*known=true' "$WORK/csi.log") volumes unpublished, want $pods"
# faas-netes deletes in the foreground: the Deployments go once their pods have.
wait_until "$K8S_TIMEOUT" "[ -z \"\$(kc -n $ns get deployments,replicasets,services,pods -l faas_function -o name)\" ]" ||
    fail "left in $ns: $(kc -n "$ns" get deployments,replicasets,services,pods -l faas_function -o name | tr '\n' ' ')"
echo "ok 4. the functions deleted through the gateway: $pods volumes unpublished, no kept holder or mount left"
