#!/bin/sh
# tetris-function as a pod on the local cluster's real node, configured the
# way tetris-autoscaler configures it (TETRIS_* environment, the node's store
# mounted read-only, readiness on /_/health): it becomes Ready, maps the
# weights through the node daemon, and answers POST / with the outputs
# tetris-onnx-run computes for the same seed.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
k8s_release_only tetris-function
k8s_cluster_up
k8s_image
k8s_namespace fnpod
ns="$K8S_NS"
models="$(mktemp -d /tmp/tetris-fnpod-models.XXXXXX)"
store="$(mktemp -d /dev/shm/tetris-fnpod-store.XXXXXX)"
work="$(mktemp -d /tmp/tetris-fnpod.XXXXXX)"
K8S_CLEANUP_PATHS="$models $store $work"
model=ch_PP-OCRv4_det_infer.onnx
cp "$MODELS/$model" "$models/"
chmod 755 "$models" "$store"

reclaimer_start "$store" "$work/daemon.log" --listen "" --interval 3600

# Host network, loopback only: the test talks to it at 127.0.0.1.
port=$((20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 20000))
kc -n "$ns" create -f - >/dev/null <<YAML || fail "cannot create the function pod"
apiVersion: v1
kind: Pod
metadata:
  name: fn
  labels: {faas_function: ocr-det}
spec:
  nodeName: $NODE_NAME
  hostNetwork: true
  containers:
  - name: fn
    image: tetris:latest
    imagePullPolicy: Never
    command: ["/usr/local/bin/tetris-function", "--listen", "127.0.0.1:$port"]
    env:
    - {name: TETRIS_MODEL, value: /models/$model}
    - {name: TETRIS_STORE, value: /dev/shm/tetris}
    - {name: TETRIS_BATCH, value: "2"}
    - {name: TETRIS_CONCURRENCY, value: "2"}
    readinessProbe:
      httpGet: {host: 127.0.0.1, path: /_/health, port: $port}
      periodSeconds: 1
    volumeMounts:
    - {name: store, mountPath: /dev/shm/tetris, readOnly: true}
    - {name: models, mountPath: /models, readOnly: true}
  volumes:
  - {name: store, hostPath: {path: $store/public, type: Directory}}
  - {name: models, hostPath: {path: $models, type: Directory}}
YAML
if ! kc -n "$ns" wait --for=condition=Ready pod/fn --timeout="${K8S_TIMEOUT}s" >/dev/null; then
    k8s_describe "$ns" fn
    k8s_pod_log "$ns" fn >&2
    fail "function pod not Ready"
fi
k8s_pod_log "$ns" fn >"$work/pod.log"
grep '^{"event":"ready"' "$work/pod.log" | jq -e '.mode == "store" and .fell_back == false and .shared_bytes > 0' \
    >/dev/null || fail "pod does not serve from the node's store: $(cat "$work/pod.log")"
for seed in 4 9; do
    got=$(curl -s --max-time 60 --data-binary "{\"seed\":$seed}" "http://127.0.0.1:$port/" | jq -r .sha256)
    want=$("$BIN/tetris-onnx-run" "$MODELS/$model" --private --seed $seed 2>/dev/null | jq -r .sha256)
    [ -n "$want" ] && [ "$got" = "$want" ] || fail "seed $seed: pod answered $got, tetris-onnx-run $want"
done
curl -s "http://127.0.0.1:$port/metrics" | grep -q '^tetris_function_requests_total{code="200"} 2$' ||
    fail "pod metrics do not count the requests"
grep -q 'event=ingest' "$work/daemon.log" || fail "the node daemon ingested nothing"
echo "ok tetris-function pod on $NODE_NAME: Ready, weights from the node's store, outputs equal tetris-onnx-run"
