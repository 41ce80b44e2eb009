#!/bin/sh
# test-install.sh - `helm install` of charts/tetris on the local cluster
# (Kubernetes 1.20, the real node tetris-node-0), then `helm uninstall`:
#  1. the release installs with the scheduler configuration for 1.20
#     (v1beta1) and the images the cluster holds (pullPolicy Never): the
#     project image, and kube-scheduler packed from the cluster's own build
#     (its tag left empty: the chart picks the cluster's version);
#  2. the reclaimer DaemonSet's pod runs on the real node, on a tmpfs of its
#     own (huge=within_size) that its init container mounted, and serves
#     /healthz, /metrics (promtool-clean, with the capacity from the chart's
#     ConfigMap) and /inventory (its node's name) on loopback; it makes a
#     derived form with the onnxruntime-node library its image carries
#     (reclaimer.deriveRuntimes), for a view asked from the host;
#  3. the tetris-scheduler pod runs and binds a pod that asks for it, through
#     the extender in the same pod (whose metrics count the filter call), and
#     the daemon's tetris-node-pins sidecar pins that pod's model (the
#     digests of its manifest ConfigMap);
#  4. a real Prometheus scrapes the daemon as its pod's prometheus.io
#     annotations say; the autoscaler, with
#     its own service account's token (RBAC of the chart), asks that
#     Prometheus for the rate and creates the function's warm instance;
#  5. `helm uninstall` removes every object, cluster-scoped ones included,
#     and the daemon stops serving; the store directory stays (it outlives
#     the daemon by design).
# The cluster is shared: this release uses its own namespace, store, ports
# and scheduler name, so it never meets another test's scheduler or
# daemon. The cluster issues no service-account tokens:
# the release gets each service account's token through apiAccess.
. "$(dirname "$0")/../lib/k8s.sh"
CHART="$ROOT/charts/tetris"

k8s_skip_unless_possible
need_models
# The ONNX Runtime stock onnxruntime-node runs, which the image carries.
node_pkg="$ROOT/.deps/node_modules/onnxruntime-node/package.json"
[ -f "$node_pkg" ] || fail "no onnxruntime-node in $ROOT/.deps (scripts/deps.sh installs it)"
node_ort_version="$(jq -r .version "$node_pkg")"
node_ort="/opt/tetris/runtimes/onnxruntime-node-$node_ort_version/libonnxruntime.so.1"
HELM="$("$ROOT/scripts/helm.sh")" || fail "cannot install helm (scripts/helm.sh)"
k8s_cluster_up
k8s_image
k8s_tools_image
# kube-scheduler of the cluster's own build, as an image (packed once).
ctr --address "$CLUSTER_DIR/containerd/containerd.sock" -n k8s.io images ls -q |
    grep -q "/tetris-kube-scheduler:v$KUBE_VERSION\$" ||
    "$ROOT/scripts/cluster/pack-image.sh" -n "tetris-kube-scheduler:v$KUBE_VERSION" -i \
        -x "$KUBE_BIN/kube-scheduler" >/dev/null 2>&1 || fail "cannot pack kube-scheduler as an image"
k8s_namespace helm
ns="$K8S_NS"
release=tetris
work="$(mktemp -d /tmp/tetris-helm-install.XXXXXX)"
store="$(mktemp -d /dev/shm/tetris-helm-store.XXXXXX)"
K8S_CLEANUP_PATHS="$work $store"
# An interrupted run must not leave cluster-scoped objects behind (this
# runs before the namespace goes, while helm still finds the release).
at_exit '"$HELM" uninstall "$release" -n "$ns" >/dev/null 2>&1'

# jq_true ARGS...: stdin is JSON for which jq ARGS prints true (jq 1.6's -e
# succeeds on empty input, so a failed request would pass).
jq_true() {
    _in="$(cat)"
    [ -n "$_in" ] && [ "$(printf '%s' "$_in" | jq "$@")" = true ]
}
port="$(free_port)"
ext_port="$(free_port)"
health_port="$(free_port)"
scheduler="tetris-helm-${ns#helm-}"

# The cluster's CA and the apiserver's address; each component's token is
# minted for its own service account after the install (TokenRequest), so
# the components act with the chart's RBAC, not as an administrator.
kc config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$work/ca.crt"
kc config view --raw -o jsonpath='{.users[0].user.token}' >"$work/admin.token"
server="$(kc config view --raw -o jsonpath='{.clusters[0].cluster.server}')"
api_host="${server#https://}"
api_port="${api_host##*:}"
api_host="${api_host%:*}"

# A real Prometheus on loopback (started once the release runs): scrapes
# the daemon where its pod's prometheus.io annotations say; the autoscaler
# asks it for the functions' request rates.
command -v prometheus >/dev/null || fail "prometheus not installed (scripts/deps.sh installs it)"
prom_port="$(free_port)"
prom="http://127.0.0.1:$prom_port"

# The autoscaler's function and its profile, as `tetris-profiler job` stores it.
kc -n "$ns" create configmap tetris-profile-silero-vad \
    --from-file=profile.yaml="$ROOT/deploy/profiles/silero-vad.profile.yaml" >/dev/null ||
    fail "cannot create the profile ConfigMap"

# The host's mount namespace, where the init container mounts the store's
# tmpfs: the kubelet's, since a sandboxed machine's pid 1 may not be
# inspected (the chart's default is pid 1's).
kubelet_pid="$(pgrep -o -x kubelet)" || fail "no kubelet process on this machine"
cat >"$work/values.yaml" <<YAML
image: {repository: tetris, tag: latest, pullPolicy: Never}
apiAccess: {secretName: tetris-api, perServiceAccount: true, host: "$api_host", port: $api_port}
reclaimer:
  store: {hostPath: "$store", mountNamespace: "/proc/$kubelet_pid/ns/mnt"}
  listenHost: 127.0.0.1
  port: $port
  capacity: 96Mi
  keepAlive: 1m
  nodePins: {interval: 2}
  deriveRuntimes: [$node_ort]
scheduler:
  name: $scheduler
  configApiVersion: v1beta1
  image: {repository: tetris-kube-scheduler, tag: "", pullPolicy: Never}
  hostNetwork: true
  healthPort: $health_port
  extender: {port: $ext_port, refresh: 1}
  nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
autoscaler:
  enabled: true
  prometheusUrl: $prom
  hostNetwork: true
  interval: 1
  functions: [{name: silero-vad, profile: "configmap:$ns/tetris-profile-silero-vad"}]
  functionNamespace: $ns
  nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
YAML

# diagnose: the release's pods, their events and logs, on stderr.
diagnose() {
    kc -n "$ns" get pods -o wide >&2 2>/dev/null
    for p in $(kc -n "$ns" get pods -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
        k8s_describe "$ns" "$p"
        for c in $(kc -n "$ns" get pod "$p" -o jsonpath='{.spec.containers[*].name}'); do
            echo "--- log of $p/$c" >&2
            k8s_pod_log "$ns" "$p" "$c" 2>/dev/null | tail -20 >&2
        done
    done
}

# 1. Install; then each component's token, then everything ready.
"$HELM" install "$release" "$CHART" -n "$ns" -f "$work/values.yaml" >"$work/install.out" 2>&1 ||
    fail "helm install: $(cat "$work/install.out")"
for sa in tetris-reclaimer tetris-scheduler tetris-autoscaler; do
    kc -n "$ns" create token "$sa" --duration=1h >"$work/$sa.token" 2>"$work/token.err" ||
        fail "cannot mint a token for $sa: $(cat "$work/token.err")"
    kc -n "$ns" create secret generic "tetris-api-$sa" --from-file=token="$work/$sa.token" \
        --from-file=ca.crt="$work/ca.crt" --from-literal=namespace="$ns" >/dev/null ||
        fail "cannot create the credentials Secret of $sa"
done
for w in daemonset/tetris-reclaimer deployment/tetris-scheduler deployment/tetris-autoscaler; do
    if ! kc -n "$ns" rollout status "$w" --timeout="${K8S_TIMEOUT}s" >"$work/rollout.out" 2>&1; then
        diagnose
        fail "$w not ready: $(cat "$work/rollout.out")"
    fi
done
grep -q "schedulerName: $scheduler" "$work/install.out" || fail "NOTES do not show the function pod snippet: $(cat "$work/install.out")"
grep -q "tetris-profiler job" "$work/install.out" || fail "NOTES do not show the profiling Job"
image="$(kc -n "$ns" get deployment tetris-scheduler -o jsonpath='{.spec.template.spec.containers[0].image}')"
[ "$image" = "tetris-kube-scheduler:v$KUBE_VERSION" ] || fail "kube-scheduler image $image, want the cluster's version v$KUBE_VERSION"

# 2. The node daemon on the real node, serving on loopback.
pod="$(kc -n "$ns" get pods -l app.kubernetes.io/name=tetris-reclaimer -o jsonpath='{.items[0].metadata.name}')"
[ -n "$pod" ] || fail "no tetris-reclaimer pod"
k8s_wait_phase "$ns" "$pod" Running
[ "$(kc -n "$ns" get pod "$pod" -o jsonpath='{.spec.nodeName}')" = "$NODE_NAME" ] ||
    fail "reclaimer pod not on $NODE_NAME"
url="http://127.0.0.1:$port"
curl -fsS --max-time 5 "$url/healthz" >/dev/null || { diagnose; fail "no /healthz at $url"; }
curl -fsS --max-time 5 "$url/metrics" >"$work/metrics" || fail "no /metrics at $url"
promtool check metrics <"$work/metrics" >"$work/promtool" 2>&1 || fail "promtool: $(cat "$work/promtool")"
grep -qx 'tetris_store_capacity_bytes 100663296' "$work/metrics" ||
    fail "capacity from the chart's ConfigMap (96Mi) not in effect: $(grep capacity "$work/metrics")"
curl -fsS --max-time 5 "$url/inventory" | jq_true --arg n "$NODE_NAME" '.node == $n' ||
    fail "/inventory does not name $NODE_NAME"
[ -S "$store/public/ingest.sock" ] || fail "no ingest socket in the store hostPath $store"
# The store is a tmpfs of its own (reclaimer.store.tmpfs: huge), which the
# init container mounted in the node's mount namespace and the daemon reuses.
k8s_pod_log "$ns" "$pod" store-tmpfs >"$work/store-tmpfs.log" 2>&1
k8s_pod_log "$ns" "$pod" reclaimer >"$work/reclaimer.log" 2>&1
[ "$(findmnt -n -o FSTYPE --mountpoint "$store")" = tmpfs ] ||
    fail "the store hostPath $store is not a tmpfs of its own: $(tail -3 "$work/store-tmpfs.log")"
opts="$(findmnt -n -o OPTIONS --mountpoint "$store")"
case ",$opts," in
*,huge=within_size,*) grep -q 'event=store-tmpfs state=mounted .*huge=within_size' "$work/store-tmpfs.log" ||
    fail "the init container did not say it mounted huge=within_size: $(cat "$work/store-tmpfs.log")" ;;
*) grep -q 'event=store-tmpfs state=mounted .*huge=never msg=.*refused' "$work/store-tmpfs.log" ||
    fail "no huge=within_size ($opts) and no line saying why: $(cat "$work/store-tmpfs.log")" ;;
esac
grep -q 'event=store-tmpfs state=reused ' "$work/reclaimer.log" ||
    fail "the daemon did not reuse the init container's tmpfs: $(grep event=store-tmpfs "$work/reclaimer.log")"
# A view for onnxruntime-node asked from the host: the daemon derives with
# the library its image carries, named by the chart, and the view has the
# form.
model="$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx"
"$BIN/tetris-agent" view --store "$store" --derived make --runtime "onnxruntime $node_ort_version" \
    "$model" "$work/view" >"$work/view.json" 2>"$work/view.err" ||
    fail "tetris-agent view against the chart's daemon: $(tail -n 3 "$work/view.err")"
k8s_pod_log "$ns" "$pod" reclaimer >"$work/reclaimer.log" 2>&1
grep -qF "event=derive-runtime runtime=\"onnxruntime $node_ort_version\" lib=\"$node_ort\"" "$work/reclaimer.log" ||
    fail "the daemon did not derive with $node_ort: $(grep event=derive "$work/reclaimer.log")"
# The chart's capabilities are for this: the child parsing the graph is nobody.
grep -q "event=derived .*runtime=\"onnxruntime $node_ort_version\" .* child_uid=65534 child_gid=65534 child_capabilities=none" \
    "$work/reclaimer.log" || fail "the derive child kept the daemon's user: $(grep event=derive "$work/reclaimer.log")"
[ "$(jq -r '.derived != null' "$work/view.json")" = true ] && [ -f "$work/view/derived.onnx" ] ||
    fail "the view carries no derived form: $(cat "$work/view.json") $(grep event=derive "$work/view.err")"
# tetris-node-pins' file, in its emptyDir as the node's kubelet keeps it.
uid="$(kc -n "$ns" get pod "$pod" -o jsonpath='{.metadata.uid}')"
pins="$CLUSTER_DIR/kubelet/pods/$uid/volumes/kubernetes.io~empty-dir/pins/pins"

# 3. The scheduler binds a pod that names it, asking its extender.
sched_pod="$(kc -n "$ns" get pods -l app.kubernetes.io/name=tetris-scheduler -o jsonpath='{.items[0].metadata.name}')"
k8s_wait_phase "$ns" "$sched_pod" Running
# The pod's model: a manifest ConfigMap where the chart's extender and
# node-pins look (the release's namespace).
d1="$(head -c 32 /dev/urandom | sha256sum | cut -d' ' -f1)"
d2="$(head -c 32 /dev/urandom | sha256sum | cut -d' ' -f1)"
printf '{"format":"tetris-manifest/1","tensors":[{"digest":"sha256:%s","nbytes":4096},{"digest":"sha256:%s","nbytes":8192}]}\n' \
    "$d1" "$d2" >"$work/manifest.json"
kc -n "$ns" create configmap tetris-manifest-helm-test-model --from-file=manifest.json="$work/manifest.json" \
    >/dev/null || fail "cannot create the manifest ConfigMap"
kc -n "$ns" label configmap tetris-manifest-helm-test-model tetris.io/model=helm-test-model >/dev/null ||
    fail "cannot label the manifest ConfigMap"
kc -n "$ns" create -f - >/dev/null <<YAML || fail "cannot create pod placed"
apiVersion: v1
kind: Pod
metadata:
  name: placed
  labels: {tetris.io/model: helm-test-model}
spec:
  schedulerName: $scheduler
  nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
  hostNetwork: true
  restartPolicy: Never
  containers:
  - name: c
    image: tetris-test-tools:latest
    imagePullPolicy: Never
    command: ["/bin/sleep", "3600"]
YAML
k8s_wait_bound "$ns" placed
kc -n "$ns" get events --field-selector involvedObject.name=placed,reason=Scheduled \
    -o jsonpath='{.items[*].reportingComponent}{.items[*].source.component}' | grep -qw "$scheduler" ||
    fail "pod placed was not bound by $scheduler"
curl -fsS --max-time 5 "http://127.0.0.1:$ext_port/metrics" >"$work/ext.metrics" ||
    fail "no extender at 127.0.0.1:$ext_port"
grep -q '^tetris_extender_requests_total{verb="filter",code="200"} [1-9]' "$work/ext.metrics" ||
    fail "the scheduler did not call the extender: $(grep requests_total "$work/ext.metrics")"

# tetris-node-pins pins the model of the pod now bound to its node.
printf '%s\n' "$d1" "$d2" | sort >"$work/want.pins"
i=0
until [ -f "$pins" ] && sort "$pins" | cmp -s - "$work/want.pins"; do
    i=$((i + 1))
    if [ "$i" -ge $((K8S_TIMEOUT * 2)) ]; then
        diagnose
        fail "pin file $pins: '$(cat "$pins" 2>/dev/null)', want the model's digests $d1 $d2"
    fi
    sleep 0.5
done

# Prometheus scrapes the daemon at the port and path of its pod's
# annotations (discovery's job; Debian's Prometheus has no Kubernetes
# discovery built in).
ann="$(kc -n "$ns" get pod "$pod" -o json | jq -c '.metadata.annotations')"
printf '%s' "$ann" | jq_true '.["prometheus.io/scrape"] == "true"' || fail "daemon pod not annotated for scraping: $ann"
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
- job_name: tetris-reclaimer
  metrics_path: $(printf '%s' "$ann" | jq -r '.["prometheus.io/path"]')
  static_configs:
  - targets: ['127.0.0.1:$(printf '%s' "$ann" | jq -r '.["prometheus.io/port"]')']
    labels: {node: $NODE_NAME}
YAML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prom" \
    --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
KILL_ON_EXIT="$KILL_ON_EXIT $!"
i=0
until curl -fsS --max-time 5 "$prom/api/v1/query" \
    --data-urlencode "query=tetris_store_capacity_bytes{node=\"$NODE_NAME\"}" 2>/dev/null |
    jq_true '.data.result[0].value[1] == "100663296"'; do
    i=$((i + 1))
    if [ "$i" -ge $((K8S_TIMEOUT * 2)) ]; then
        curl -sS "$prom/api/v1/targets" >&2
        fail "Prometheus did not scrape the daemon at its annotated port and path ($(tail -3 "$work/prometheus.log"))"
    fi
    sleep 0.5
done

# The autoscaler, with its own service account, keeps the function's one
# warm instance: a Deployment for tetris-scheduler with the store read-only.
i=0
until [ -n "$(kc -n "$ns" get deployments -l faas_function=silero-vad -o name 2>/dev/null)" ]; do
    i=$((i + 1))
    if [ "$i" -ge $((K8S_TIMEOUT * 2)) ]; then
        diagnose
        fail "the autoscaler created no Deployment for silero-vad (Prometheus at $prom: $(tail -3 "$work/prometheus.log"))"
    fi
    sleep 0.5
done
fn="$(kc -n "$ns" get deployments -l faas_function=silero-vad -o json | jq -c '.items[0].spec.template.spec')"
printf '%s' "$fn" | jq_true --arg s "$scheduler" --arg st "$store" '.schedulerName == $s and
    ([.volumes[] | select(.hostPath.path == $st + "/public")] | length) == 1 and
    ([.containers[0].volumeMounts[] | select(.mountPath == $st) | .readOnly] == [true])' ||
    fail "function Deployment does not use $scheduler and the store read-only: $fn"

# 5. Uninstall: nothing of the release stays.
"$HELM" uninstall "$release" -n "$ns" --wait --timeout "${K8S_TIMEOUT}s" >"$work/uninstall.out" 2>&1 ||
    fail "helm uninstall: $(cat "$work/uninstall.out")"
left="$(kc get clusterroles,clusterrolebindings -o name | grep -e "-$ns-$release\$")"
[ -z "$left" ] || fail "cluster-scoped objects left: $left"
left="$(kc -n "$ns" get daemonsets,deployments,configmaps,serviceaccounts,roles,rolebindings \
    -l app.kubernetes.io/instance="$release" -o name)"
[ -z "$left" ] || fail "objects left in $ns: $left"
i=0
while curl -fsS --max-time 1 "$url/healthz" >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt $((K8S_TIMEOUT * 2)) ] || fail "the daemon still serves $url after uninstall"
    sleep 0.5
done
[ -d "$store" ] || fail "uninstall removed the store directory"
echo "helm install: ok (release in $ns, scheduler $scheduler, daemon on 127.0.0.1:$port)" >&2
