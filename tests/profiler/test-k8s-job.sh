#!/bin/sh
# `tetris-profiler job MODEL | kubectl apply -f -` profiles on the local
# cluster's real node: the Job's pod (the project image) runs the profiler,
# whose functions map the weights from the node's store through the node
# daemon (mounted read-only), and stores the profile and the manifest as
# ConfigMaps through the API; the manifest ConfigMap is the one the
# scheduler extender reads (label tetris.io/model, key manifest.json) and the
# profile is one tetris-autoscaler accepts.
#
# The local cluster issues no service-account tokens (no token controller),
# so the pod gets the API's address and a token through --api-server and
# --sa-secret; in a cluster with tokens neither is needed.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
k8s_release_only tetris-profiler
k8s_cluster_up
k8s_image
k8s_namespace profjob
ns="$K8S_NS"
models="$(mktemp -d /tmp/tetris-profjob-models.XXXXXX)"
store="$(mktemp -d /dev/shm/tetris-profjob-store.XXXXXX)"
work="$(mktemp -d /tmp/tetris-profjob.XXXXXX)"
K8S_CLEANUP_PATHS="$models $store $work"
cp "$MODELS/silero_vad_v5.onnx" "$models/"
chmod 755 "$models" "$store"

# The node daemon of this store (as its DaemonSet would run it).
reclaimer_start "$store" "$work/daemon.log" --listen "" --interval 3600

# API credentials in the service-account layout.
kc config view --raw -o jsonpath='{.users[0].user.token}' >"$work/token"
kc config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' |
    base64 -d >"$work/ca.crt"
kc -n "$ns" create secret generic profiler-api --from-file=token="$work/token" \
    --from-file=ca.crt="$work/ca.crt" --from-literal=namespace="$ns" >/dev/null ||
    fail "cannot create the credentials Secret"
server="$(kc config view --raw -o jsonpath='{.clusters[0].cluster.server}')"

"$BIN/tetris-profiler" job silero_vad_v5.onnx --name silero-vad --namespace "$ns" \
    --model-dir "$models" --store "$store" --grid "c=1 b=1,2 p=1" --duration 1 --warmup 0.3 \
    --node "$NODE_NAME" --api-server "$server" --sa-secret profiler-api >"$work/job.yaml" ||
    fail "tetris-profiler job failed"
kc apply -f - <"$work/job.yaml" >/dev/null || fail "kubectl apply of the Job failed"

job=tetris-profile-silero-vad
if ! kc -n "$ns" wait --for=condition=complete "job/$job" --timeout="${K8S_TIMEOUT}s" >/dev/null; then
    kc -n "$ns" describe job "$job" >&2 || true
    for p in $(kc -n "$ns" get pods -l job-name=$job -o jsonpath='{.items[*].metadata.name}'); do
        k8s_describe "$ns" "$p"
        k8s_pod_log "$ns" "$p" >&2
    done
    fail "Job $job did not complete"
fi
pod_node="$(kc -n "$ns" get pods -l job-name=$job -o jsonpath='{.items[0].spec.nodeName}')"
[ "$pod_node" = "$NODE_NAME" ] || fail "profiler pod ran on '$pod_node', want the real node $NODE_NAME"

# The manifest, where the extender looks for it.
kc -n "$ns" get configmaps -l tetris.io/model=silero-vad -o jsonpath='{.items[0].data.manifest\.json}' \
    >"$work/manifest.json" || fail "no manifest ConfigMap labelled tetris.io/model=silero-vad"
"$BIN/tetris-agent" index "$MODELS/silero_vad_v5.onnx" -o "$work/local.json" 2>/dev/null
[ "$(jq -c '[.tensors[].digest]' "$work/manifest.json")" = "$(jq -c '[.tensors[].digest]' "$work/local.json")" ] ||
    fail "stored manifest's digests differ from the model's"

# The profile: measured on the node, weights from the node's store.
kc -n "$ns" get configmap tetris-profile-silero-vad -o jsonpath='{.data.profile\.yaml}' \
    >"$work/profile.yaml" || fail "no profile ConfigMap"
grep -q '^measured: true$' "$work/profile.yaml" || fail "profile not measured: $(cat "$work/profile.yaml")"
[ "$(grep -c '^- {c: ' "$work/profile.yaml")" = 2 ] || fail "want 2 configs: $(cat "$work/profile.yaml")"
"$BIN/tetris-autoscaler" plan --profile "$work/profile.yaml" --rps 5 --slo-ms 60000 >/dev/null 2>&1 ||
    fail "tetris-autoscaler rejects the stored profile"
if grep -q 'shared_bytes: 0}' "$work/profile.yaml"; then
    fail "the pod's functions did not map the store: $(cat "$work/profile.yaml")"
fi
grep -q 'event=ingest' "$work/daemon.log" || fail "the node daemon ingested nothing"
echo "ok profiling Job on $NODE_NAME: ConfigMaps tetris-manifest-silero-vad and tetris-profile-silero-vad stored"
