#!/bin/sh
# test-privilege.sh - every workload of the Helm chart runs with the
# privileges docs/SECURITY.md ("Privileges") lists, and no more:
#  1. every container drops every capability, runs under the runtime's
#     default seccomp profile on a read-only root filesystem, is never
#     privileged and cannot gain privileges; the daemon and its init
#     container run as root (the store's owner), the init container with
#     exactly SYS_ADMIN, SYS_CHROOT and SYS_PTRACE and no AppArmor profile;
#     every other container runs as uid 65532 (runAsNonRoot); but for
#     tetris-csi (csi.enabled): root, privileged, on a read-only root
#     filesystem, the one container with a Bidirectional mount (the
#     kubelet's pods directory, and nothing else);
#  2. in the daemon's pod only tetris-node-pins holds a service-account
#     token (projected, or the apiAccess Secret);
#  3. each Role and ClusterRole grants exactly the verbs its program calls;
#  4. no Role or ClusterRole bound to a tetris service account can create,
#     update, patch or delete ConfigMaps in the namespace of the daemon's
#     settings (tetris-reclaimer), whatever webhook.namespaces lists;
# with the default values, with every optional part on
# (tests/helm/values-all.yaml), the local cluster's values, and the
# renderings that used to widen RBAC. No cluster needed.
. "$(dirname "$0")/../lib/common.sh"
CHART="$ROOT/charts/tetris"
ALL="$ROOT/tests/helm/values-all.yaml"
HELM="$("$ROOT/scripts/helm.sh")" || fail "cannot install helm (scripts/helm.sh)"
NS=tetris-system

# render NAME ARGS...: helm template into $WORK/NAME.json (one object a line).
render() {
    _out="$WORK/$1"; shift
    "$HELM" template tetris "$CHART" -n "$NS" "$@" >"$_out.yaml" 2>"$_out.err" ||
        fail "helm template $*: $(cat "$_out.err")"
    yq -c 'select(. != null)' "$_out.yaml" >"$_out.json" 2>"$_out.err" ||
        fail "rendered YAML does not parse: $(cat "$_out.err")"
}
# check NAME JQ WHAT: the filter, given every object as an array, is true.
check() {
    [ "$(jq -s "$2" "$WORK/$1.json")" = true ] || fail "$1: $3 (jq: $2)"
}

# Every container of every pod template: {pod, kind, annotations, spec, c}.
CONTAINERS='[.[] | select(.spec.template.spec != null) | . as $w |
    (.spec.template.spec.initContainers // []) + .spec.template.spec.containers | .[] |
    {pod: $w.metadata.name, annotations: ($w.spec.template.metadata.annotations // {}),
     spec: $w.spec.template.spec, c: .}]'
UNPRIVILEGED='{"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
    "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}'
DAEMON='{"runAsUser": 0, "runAsNonRoot": false, "allowPrivilegeEscalation": false,
    "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"], "add": ["SETUID", "SETGID", "CHOWN"]},
    "seccompProfile": {"type": "RuntimeDefault"}}'
CSI='{"privileged": true, "runAsUser": 0, "runAsNonRoot": false, "readOnlyRootFilesystem": true}'
MOUNT='{"runAsUser": 0, "runAsNonRoot": false, "readOnlyRootFilesystem": true,
    "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"]},
    "seccompProfile": {"type": "RuntimeDefault"}}'
TOKEN=/var/run/secrets/kubernetes.io/serviceaccount

# 1 and 2, for one rendering: WANT names the containers expected.
containers() {
    _r="$1" _want="$2"
    check "$_r" "$CONTAINERS | map(.c.name) | sort == ($_want | sort)" "containers are not $_want"
    check "$_r" "$CONTAINERS | map(select(.c.name | IN(\"reclaimer\", \"store-tmpfs\", \"csi\") | not)) |
        all(.c.securityContext == $UNPRIVILEGED)" "a container other than the daemon's is not unprivileged"
    check "$_r" "$CONTAINERS | map(select(.c.name == \"reclaimer\")) | all(.c.securityContext == $DAEMON)" \
        "the daemon is not root with only what drops its derive child's user"
    check "$_r" "$CONTAINERS | map(select(.c.name == \"store-tmpfs\")) |
        all(.c.securityContext == $MOUNT and
            .annotations[\"container.apparmor.security.beta.kubernetes.io/store-tmpfs\"] == \"unconfined\")" \
        "the mount is not SYS_ADMIN, SYS_CHROOT, SYS_PTRACE, AppArmor unconfined"
    check "$_r" "$CONTAINERS | map(select(.c.name != \"csi\")) | all(.c.securityContext.privileged != true)" \
        "a privileged container"
    check "$_r" "$CONTAINERS | map(select(.c.name == \"csi\")) | all(.pod == \"tetris-reclaimer\" and
        .c.securityContext == $CSI and
        ([.c.volumeMounts[] | select(.mountPropagation != null)] ==
         [{name: \"csi-pods\", mountPath: \"/var/lib/kubelet/pods\", mountPropagation: \"Bidirectional\"}]))" \
        "tetris-csi: not root, privileged, read-only, Bidirectional on the pods directory alone"
    check "$_r" "$CONTAINERS | map(select(.c.name != \"csi\")) | all([.c.volumeMounts[]? |
        select(.mountPropagation != null)] == [])" "mount propagation outside tetris-csi"
    check "$_r" "[.[] | select(.kind == \"DaemonSet\") | .spec.template.spec] | all(
        .automountServiceAccountToken == false and
        ([.containers[] | select(any(.volumeMounts[]; .mountPath == \"$TOKEN\")) | .name] == [\"node-pins\"]))" \
        "in the daemon's pod a container other than node-pins holds a token"
}

# 3 and 4, for one rendering. Rules bound to each tetris service account:
# {sa, ns (the binding's namespace, null: cluster-wide), rule}; roles not
# in the rendering are Kubernetes' own (system:kube-scheduler, ...).
BOUND='. as $all | [.[] | select(.kind == "RoleBinding" or .kind == "ClusterRoleBinding") | . as $b |
    .subjects[] | select(.kind == "ServiceAccount" and .namespace == "'"$NS"'") | .name as $sa |
    $all[] | select(.kind == $b.roleRef.kind and .metadata.name == $b.roleRef.name and
        (.kind == "ClusterRole" or .metadata.namespace == $b.metadata.namespace)) |
    .rules[] | {sa: $sa, ns: $b.metadata.namespace, rule: .}]'
WRITES='["create", "update", "patch", "delete", "deletecollection", "*"]'
rbac() {
    _r="$1"
    # The daemon's settings live in the components' namespace.
    check "$_r" "map(select(.kind == \"ConfigMap\" and .metadata.name == \"tetris-reclaimer\")) |
        .[0].metadata.namespace == \"$NS\"" "the daemon's ConfigMap is not in $NS"
    check "$_r" "$BOUND | map(select((.ns == null or .ns == \"$NS\") and
        (.rule.apiGroups | index(\"\") != null or index(\"*\") != null) and
        (.rule.resources | index(\"configmaps\") != null or index(\"*\") != null) and
        ([.rule.verbs[] | IN($WRITES[])] | any))) == []" \
        "a tetris service account can write ConfigMaps in $NS: $(jq -s -c "$BOUND | map(select(.rule.resources |
            index(\"configmaps\") != null))" "$WORK/$_r.json")"
    # Every external role bound is one of the scheduler's upstream roles.
    check "$_r" '. as $all | [.[] | select(.kind == "RoleBinding" or .kind == "ClusterRoleBinding") |
        .roleRef as $ref | select([$all[] | select(.kind == $ref.kind and .metadata.name == $ref.name)] == []) |
        $ref.name] | unique - ["system:kube-scheduler", "system:volume-scheduler",
        "extension-apiserver-authentication-reader"] == []' "a binding to an unknown role"
    # Exactly what each program calls (docs/SECURITY.md).
    check "$_r" "$BOUND | map(select(.sa == \"tetris-reclaimer\") | .rule) | sort ==
        ([{apiGroups: [\"\"], resources: [\"pods\"], verbs: [\"list\"]},
          {apiGroups: [\"\"], resources: [\"namespaces\"], verbs: [\"get\"]},
          {apiGroups: [\"\"], resources: [\"configmaps\"], verbs: [\"list\"]}] | sort)" \
        "tetris-node-pins: not list pods, get namespaces, list ConfigMaps"
    check "$_r" ". as \$top | $BOUND | map(select(.sa == \"tetris-scheduler\") | .rule) | sort ==
        ([{apiGroups: [\"\"], resources: [\"nodes\"], verbs: [\"list\", \"watch\"]},
          {apiGroups: [\"\"], resources: [\"configmaps\"], verbs: [\"list\", \"watch\"]}] +
         (\$top | map(select(.kind == \"Role\" and .metadata.name == \"tetris-scheduler-leader-election\")) |
          if . == [] then [] else .[0].rules end) | sort)" \
        "tetris-scheduler-ext: not list and watch nodes and manifests"
    check "$_r" ". as \$top | $BOUND | map(select(.sa == \"tetris-webhook\") | .rule | select(.resources != [\"configmaps\"] or
        .verbs != [\"get\", \"create\", \"patch\"])) | sort ==
        (if any(\$top[]; .kind == \"Deployment\" and .metadata.name == \"tetris-webhook\") then
         [{apiGroups: [\"\"], resources: [\"namespaces\"], verbs: [\"get\"]},
          {apiGroups: [\"admissionregistration.k8s.io\"], resources: [\"mutatingwebhookconfigurations\"],
           resourceNames: [\"tetris-webhook\"], verbs: [\"get\", \"patch\"]},
          {apiGroups: [\"\"], resources: [\"configmaps\"], verbs: [\"list\"]}] | sort else [] end)" \
        "tetris-webhook: more than namespaces, its configuration, manifests and copies"
    check "$_r" "$BOUND | map(select(.sa == \"tetris-webhook\" and .rule.resources == [\"configmaps\"] and
        .rule.verbs != [\"list\"]) | .ns) | all(. != null and . != \"$NS\")" \
        "tetris-webhook copies manifests cluster-wide or into $NS"
    check "$_r" ". as \$top | $BOUND | map(select(.sa == \"tetris-autoscaler\")) | all(.ns != null) and
        (map(.rule | select(.resources != [\"configmaps\"])) | sort ==
         (if any(\$top[]; .kind == \"Deployment\" and .metadata.name == \"tetris-autoscaler\") then
          [{apiGroups: [\"apps\"], resources: [\"deployments\"], verbs: [\"get\", \"list\", \"create\", \"delete\"]},
           {apiGroups: [\"apps\"], resources: [\"deployments/scale\"], verbs: [\"patch\"]}] | sort else [] end)) and
        (map(.rule | select(.resources == [\"configmaps\"])) | all(.verbs == [\"get\"] and .resourceNames != null))" \
        "tetris-autoscaler: more than its Deployments and its profiles by name"
}

render default
containers default '["store-tmpfs", "reclaimer", "node-pins", "kube-scheduler", "extender"]'
rbac default
check default "map(select(.kind == \"DaemonSet\")) | .[0].spec.template.spec.volumes |
    map(select(.name == \"api-token\")) | .[0].projected.sources | map(keys[0]) ==
    [\"serviceAccountToken\", \"configMap\", \"downwardAPI\"]" "node-pins has no projected token"

render all -f "$ALL" --kube-version 1.20.2
containers all '["store-tmpfs", "reclaimer", "node-pins", "csi", "kube-scheduler", "extender", "webhook", "autoscaler"]'
rbac all
check all "map(select(.kind == \"DaemonSet\")) | .[0].spec.template.spec |
    [.containers[] | select(any(.volumeMounts[]; .name == \"api-credentials\")) | .name] == [\"node-pins\"]" \
    "apiAccess: the Secret reaches a container other than node-pins"

render local -f "$CHART/values-local-cluster.yaml" --kube-version 1.20.2
containers local '["reclaimer", "node-pins", "kube-scheduler", "extender", "webhook"]'
rbac local

# The webhook told to serve tetris' own namespace copies nothing there
# (the manifests are there already); nor where manifests live elsewhere.
render own --set webhook.enabled=true --set "webhook.namespaces={openfaas-fn,$NS}"
rbac own
check own "map(select(.kind == \"Role\" and .metadata.name == \"tetris-webhook-copies\") | .metadata.namespace) ==
    [\"openfaas-fn\"]" "webhook copies: not openfaas-fn alone"
render elsewhere --set webhook.enabled=true --set manifestNamespace=models \
    --set "webhook.namespaces={openfaas-fn,models,$NS}"
rbac elsewhere
check elsewhere "map(select(.kind == \"Role\" and .metadata.name == \"tetris-webhook-copies\") | .metadata.namespace) ==
    [\"openfaas-fn\"]" "webhook copies: into the manifests' or tetris' namespace"
# An autoscaler whose functions and profiles live in tetris' namespace.
printf 'autoscaler:\n  enabled: true\n  prometheusUrl: http://p:9090\n  functionNamespace: %s\n  functions:\n  - {name: a, profile: "configmap:%s/tetris-profile-a"}\n  - {name: b, profile: "configmap:%s/tetris-profile-b"}\n  - {name: c, profile: /p/c.yaml}\n' \
    "$NS" "$NS" "$NS" >"$WORK/auto-values.yaml"
render auto -f "$WORK/auto-values.yaml"
rbac auto
check auto "map(select(.kind == \"Role\" and .metadata.name == \"tetris-autoscaler-profiles\")) |
    map(.metadata.namespace, .rules[0].resourceNames) == [\"$NS\", [\"tetris-profile-a\", \"tetris-profile-b\"]]" \
    "autoscaler profiles are not read by name"

# Kubernetes 1.30 names AppArmor in the security context; the escape hatch
# for nodes where only a privileged container may mount.
render k130 --kube-version 1.30.0
check k130 "$CONTAINERS | map(select(.c.name == \"store-tmpfs\")) | .[0] |
    .c.securityContext.appArmorProfile == {\"type\": \"Unconfined\"} and
    (.annotations | has(\"container.apparmor.security.beta.kubernetes.io/store-tmpfs\") | not)" \
    "1.30: AppArmor not in the security context"
render privileged --set reclaimer.store.privilegedMount=true
check privileged "$CONTAINERS | map(select(.c.name == \"store-tmpfs\")) | .[0] |
    .c.securityContext == {\"privileged\": true} and
    (.annotations | has(\"container.apparmor.security.beta.kubernetes.io/store-tmpfs\") | not)" \
    "privilegedMount: the init container is not privileged"
echo "helm privileges: ok" >&2
