#!/bin/sh
# test-extender-pins.sh - the reclaimer learns from the cluster:
# tetris-node-pins lists the model pods bound to a node, reads their
# manifest ConfigMaps and writes the pin file tetris-reclaimer --pin-file
# reads: exactly the distinct digests of the models in use there (finished
# pods and other nodes' pods do not count); when the pods go, so do the pins.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
k8s_cluster_up
k8s_api_nodes 2
k8s_namespace pins
ns="$K8S_NS"
work="$(mktemp -d /tmp/tetris-pins.XXXXXX)"
K8S_CLEANUP_PATHS="$work"
MODELS="$ROOT/.deps/models"

k8s_manifest "$ns" vad "$MODELS/silero_vad_v5.onnx" "$work/vad.json"
k8s_manifest "$ns" ocr-cls "$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx" "$work/ocr-cls.json"

# pod NAME MODEL NODE: a model pod placed directly on NODE.
pod() {
    kc -n "$ns" create -f - >/dev/null <<YAML || fail "cannot create pod $1"
apiVersion: v1
kind: Pod
metadata: { name: $1, labels: { tetris.io/model: "$2" } }
spec:
  nodeName: $3
  containers: [{ name: fn, image: tetris-test-tools:latest, imagePullPolicy: Never }]
YAML
}
pod vad-1 vad tetris-api-node-1
pod vad-2 vad tetris-api-node-1
pod ocr-elsewhere ocr-cls tetris-api-node-2
pod unknown-model no-manifest tetris-api-node-1

pins() {
    "$BIN/tetris-node-pins" --kubeconfig "$KUBECONFIG_FILE" --namespace "$ns" \
        --node tetris-api-node-1 --pin-file "$work/pins" --once 2>>"$work/pins.log" ||
        fail "tetris-node-pins failed: $(tail -3 "$work/pins.log")"
}
pins
jq -r '.tensors[].digest | sub("^sha256:"; "")' "$work/vad.json" | sort -u >"$work/want"
sort "$work/pins" >"$work/got"
cmp -s "$work/want" "$work/got" ||
    fail "pins differ from vad's digests: $(diff "$work/want" "$work/got" | head -5)"
grep -q 'models=2 models_without_manifest=1' "$work/pins.log" ||
    fail "pins log does not count the model without a manifest: $(tail -1 "$work/pins.log")"

# The pods go: the pins go.
kc -n "$ns" delete pod vad-1 vad-2 unknown-model --grace-period=0 --force >/dev/null 2>&1
i=0
while kc -n "$ns" get pod vad-1 >/dev/null 2>&1 && [ $i -lt 60 ]; do sleep 0.5; i=$((i + 1)); done
pins
[ ! -s "$work/pins" ] || fail "pins remain after the pods left: $(wc -l <"$work/pins") digests"
echo "node pins: ok" >&2
