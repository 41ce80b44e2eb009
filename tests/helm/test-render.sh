#!/bin/sh
# test-render.sh - the Helm chart renders what the README promises:
#  1. `helm lint --strict` passes with the default values, with every
#     optional part on (tests/helm/values-all.yaml) and with the local
#     cluster's values (charts/tetris/values-local-cluster.yaml, which also
#     render what that cluster needs);
#  2. the default rendering has the node daemon as the design needs it
#     (store hostPath read-write, hostNetwork, hostPID, no memory limit,
#     config from a ConfigMap, the node-pins sidecar, scrape annotations), a
#     v1 scheduler configuration with the extender on loopback, and no
#     autoscaler or ServiceMonitor; v1beta1 and the optional parts render
#     when asked;
#  3. bad values fail with a message naming the problem (schema, a memory
#     limit below the store capacity, an autoscaler without Prometheus, a
#     tenant name the store refuses, more tenants than maxTenants, a
#     registry that is no HOST:PORT, a CA from a ConfigMap and a Secret);
#     the tenants list reaches the daemon (which makes exactly those
#     stores) and the webhook; the registries reach the daemon's file
#     (none by default), their credentials Secret and CA bundle only the
#     daemon's container, read-only, as --registry-auth and --registry-ca;
#     the CSI driver (csi.enabled) renders its CSIDriver, tetris-csi in the
#     daemon's pod with the kubelet's directories, and the tenant map,
#     which the plugin accepts, and the webhook's --volume csi; a map
#     naming a tenant the daemons do not serve, twice the same rule, or the
#     webhook's csi volume without the driver fail;
#  4. the chart spells the names the programs use (protocol/names.h), its
#     components stay off API-only nodes (tetris.io/node-kind) unless
#     their affinity is dropped, and
#     the files in deploy/ that come from it are what scripts/gen-deploy.sh
#     renders now.
# No cluster needed; tests/helm/test-dry-run.sh has the apiserver validate
# both renderings.
. "$(dirname "$0")/../lib/common.sh"
CHART="$ROOT/charts/tetris"
ALL="$ROOT/tests/helm/values-all.yaml"
HELM="$("$ROOT/scripts/helm.sh")" || fail "cannot install helm (scripts/helm.sh)"

# doc FILE KIND NAME: the rendered object KIND/NAME of FILE, as JSON.
doc() {
    jq -c --arg k "$2" --arg n "$3" 'select(.kind == $k and .metadata.name == $n)' "$1.json"
}
# render OUT ARGS...: helm template into OUT (YAML) and OUT.json (one object a line).
render() {
    _out="$1"; shift
    "$HELM" template tetris "$CHART" "$@" >"$_out" 2>"$_out.err" ||
        fail "helm template $*: $(cat "$_out.err")"
    yq -c 'select(. != null)' "$_out" >"$_out.json" 2>"$_out.err" ||
        fail "rendered YAML does not parse: $(cat "$_out.err")"
}
# expect JSON JQ_FILTER WHAT: the filter is true of JSON.
expect() {
    [ "$(printf '%s' "$1" | jq "$2")" = true ] || fail "$3 (jq: $2)"
}

# 1. Lint.
"$HELM" lint --strict "$CHART" >"$WORK/lint" 2>&1 || fail "helm lint --strict: $(cat "$WORK/lint")"
"$HELM" lint --strict "$CHART" -f "$ALL" >"$WORK/lint" 2>&1 ||
    fail "helm lint --strict -f values-all.yaml: $(cat "$WORK/lint")"
"$HELM" lint --strict "$CHART" -f "$CHART/values-local-cluster.yaml" >"$WORK/lint" 2>&1 ||
    fail "helm lint --strict -f values-local-cluster.yaml: $(cat "$WORK/lint")"

# 2. Defaults.
render "$WORK/default.yaml" -n tetris-system
ds="$(doc "$WORK/default.yaml" DaemonSet tetris-reclaimer)"
[ -n "$ds" ] || fail "no DaemonSet tetris-reclaimer"
expect "$ds" '.spec.template.spec.hostNetwork == true and .spec.template.spec.hostPID == true' \
    "reclaimer needs hostNetwork and hostPID"
expect "$ds" '.spec.template.spec.volumes[] | select(.name == "store") | .hostPath.path == "/dev/shm/tetris"' \
    "store hostPath is not /dev/shm/tetris"
rc="$(printf '%s' "$ds" | jq -c '.spec.template.spec.containers[] | select(.name == "reclaimer")')"
expect "$rc" '[.volumeMounts[] | select(.name == "store") | .readOnly // false] == [false]' \
    "the daemon must mount the store read-write"
expect "$rc" '.resources.limits.memory == null' "the daemon must have no memory limit by default"
expect "$rc" '(.args | index("--listen=$(HOST_IP):9464")) != null' "daemon does not listen on the node's IP:9464"
expect "$rc" '(.args | index("--config=/etc/tetris/reclaimer.yaml")) != null' "daemon does not read its ConfigMap"
expect "$rc" '(.args | index("--pin-file=/run/tetris-pins/pins")) != null' "daemon does not read the pins"
expect "$ds" '[.spec.template.spec.containers[].name] == ["reclaimer", "node-pins"]' "no node-pins sidecar"
expect "$ds" '([.spec.template.spec.volumes[] | select(.name | startswith("registry-"))] | length) == 0 and
    ([.spec.template.spec.containers[0].args[] | select(startswith("--registry"))] | length) == 0' \
    "registry credentials or flags rendered by default"
expect "$rc" '[.args[] | select(startswith("--derive-runtimes"))] == []' \
    "--derive-runtimes rendered by default"
doc "$WORK/default.yaml" ConfigMap tetris-reclaimer | jq -r '.data["reclaimer.yaml"]' |
    grep -q '^registries:' && fail "registries in the daemon's file by default (pulls must be refused)"
# The store's tmpfs: only the init container may mount, in the host's
# mount namespace; the daemon itself holds no capability (test-privilege.sh
# checks every security context).
expect "$ds" '[.spec.template.spec.initContainers[] | select(.name == "store-tmpfs") |
    select(.securityContext.capabilities.add == ["SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"] and
           (.args | index("--mount-only")) != null and
           (.args | index("--config=/etc/tetris/reclaimer.yaml")) != null) |
    .args | index("--mount-namespace=/proc/1/ns/mnt")] | length == 1' \
    "no store-tmpfs init container mounting in the host's namespace"
expect "$rc" '(.securityContext.privileged // false) == false' "the daemon must not be privileged"
expect "$ds" '.spec.template.metadata.annotations["prometheus.io/scrape"] == "true" and
    .spec.template.metadata.annotations["prometheus.io/port"] == "9464" and
    .spec.template.metadata.annotations["prometheus.io/path"] == "/metrics"' "scrape annotations missing"
cm="$(doc "$WORK/default.yaml" ConfigMap tetris-reclaimer | jq -r '.data["reclaimer.yaml"]')"
printf '%s\n' "$cm" >"$WORK/reclaimer.yaml"
for kv in 'store: "/dev/shm/tetris"' 'store_tmpfs: "huge"' 'keep_alive: "5m"' 'capacity: "8Gi"' 'interval: "10s"' \
    'ingest_timeout: "120s"' 'health_deadline: "60s"' 'tenant_capacity: "0"'; do
    grep -qxF "$kv" "$WORK/reclaimer.yaml" || fail "reclaimer config lacks '$kv': $cm"
done
# The daemon itself accepts the rendered file (a store of our own, not
# mounted: test-store-tmpfs.sh mounts; --once).
store="$WORK/store"
mkdir "$store"
sed -e "s|^store: .*|store: \"$store\"|" -e 's|^store_tmpfs: .*|store_tmpfs: "none"|' \
    "$WORK/reclaimer.yaml" >"$WORK/local.yaml"
"$BIN/tetris-reclaimer" --config "$WORK/local.yaml" --once --listen "" \
    2>"$WORK/once.log" || fail "tetris-reclaimer rejects the rendered config: $(cat "$WORK/once.log")"

sched="$(doc "$WORK/default.yaml" ConfigMap tetris-scheduler | jq -r '.data["config.yaml"]')"
printf '%s\n' "$sched" | grep -qx 'apiVersion: kubescheduler.config.k8s.io/v1' ||
    fail "default scheduler config is not v1: $sched"
printf '%s\n' "$sched" | grep -qx -- '- urlPrefix: http://127.0.0.1:8888' || fail "no extender in $sched"
dep="$(doc "$WORK/default.yaml" Deployment tetris-scheduler)"
expect "$dep" '[.spec.template.spec.containers[].name] == ["kube-scheduler", "extender"]' \
    "scheduler pod is not kube-scheduler + extender"
# helm template's stand-in cluster version decides the default image tag.
expect "$dep" '.spec.template.spec.containers[0].image | test("^\"?registry.k8s.io/kube-scheduler:v[0-9]+\\.[0-9]+\\.[0-9]+\"?$")' \
    "kube-scheduler image does not follow the cluster's version"
for kind in ServiceMonitor; do
    [ -z "$(jq -c "select(.kind == \"$kind\")" "$WORK/default.yaml.json")" ] || fail "$kind rendered by default"
done
[ -z "$(doc "$WORK/default.yaml" Deployment tetris-autoscaler)" ] || fail "autoscaler rendered by default"
[ -z "$(doc "$WORK/default.yaml" Deployment tetris-webhook)" ] || fail "webhook rendered by default"
[ -z "$(jq -c 'select(.kind == "MutatingWebhookConfiguration")' "$WORK/default.yaml.json")" ] ||
    fail "webhook configuration rendered by default"
# Cluster-scoped RBAC of the scheduler, as the upstream second-scheduler guide.
for role in system:kube-scheduler system:volume-scheduler; do
    [ -n "$(jq -c --arg r "$role" 'select(.kind == "ClusterRoleBinding" and .roleRef.name == $r)' \
        "$WORK/default.yaml.json")" ] || fail "tetris-scheduler is not bound to $role"
done

# Everything on: v1beta1, leader election, autoscaler, ServiceMonitor, API credentials.
render "$WORK/all.yaml" -n tetris-system -f "$ALL" --kube-version 1.20.2
sched="$(doc "$WORK/all.yaml" ConfigMap tetris-scheduler | jq -r '.data["config.yaml"]')"
printf '%s\n' "$sched" | grep -qx 'apiVersion: kubescheduler.config.k8s.io/v1beta1' ||
    fail "configApiVersion=v1beta1 not honoured: $sched"
printf '%s\n' "$sched" | grep -qx '  leaderElect: true' || fail "leader election not on: $sched"
auto="$(doc "$WORK/all.yaml" Deployment tetris-autoscaler)"
[ -n "$auto" ] || fail "no autoscaler Deployment"
expect "$auto" '.spec.template.spec.containers[0].args |
    index("--function=ocr-rec=configmap:tetris-system/tetris-profile-ocr-rec") != null and
    index("--prometheus=http://prometheus.openfaas:9090") != null and index("--sharing") != null and
    index("--max-instances=50") != null and index("--gateway-job=openfaas-pods|openfaas-gateway") != null and
    index("--gateway-instance=.+") != null' \
    "autoscaler arguments (the gateway's series only, an instance cap)"
expect "$(jq -c 'select(.kind == "Role" and .metadata.name == "tetris-autoscaler")' "$WORK/all.yaml.json")" \
    '.metadata.namespace == "openfaas-fn" and ([.rules[].resources[]] | index("deployments/scale") != null)' \
    "autoscaler cannot scale the function Deployments"
[ -n "$(doc "$WORK/all.yaml" ServiceMonitor tetris-reclaimer)" ] || fail "no ServiceMonitor"
ds="$(doc "$WORK/all.yaml" DaemonSet tetris-reclaimer)"
expect "$ds" '.spec.template.spec.automountServiceAccountToken == false and
    ([.spec.template.spec.containers[] | select(.name == "node-pins") | .volumeMounts[] |
      select(.mountPath == "/var/run/secrets/kubernetes.io/serviceaccount")] | length) == 1' \
    "apiAccess.secretName does not reach node-pins"
expect "$ds" '.spec.template.spec.containers[0].args | index("--no-tenants") != null' "maxTenants 0 is not --no-tenants"
# The budgets reach the daemon's file, and the daemon accepts it.
doc "$WORK/all.yaml" ConfigMap tetris-reclaimer | jq -r '.data["reclaimer.yaml"]' |
    sed -e "s|^store: .*|store: \"$store\"|" -e '/^state_file:/d' -e 's|^store_tmpfs: .*|store_tmpfs: "none"|' \
    >"$WORK/all-reclaimer.yaml"
for kv in 'max_connections_per_uid: 100' 'max_connections_per_pid: 4' 'max_request_bytes: "2Gi"' \
    'ingest_timeout: "45s"' 'health_deadline: "2m"'; do
    grep -qxF "$kv" "$WORK/all-reclaimer.yaml" || fail "reclaimer config lacks '$kv'"
done
grep -qxF 'registries: "registry.example:5000,[fd00::1]:443,http://registry.local:5000"' "$WORK/all-reclaimer.yaml" ||
    fail "reclaimer.registries does not reach the daemon's file: $(grep registries "$WORK/all-reclaimer.yaml")"
"$BIN/tetris-reclaimer" --config "$WORK/all-reclaimer.yaml" --once --listen "" \
    2>"$WORK/once-all.log" || fail "tetris-reclaimer rejects the budgets: $(cat "$WORK/once-all.log")"
# The registries' credentials and CA: the daemon's container alone mounts
# them (not the init container, not node-pins), read-only, named by flags.
expect "$ds" '.spec.template.spec.containers[0] as $c | $c.name == "reclaimer" and
    ($c.args | index("--registry-auth=/etc/tetris-registry-auth/.dockerconfigjson")) != null and
    ($c.args | index("--registry-ca=/etc/tetris-registry-ca/bundle.pem")) != null and
    ([$c.volumeMounts[] | select(.name == "registry-auth" or .name == "registry-ca") |
      [.mountPath, .readOnly]] == [["/etc/tetris-registry-auth", true], ["/etc/tetris-registry-ca", true]])' \
    "registryAuth/registryCA do not reach the daemon as flags and read-only mounts"
# Runtimes to derive with are code the daemon runs: a flag, never the file.
expect "$ds" '.spec.template.spec.containers[0].args |
    index("--derive-runtimes=/opt/tetris/runtimes/onnxruntime-node-1.22.0/libonnxruntime.so.1,/opt/rt/b.so") != null' \
    "reclaimer.deriveRuntimes does not reach the daemon as --derive-runtimes"
grep -q derive "$WORK/all-reclaimer.yaml" && fail "deriveRuntimes in the daemon's config file"
expect "$ds" '[.spec.template.spec.initContainers[]?, .spec.template.spec.containers[1:][] |
    .volumeMounts[]? | select(.name | startswith("registry-"))] == []' \
    "the registries' credentials reach a container other than the daemon"
expect "$ds" '[.spec.template.spec.volumes[] | select(.name | startswith("registry-"))] ==
    [{"name": "registry-auth", "secret": {"secretName": "tetris-registry", "defaultMode": 256,
      "items": [{"key": ".dockerconfigjson", "path": ".dockerconfigjson"}]}},
     {"name": "registry-ca", "configMap": {"name": "tetris-registry-ca",
      "items": [{"key": "bundle.pem", "path": "bundle.pem"}]}}]' \
    "registry volumes: not the dockerconfigjson Secret and the CA ConfigMap"
expect "$(doc "$WORK/all.yaml" Deployment tetris-scheduler)" \
    '[.spec.template.spec.containers[] | select(.name == "extender") | .args[]] |
     index("--inventory-url-ports=9465,9200-9299") != null' \
    "extender.inventoryUrlPorts does not reach the extender"

# 3b. The webhook.
"$HELM" lint --strict "$CHART" --set webhook.enabled=true >"$WORK/lint" 2>&1 ||
    fail "helm lint --strict with the webhook: $(cat "$WORK/lint")"
render "$WORK/webhook.yaml" -n tetris-system --kube-version 1.22.0 --set webhook.enabled=true \
    --set webhook.storeSubdir=public
wd="$(doc "$WORK/webhook.yaml" Deployment tetris-webhook)"
[ -n "$wd" ] || fail "webhook.enabled renders no Deployment tetris-webhook"
mwc="$(doc "$WORK/webhook.yaml" MutatingWebhookConfiguration tetris-webhook)"
[ -n "$mwc" ] || fail "no MutatingWebhookConfiguration tetris-webhook"
wargs="$(printf '%s' "$wd" | jq -c '.spec.template.spec.containers[0].args')"
expect "$wargs" 'index("--store=/dev/shm/tetris") != null and index("--store-subdir=public") != null and
    index("--namespace=openfaas-fn") != null and index("--scheduler=tetris-scheduler") != null and
    index("--webhook-configuration=tetris-webhook") != null and
    index("--service=tetris-webhook") != null and index("--service-namespace=tetris-system") != null and
    index("--manifest-namespace=tetris-system") != null' "webhook arguments: $wargs"
expect "$wd" '.spec.replicas == 1 and .spec.strategy.type == "Recreate"' \
    "two webhook processes would fight over the caBundle"
expect "$mwc" '.webhooks | length == 1' "one webhook"
expect "$mwc" '.webhooks[0] | .failurePolicy == "Ignore" and .timeoutSeconds <= 10 and
    .sideEffects == "NoneOnDryRun" and (.admissionReviewVersions | index("v1") != null and
    index("v1beta1") != null) and .rules == [{"operations": ["CREATE"], "apiGroups": [""],
    "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}] and
    (.clientConfig.caBundle // "") == "" and
    .namespaceSelector.matchExpressions[0].values == ["openfaas-fn"]' "webhook configuration: $mwc"
svc="$(doc "$WORK/webhook.yaml" Service tetris-webhook)"
expect "$mwc" ".webhooks[0].clientConfig.service | .name == \"tetris-webhook\" and
    .namespace == \"tetris-system\" and .port == $(printf '%s' "$svc" | jq '.spec.ports[0].port')" \
    "the configuration does not name the Service"
expect "$(doc "$WORK/webhook.yaml" ClusterRole tetris-webhook)" '[.rules[] |
    select(.resources == ["mutatingwebhookconfigurations"])] == [{"apiGroups":
    ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
    "resourceNames": ["tetris-webhook"], "verbs": ["get", "patch"]}] and
    ([.rules[].resources[]] | index("configmaps") == null)' \
    "webhook ClusterRole is wider than its configuration and namespaces"
expect "$(jq -c 'select(.kind == "Role" and .metadata.name == "tetris-webhook-copies")' \
    "$WORK/webhook.yaml.json")" '.metadata.namespace == "openfaas-fn" and
    .rules[0].verbs == ["get", "create", "patch"]' "no ConfigMap copies in openfaas-fn"
# Kubernetes 1.20 has no kubernetes.io/metadata.name label on namespaces.
render "$WORK/webhook120.yaml" -n tetris-system --kube-version 1.20.2 --set webhook.enabled=true
expect "$(doc "$WORK/webhook120.yaml" MutatingWebhookConfiguration tetris-webhook)" \
    '.webhooks[0].namespaceSelector == null' "1.20: namespaceSelector on a label it lacks"
# The program accepts the rendered arguments (on loopback, without a cluster).
set -- $(printf '%s' "$wargs" | jq -r '.[] | select(startswith("--listen") | not)')
"$BIN/tetris-webhook" "$@" --no-api --listen 127.0.0.1:0 2>"$WORK/webhook.log" &
wpid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $wpid"
wait_until 60 "grep -q event=listening '$WORK/webhook.log' || ! kill -0 $wpid" || fail "webhook hangs"
grep -q 'event=listening.*store_subdir=public' "$WORK/webhook.log" ||
    fail "tetris-webhook rejects the rendered arguments: $(cat "$WORK/webhook.log")"
kill -TERM "$wpid"
wait "$wpid" || fail "webhook: exit status $? on SIGTERM"
set --
# values-all: the URL (single-node clusters), every namespace.
wmwc="$(doc "$WORK/all.yaml" MutatingWebhookConfiguration tetris-webhook)"
expect "$wmwc" '.webhooks[0].clientConfig == {"url": "https://127.0.0.1:8443/mutate"} and
    .webhooks[0].failurePolicy == "Fail"' "webhook.url not honoured: $wmwc"
expect "$(doc "$WORK/all.yaml" Deployment tetris-webhook)" '.spec.template.spec.hostNetwork == true and
    (.spec.template.spec.containers[0].args | index("--cert-name=127.0.0.1") != null and
     (map(select(startswith("--namespace="))) | length) == 0)' "webhook with url and every namespace"
expect "$(doc "$WORK/all.yaml" ClusterRole tetris-webhook)" \
    '[.rules[].resources[]] | index("configmaps") == null' "every namespace: ConfigMaps writable cluster-wide"

# values-local-cluster.yaml (docs/OPENFAAS.md): nothing pulled, the
# apiserver and the node daemon on loopback, the webhook called there.
render "$WORK/local.yaml" -n tetris-system --kube-version 1.20.2 -f "$CHART/values-local-cluster.yaml"
expect "$(doc "$WORK/local.yaml" MutatingWebhookConfiguration tetris-webhook)" \
    '.webhooks[0].clientConfig == {"url": "https://127.0.0.1:8443/mutate"}' "local cluster: webhook URL"
for d in tetris-scheduler tetris-webhook; do
    expect "$(doc "$WORK/local.yaml" Deployment "$d")" '.spec.template.spec.hostNetwork == true and
        ([.spec.template.spec.containers[].imagePullPolicy] | unique == ["Never"]) and
        ([.spec.template.spec.volumes[] | select(.secret.secretName == "tetris-api-'"$d"'")] | length == 1)' \
        "local cluster: $d not on the host's network, pulling, or without its own token"
done
expect "$(doc "$WORK/local.yaml" Deployment tetris-scheduler)" \
    '.spec.template.spec.containers[0].image == "tetris-kube-scheduler:v1.20.2"' \
    "local cluster: kube-scheduler is not the cluster's own build"
expect "$(doc "$WORK/local.yaml" DaemonSet tetris-reclaimer)" '.spec.template.spec.initContainers == null and
    (.spec.template.spec.containers[0].args | index("--listen=127.0.0.1:9464") != null)' \
    "local cluster: the daemon mounts a tmpfs or does not serve where the node says"

# 3c. Tenants: the list reaches the daemon's file and the webhook's
# arguments, the daemon makes exactly those stores, and the webhook takes
# the arguments.
render "$WORK/tenants.yaml" -n tetris-system --set webhook.enabled=true --set 'tenants={alpha,beta}'
doc "$WORK/tenants.yaml" ConfigMap tetris-reclaimer | jq -r '.data["reclaimer.yaml"]' |
    sed -e "s|^store: .*|store: \"$WORK/tstore\"|" -e 's|^store_tmpfs: .*|store_tmpfs: "none"|' \
    >"$WORK/tenants-reclaimer.yaml"
grep -qxF 'tenants: "alpha,beta"' "$WORK/tenants-reclaimer.yaml" ||
    fail "tenants do not reach the daemon's file: $(grep tenants "$WORK/tenants-reclaimer.yaml")"
mkdir -p "$WORK/tstore/tenants/stray"
"$BIN/tetris-reclaimer" --config "$WORK/tenants-reclaimer.yaml" --once --listen "" \
    2>"$WORK/once-tenants.log" || fail "tetris-reclaimer rejects the tenants: $(cat "$WORK/once-tenants.log")"
[ -d "$WORK/tstore/tenants/alpha/public" ] && [ -d "$WORK/tstore/tenants/beta/public" ] ||
    fail "the daemon did not make the configured tenants' stores"
[ -e "$WORK/tstore/tenants/stray/public" ] && fail "the daemon laid out an unconfigured directory"
targs="$(doc "$WORK/tenants.yaml" Deployment tetris-webhook | jq -c '.spec.template.spec.containers[0].args')"
expect "$targs" 'map(select(startswith("--tenant="))) == ["--tenant=alpha", "--tenant=beta"]' \
    "tenants do not reach the webhook: $targs"
set -- $(printf '%s' "$targs" | jq -r '.[] | select(startswith("--listen") | not)')
"$BIN/tetris-webhook" "$@" --no-api --listen 127.0.0.1:0 2>"$WORK/twebhook.log" &
wpid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $wpid"
wait_until 60 "grep -q event=listening '$WORK/twebhook.log' || ! kill -0 $wpid" || fail "webhook hangs"
grep -q 'event=listening.* tenants=2' "$WORK/twebhook.log" ||
    fail "tetris-webhook rejects the rendered tenants: $(cat "$WORK/twebhook.log")"
kill -TERM "$wpid"
wait "$wpid" || fail "webhook: exit status $? on SIGTERM"
set --
# maxTenants 0: no tenant anywhere, whatever the list says.
render "$WORK/tenants0.yaml" --set webhook.enabled=true --set 'tenants={alpha}' --set reclaimer.maxTenants=0
expect "$(doc "$WORK/tenants0.yaml" Deployment tetris-webhook)" \
    '.spec.template.spec.containers[0].args | map(select(startswith("--tenant="))) == []' \
    "maxTenants 0 still gives the webhook tenants"

# 3d. The CSI driver: nothing by default; with csi.enabled the CSIDriver
# object, tetris-csi in the node daemon's pod, the tenant map, which the
# plugin accepts, and the webhook's --volume csi.
[ -z "$(jq -c 'select(.kind == "CSIDriver")' "$WORK/default.yaml.json")" ] || fail "CSIDriver rendered by default"
expect "$(doc "$WORK/default.yaml" DaemonSet tetris-reclaimer)" \
    '[.spec.template.spec.containers[].name] | index("csi") == null' "tetris-csi rendered by default"
printf '%s\n' 'tenants: [alpha, beta]' 'webhook:' '  enabled: true' '  volume: csi' 'csi:' '  enabled: true' \
    '  kubeletDir: /srv/kubelet/' '  modelsDir: /srv/models' '  maxVolumes: 32' '  tenantMap:' \
    '  - {namespace: team-a, tenant: alpha}' '  - {namespace: team-b, serviceAccount: inference, tenant: beta}' \
    '  - {namespace: team-b, shared: true}' >"$WORK/csi-values.yaml"
"$HELM" lint --strict "$CHART" -f "$WORK/csi-values.yaml" >"$WORK/lint" 2>&1 ||
    fail "helm lint --strict with the CSI driver: $(cat "$WORK/lint")"
render "$WORK/csi.yaml" -n tetris-system -f "$WORK/csi-values.yaml"
expect "$(doc "$WORK/csi.yaml" CSIDriver csi.tetris.io)" '.apiVersion == "storage.k8s.io/v1" and
    .spec == {"attachRequired": false, "podInfoOnMount": true, "volumeLifecycleModes": ["Ephemeral"]}' \
    "the CSIDriver is not ephemeral, with the pod's identity and no attach"
ds="$(doc "$WORK/csi.yaml" DaemonSet tetris-reclaimer)"
csic="$(printf '%s' "$ds" | jq -c '.spec.template.spec.containers[] | select(.name == "csi")')"
[ -n "$csic" ] || fail "csi.enabled renders no tetris-csi container in the daemon's pod"
expect "$csic" '.command == ["/usr/local/bin/tetris-csi"] and .args == ["--store=/dev/shm/tetris",
    "--csi-socket=/srv/kubelet/plugins/csi.tetris.io/csi.sock", "--registry-dir=/srv/kubelet/plugins_registry",
    "--pods-dir=/srv/kubelet/pods", "--models-dir=/srv/models", "--max-volumes=32",
    "--tenant-map=/etc/tetris-csi/tenant-map"]' "tetris-csi's arguments: $(printf '%s' "$csic" | jq -c .args)"
# Each directory is the host's, at the same path (the kubelet names host
# paths), the pods directory with its mounts propagated both ways.
expect "$ds" '.spec.template.spec as $s | [$s.containers[] | select(.name == "csi") | .volumeMounts[] |
    . as $m | {path: .mountPath, prop: .mountPropagation, ro: (.readOnly // false),
      host: ($s.volumes[] | select(.name == $m.name) | (.hostPath.path // .configMap.name))}] ==
    [{path: "/dev/shm/tetris", prop: null, ro: false, host: "/dev/shm/tetris"},
     {path: "/srv/kubelet/plugins/csi.tetris.io", prop: null, ro: false, host: "/srv/kubelet/plugins/csi.tetris.io"},
     {path: "/srv/kubelet/plugins_registry", prop: null, ro: false, host: "/srv/kubelet/plugins_registry"},
     {path: "/srv/kubelet/pods", prop: "Bidirectional", ro: false, host: "/srv/kubelet/pods"},
     {path: "/srv/models", prop: null, ro: true, host: "/srv/models"},
     {path: "/etc/tetris-csi", prop: null, ro: true, host: "tetris-csi"}]' \
    "tetris-csi's mounts: $(printf '%s' "$csic" | jq -c .volumeMounts)"
# tetris-csi follows its map's file: a changed map rolls nothing.
expect "$ds" '.spec.template.metadata.annotations | has("checksum/csi") | not' "a changed tenant map rolls the daemons"
doc "$WORK/csi.yaml" ConfigMap tetris-csi | jq -r '.data["tenant-map"]' >"$WORK/tenant-map"
[ "$(grep -v '^#' "$WORK/tenant-map")" = "$(printf 'team-a * tenant:alpha\nteam-b inference tenant:beta\nteam-b * shared')" ] ||
    fail "the tenant map: $(cat "$WORK/tenant-map")"
expect "$(doc "$WORK/csi.yaml" Deployment tetris-webhook)" '.spec.template.spec.containers[0].args |
    index("--volume=csi") != null and index("--csi-driver=csi.tetris.io") != null' \
    "webhook.volume csi does not reach the webhook"
# The plugin takes the rendered arguments and map (directories of its own;
# no kubelet, no mount: it starts, reads the map and stops).
"$BIN/tetris-reclaimer" --store "$WORK/cstore" --tenants alpha,beta --once --listen "" \
    2>"$WORK/once-csi.log" || fail "tetris-reclaimer for the CSI store: $(cat "$WORK/once-csi.log")"
mkdir -p "$WORK/kubelet/pods" "$WORK/kubelet/plugins_registry" "$WORK/kubelet/plugins/csi.tetris.io" \
    "$WORK/models"
set -- $(printf '%s' "$csic" | jq -r '.args[]' | sed -e "s|^--store=.*|--store=$WORK/cstore|" \
    -e "s|/srv/kubelet|$WORK/kubelet|" -e "s|/srv/models|$WORK/models|" \
    -e "s|/etc/tetris-csi/tenant-map|$WORK/tenant-map|")
"$BIN/tetris-csi" "$@" 2>"$WORK/csi.log" &
cpid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $cpid"
wait_until 60 "grep -q event=started '$WORK/csi.log' || ! kill -0 $cpid" || fail "tetris-csi hangs"
grep -q 'event=tenant-map-read .* rules=3' "$WORK/csi.log" && grep -q event=started "$WORK/csi.log" ||
    fail "tetris-csi rejects the rendered arguments or map: $(cat "$WORK/csi.log")"
kill -TERM "$cpid"
wait "$cpid" || fail "tetris-csi: exit status $? on SIGTERM"
set --
# Pods no rule maps: the shared store's when asked; no map, no ConfigMap.
render "$WORK/csi-shared.yaml" -f "$WORK/csi-values.yaml" --set csi.unmappedPods=shared
doc "$WORK/csi-shared.yaml" ConfigMap tetris-csi | jq -r '.data["tenant-map"]' | grep -qx '\* \* shared' ||
    fail "csi.unmappedPods=shared does not end the map with * * shared"
render "$WORK/csi-nomap.yaml" --set csi.enabled=true
[ -z "$(doc "$WORK/csi-nomap.yaml" ConfigMap tetris-csi)" ] || fail "a tenant map ConfigMap without csi.tenantMap"
expect "$(doc "$WORK/csi-nomap.yaml" DaemonSet tetris-reclaimer)" '[.spec.template.spec.containers[] |
    select(.name == "csi") | .args[] | select(startswith("--tenant-map"))] == []' "--tenant-map without a map"

# 3. Bad values fail with a clear message.
bad() {
    _want="$1"; shift
    if "$HELM" template tetris "$CHART" "$@" >/dev/null 2>"$WORK/bad.err"; then
        fail "helm template $* succeeded"
    fi
    grep -q -- "$_want" "$WORK/bad.err" || fail "helm template $*: want '$_want' in: $(cat "$WORK/bad.err")"
}
bad "below reclaimer.capacity" --set reclaimer.resources.limits.memory=1Gi
bad "reclaimer.capacity is 0" --set reclaimer.resources.limits.memory=1Gi --set reclaimer.capacity=0
bad "reclaimer.capacity: Does not match pattern" --set reclaimer.capacity=lots
bad "configApiVersion must be one of" --set scheduler.configApiVersion=v2
bad "Additional property nosuch is not allowed" --set reclaimer.nosuch=1
bad "autoscaler.prometheusUrl" --set autoscaler.enabled=true
bad "failurePolicy must be one of" --set webhook.failurePolicy=Sometimes
bad "storeSubdir: Does not match pattern" --set webhook.storeSubdir=../up
bad "tmpfs must be one of" --set reclaimer.store.tmpfs=always
bad "name a configMap or a secret, not both" --set reclaimer.registryCA.configMap=a \
    --set reclaimer.registryCA.secret=b
bad "registries.0: Does not match pattern" --set 'reclaimer.registries={https://registry.example:5000}'
bad "registries.0: Does not match pattern" --set 'reclaimer.registries={ftp://registry.example:5000}'
bad "registries.0: Does not match pattern" --set 'reclaimer.registries={registry.example}'
bad "deriveRuntimes.0: Does not match pattern" --set 'reclaimer.deriveRuntimes={lib/libonnxruntime.so.1}'
render "$WORK/ca-secret.yaml" --set reclaimer.registryCA.secret=corp-ca
expect "$(doc "$WORK/ca-secret.yaml" DaemonSet tetris-reclaimer)" \
    '[.spec.template.spec.volumes[] | select(.name == "registry-ca")] ==
     [{"name": "registry-ca", "secret": {"secretName": "corp-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}] and
     (.spec.template.spec.containers[0].args | index("--registry-ca=/etc/tetris-registry-ca/ca.crt")) != null' \
    "registryCA.secret: not a Secret volume and --registry-ca"
bad "tenants.1: Does not match pattern" --set 'tenants={alpha,../x}'
bad "tenants.0: Does not match pattern" --set 'tenants={Alpha}'
bad "more than reclaimer.maxTenants (2)" --set 'tenants={a,b,c}' --set reclaimer.maxTenants=2
render "$WORK/no-tmpfs.yaml" --set reclaimer.store.tmpfs=none
expect "$(doc "$WORK/no-tmpfs.yaml" DaemonSet tetris-reclaimer)" '.spec.template.spec.initContainers == null' \
    "reclaimer.store.tmpfs=none still renders an init container"
doc "$WORK/no-tmpfs.yaml" ConfigMap tetris-reclaimer | jq -r '.data["reclaimer.yaml"]' |
    grep -qxF 'store_tmpfs: "none"' || fail "reclaimer.store.tmpfs=none does not reach the daemon's file"
bad "timeoutSeconds: Must be less than or equal to 30" --set webhook.timeoutSeconds=60
bad "webhook.volume csi gives pods a volume of the CSI driver: set csi.enabled" \
    --set webhook.enabled=true --set webhook.volume=csi
bad "volume must be one of" --set webhook.volume=nfs
bad "to tenant gamma, which is not in tenants" -f "$WORK/csi-values.yaml" --set 'csi.tenantMap[0].tenant=gamma'
bad "which is not in tenants (or reclaimer.maxTenants is 0)" -f "$WORK/csi-values.yaml" \
    --set reclaimer.maxTenants=0
bad "two rules for namespace team-b, service account inference" -f "$WORK/csi-values.yaml" \
    --set 'csi.tenantMap[2].serviceAccount=inference'
bad "csi.tenantMap with reclaimer.tenantUids" -f "$WORK/csi-values.yaml" --set reclaimer.tenantUids=alpha=60001
bad "Must validate one and only one schema" -f "$WORK/csi-values.yaml" --set 'csi.tenantMap[0].shared=true'
bad "tenantMap.0.namespace: Does not match pattern" -f "$WORK/csi-values.yaml" --set 'csi.tenantMap[0].namespace=*'
bad "unmappedPods must be one of" --set csi.unmappedPods=sometimes
"$HELM" template tetris "$CHART" --set reclaimer.resources.limits.memory=9Gi >/dev/null 2>&1 ||
    fail "a memory limit above the capacity is refused"

# 4. The programs' names (protocol/names.h) in the default rendering.
name() { sed -n "s/^#define $1 \"\{0,1\}\([^\" ]*\).*/\1/p" "$ROOT/protocol/names.h"; }
ds="$(doc "$WORK/default.yaml" DaemonSet tetris-reclaimer)"
expect "$ds" ".spec.template.spec.volumes[] | select(.name == \"store\") | .hostPath.path == \"$(name TETRIS_STORE_DIR)\"" \
    "store hostPath is not TETRIS_STORE_DIR"
expect "$ds" ".spec.template.metadata.annotations | has(\"$(name TETRIS_ANNOTATION_SCRAPE)\") and
    has(\"$(name TETRIS_ANNOTATION_SCRAPE_PORT)\") and has(\"$(name TETRIS_ANNOTATION_SCRAPE_PATH)\")" \
    "scrape annotations are not protocol/names.h's"
expect "$ds" ".spec.template.metadata.annotations[\"$(name TETRIS_ANNOTATION_SCRAPE_PORT)\"] == \"$(name TETRIS_RECLAIMER_PORT)\"" \
    "reclaimer port is not TETRIS_RECLAIMER_PORT"
expect "$ds" "[.spec.template.spec.containers[].env[] | select(.valueFrom.fieldRef.fieldPath == \"spec.nodeName\") |
    .name] | unique == [\"$(name TETRIS_ENV_NODE_NAME)\"]" "node name variable is not TETRIS_ENV_NODE_NAME"
expect "$ds" ".spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0] |
    .key == \"$(name TETRIS_LABEL_NODE_KIND)\" and .values == [\"$(name TETRIS_NODE_KIND_API_ONLY)\"]" \
    "API-only node label is not TETRIS_LABEL_NODE_KIND"
# The scheduler, the autoscaler and the webhook stay off API-only nodes
# too (a pod bound there never runs), unless told otherwise.
off_api_only=".spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms ==
    [{\"matchExpressions\": [{\"key\": \"$(name TETRIS_LABEL_NODE_KIND)\", \"operator\": \"NotIn\",
      \"values\": [\"$(name TETRIS_NODE_KIND_API_ONLY)\"]}]}]"
expect "$(doc "$WORK/default.yaml" Deployment tetris-scheduler)" "$off_api_only" \
    "the scheduler may land on an API-only node"
expect "$(doc "$WORK/webhook.yaml" Deployment tetris-webhook)" "$off_api_only" \
    "the webhook may land on an API-only node"
expect "$(doc "$WORK/all.yaml" Deployment tetris-autoscaler)" "$off_api_only" \
    "the autoscaler may land on an API-only node"
printf 'webhook:\n  tolerations: [{operator: Exists}]\n' >"$WORK/tolerate.yaml"
render "$WORK/anywhere.yaml" --set webhook.enabled=true --set scheduler.affinity=null \
    --set webhook.affinity=null -f "$WORK/tolerate.yaml"
for d in tetris-scheduler tetris-webhook; do
    expect "$(doc "$WORK/anywhere.yaml" Deployment "$d")" '.spec.template.spec.affinity == null' \
        "$d: affinity=null does not drop the default rule"
done
expect "$(doc "$WORK/anywhere.yaml" Deployment tetris-webhook)" \
    '.spec.template.spec.tolerations == [{"operator": "Exists"}]' "webhook.tolerations not honoured"
sched="$(doc "$WORK/default.yaml" ConfigMap tetris-scheduler | jq -r '.data["config.yaml"]')"
printf '%s\n' "$sched" | grep -qx -- "- schedulerName: $(name TETRIS_SCHEDULER_NAME)" ||
    fail "scheduler is not TETRIS_SCHEDULER_NAME: $sched"
printf '%s\n' "$sched" | grep -qx -- "- urlPrefix: http://127.0.0.1:$(name TETRIS_EXTENDER_PORT)" ||
    fail "extender is not at TETRIS_EXTENDER_PORT: $sched"
wd="$(doc "$WORK/webhook.yaml" Deployment tetris-webhook)"
expect "$wd" ".spec.template.spec.containers[0].ports[0].containerPort == $(name TETRIS_WEBHOOK_PORT)" \
    "webhook port is not TETRIS_WEBHOOK_PORT"
expect "$(doc "$WORK/webhook.yaml" MutatingWebhookConfiguration "$(name TETRIS_WEBHOOK_CONFIGURATION)")" \
    ".webhooks[0].clientConfig.service | .path == \"$(name TETRIS_WEBHOOK_PATH)\" and
     .name == \"$(name TETRIS_WEBHOOK_SERVICE)\"" "webhook path or Service is not protocol/names.h's"
grep -q "$(name TETRIS_LABEL_MODEL): MODEL" "$CHART/templates/NOTES.txt" || fail "NOTES do not label pods TETRIS_LABEL_MODEL"
[ -n "$(doc "$WORK/csi.yaml" CSIDriver "$(name TETRIS_CSI_DRIVER)")" ] || fail "the CSIDriver is not TETRIS_CSI_DRIVER"
render "$WORK/csi-default.yaml" --set csi.enabled=true
expect "$(doc "$WORK/csi-default.yaml" DaemonSet tetris-reclaimer)" "[.spec.template.spec.containers[] |
    select(.name == \"csi\") | .args[]] as \$a | (\$a | index(\"--registry-dir=$(name TETRIS_KUBELET_REGISTRY_DIR)\")) != null and
    (\$a | index(\"--pods-dir=$(name TETRIS_KUBELET_PODS_DIR)\")) != null and
    (\$a | index(\"--models-dir=$(name TETRIS_MODEL_HOST_DIR)\")) != null" \
    "tetris-csi's default directories are not protocol/names.h's"

# The files in deploy/ rendered from the chart are up to date.
"$ROOT/scripts/gen-deploy.sh" "$WORK/deploy" 2>"$WORK/gen.err" ||
    fail "scripts/gen-deploy.sh: $(cat "$WORK/gen.err")"
for f in reclaimer.yaml scheduler/kube-scheduler-v1.yaml scheduler/kube-scheduler-v1beta1.yaml; do
    diff -u "$ROOT/deploy/$f" "$WORK/deploy/$f" >"$WORK/gen.diff" ||
        fail "deploy/$f is not the chart's rendering (run scripts/gen-deploy.sh): $(head -20 "$WORK/gen.diff")"
done
echo "helm render: ok" >&2
