# tests/lib/k8s.sh - helpers for end-to-end tests on the local cluster
# (scripts/cluster-up.sh), on top of tests/lib/common.sh, which it sources.
# Source it from a test (POSIX sh):
#
#   . "$(dirname "$0")/../lib/k8s.sh"
#   k8s_skip_unless_possible       # SKIP (exit 77) where no cluster can run
#   k8s_cluster_up                 # starts the cluster unless it runs
#   k8s_namespace smoke            # a fresh namespace in $K8S_NS, removed at exit
#   kc -n "$K8S_NS" apply -f pod.yaml
#   k8s_wait_bound "$K8S_NS" mypod  # its node in $K8S_NODE
#
# The cluster is shared: the first test that needs it starts it and every
# later test (and the next `make test`) reuses it; `make cluster-down` stops
# it. Tests change only what they create, in their own namespaces.
# shellcheck shell=sh

. "$(dirname "$0")/../lib/common.sh"
. "$ROOT/scripts/cluster/common.sh"
export KUBECONFIG="$KUBECONFIG_FILE"

# Generous bounds for things that either happen or are broken; never a
# performance assertion.
K8S_TIMEOUT="${TETRIS_K8S_TIMEOUT:-180}"

# k8s_skip_unless_possible: a cluster needs root (kubelet, containerd); as
# another user the test is skipped. Everything else cluster-up installs.
k8s_skip_unless_possible() {
    [ "$(id -u)" = 0 ] || skip "needs root to run the local cluster"
}

# k8s_release_only PROGRAM: skipped when PROGRAM is a sanitizer build: it
# reports ONNX Runtime's own leaks at exit, and the suppressions the other
# tests use are not inside the image. The release pass runs the test.
k8s_release_only() {
    release_only "$1" "the image carries no leak suppressions for ONNX Runtime"
}

# k8s_cluster_up: the cluster, started if needed (the first time this builds
# Kubernetes: minutes). Images are the tests' business (k8s_image).
k8s_cluster_up() {
    TETRIS_IMAGE=0 "$ROOT/scripts/cluster-up.sh" >/dev/null ||
        fail "cluster-up failed; logs in $CLUSTER_DIR/logs"
}

# k8s_api_nodes COUNT: API-only nodes tetris-api-node-1..COUNT exist.
k8s_api_nodes() {
    "$ROOT/scripts/cluster/api-nodes.sh" "$1" || fail "cannot create $1 API-only nodes"
}

# k8s_restart_scheduler: the cluster's own scheduler ($LOCAL_SCHEDULER)
# again with the current TETRIS_EXTENDER_*.
k8s_restart_scheduler() {
    "$ROOT/scripts/cluster/scheduler.sh" --restart || fail "scheduler restart failed"
}

# k8s_image [NAME]: the project's programs under test ($TETRIS_BIN) packed
# and imported as NAME (default tetris:latest); repacked only on change.
k8s_image() {
    "$ROOT/deploy/images/build.sh" -b "$BIN" -n "${1:-tetris:latest}" ||
        fail "image build failed"
}

# k8s_tools_image: tetris-test-tools:latest, a shell and a few coreutils
# from this machine, for pods that only move files around.
k8s_tools_image() {
    ctr --address "$CLUSTER_DIR/containerd/containerd.sock" -n k8s.io images ls -q |
        grep -q '/tetris-test-tools:latest$' && return 0
    set -- -x /bin/sh:/bin/sh
    for tool in cat ls sleep id; do set -- "$@" -x "$(command -v $tool):/bin/$tool"; done
    "$ROOT/scripts/cluster/pack-image.sh" -n tetris-test-tools:latest -e /bin/sh -i "$@" ||
        fail "tools image failed"
}

# k8s_namespace PREFIX: creates PREFIX-<random> and sets K8S_NS to it (not
# printed: a command substitution's subshell would lose the cleanup). It and
# its pods go when the test exits, as do the paths in K8S_CLEANUP_PATHS.
k8s_namespace() {
    K8S_NS="$1-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
    kc create namespace "$K8S_NS" >/dev/null || fail "cannot create namespace $K8S_NS"
    [ -n "${K8S_NAMESPACES:-}" ] || at_exit k8s_cleanup
    K8S_NAMESPACES="${K8S_NAMESPACES:-} $K8S_NS"
}

# Pods bound to API-only nodes never terminate (no kubelet confirms), so
# they are force-deleted once their namespace is terminating (from then on
# no controller can create new ones there). Before host paths go, the real
# node's pods are deleted and waited for (at most a minute): until its
# kubelet confirms, it may start a container of theirs again, and the
# container runtime makes a missing hostPath source anew.
k8s_cleanup() {
    for _ns in ${K8S_NAMESPACES:-}; do
        kc delete namespace "$_ns" --wait=false >/dev/null 2>&1
        [ -z "${K8S_CLEANUP_PATHS:-}" ] ||
            kc -n "$_ns" delete pods --field-selector "spec.nodeName=$NODE_NAME" --grace-period=1 \
                --timeout=60s >/dev/null 2>&1
        kc -n "$_ns" delete pods --all --grace-period=0 --force --wait=false >/dev/null 2>&1
    done
    # A store the chart's init container mounted a tmpfs on outlives its
    # daemon by design: the test unmounts it (lazily: a pod being killed
    # may still map it).
    for _p in ${K8S_CLEANUP_PATHS:-}; do
        ! mountpoint -q "$_p" 2>/dev/null || umount -l "$_p"
        # Again while something still writes in it (at most 5 s).
        for _try in 1 2 3 4 5 6 7 8 9 10; do
            rm -rf "$_p" 2>/dev/null
            [ -e "$_p" ] || break
            sleep 0.5
        done
    done
}

# k8s_manifest NS NAME MODEL_FILE JSON [IMAGE_PATH]: MODEL_FILE's manifest
# (written to JSON) as `tetris-profiler job` stores it: ConfigMap
# tetris-manifest-NAME in NS, labelled tetris.io/model=NAME, key
# manifest.json. With IMAGE_PATH, the model and its sources are named by
# that path, where the function's image holds the model (as the profiler
# Job records them when it indexes the model inside the image).
k8s_manifest() {
    "$BIN/tetris-agent" index "$3" -o "$4" 2>/dev/null || fail "cannot index $3"
    if [ -n "${5:-}" ]; then
        jq --arg p "$5" '.model = $p | .tensors[].source = $p' "$4" >"$4.tmp" && mv "$4.tmp" "$4" ||
            fail "cannot name $3 by $5 in its manifest"
    fi
    kc -n "$1" create configmap "tetris-manifest-$2" --from-file=manifest.json="$4" >/dev/null &&
        kc -n "$1" label configmap "tetris-manifest-$2" tetris.io/model="$2" >/dev/null ||
        fail "cannot create the manifest ConfigMap of $2"
}

# k8s_api_node_reclaimer I STORE LOG [ARGS...]: a tetris-reclaimer serving
# STORE where API-only node I's tetris.io/inventory-url annotation points,
# killed at exit; returns once it serves.
k8s_api_node_reclaimer() {
    _node="tetris-api-node-$1" _store="$2" _log="$3"
    shift 3
    _url="$(kc get node "$_node" -o jsonpath='{.metadata.annotations.tetris\.io/inventory-url}')"
    _addr="${_url#http://}"
    "$BIN/tetris-reclaimer" --store "$_store" --listen "${_addr%%/*}" --node-name "$_node" "$@" \
        2>"$_log" &
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    wait_until 30 "curl -fsS --max-time 2 '$_url'" ||
        fail "reclaimer of $_node not serving $_url: $(tail -n 3 "$_log")"
}

# k8s_extender NS PORT LOG MODELS [INVENTORIES]: tetris-scheduler-ext on
# 127.0.0.1:PORT reading the manifest ConfigMaps of NS, killed at exit;
# returns once it has loaded MODELS manifests (and, when given, fetched
# INVENTORIES nodes' inventories, which its scores come from), its pid in
# K8S_EXTENDER_PID. The API-only nodes' inventories are on
# 127.0.0.1:BASE+i, which the extender takes from an annotation only when
# told those ports are inventory ports, as is TETRIS_RECLAIMER_PORT (9464).
k8s_extender() {
    _base="${TETRIS_API_NODE_PORT_BASE:-9200}"
    "$BIN/tetris-scheduler-ext" --kubeconfig "$KUBECONFIG_FILE" --namespace "$1" \
        --listen "127.0.0.1:$2" \
        --inventory-url-ports "${TETRIS_RECLAIMER_PORT:-9464},$_base-$((_base + 99))" 2>>"$3" &
    K8S_EXTENDER_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $K8S_EXTENDER_PID"
    wait_until 30 "[ \"\$(metric_at http://127.0.0.1:$2 tetris_extender_models)\" = $4 ]" ||
        fail "extender did not load $4 manifests; log: $(tail -n 5 "$3")"
    [ -z "${5:-}" ] ||
        wait_until 60 "[ \"\$(metric_at http://127.0.0.1:$2 tetris_extender_nodes_fresh)\" -ge $5 ]" ||
        fail "extender has not fetched $5 inventories; log: $(tail -n 5 "$3")"
}

# k8s_scheduler NAME EXTENDER_PORT NODE_CACHE_CAPABLE LOG: a kube-scheduler
# configured from deploy/scheduler/kube-scheduler-v1beta1.yaml (the chart's
# configuration), renamed NAME so that it does not compete with the
# cluster's own $LOCAL_SCHEDULER and calling the extender on
# 127.0.0.1:EXTENDER_PORT, killed at exit; returns once healthy, its pid in
# K8S_SCHEDULER_PID.
k8s_scheduler() {
    _hp="$(free_port)"
    sed -e "s|^- schedulerName: .*|- schedulerName: $1|" \
        -e "s|^- urlPrefix: .*|- urlPrefix: http://127.0.0.1:$2|" \
        -e "s|^  nodeCacheCapable: .*|  nodeCacheCapable: $3|" \
        -e "s#^\(healthz\|metrics\)BindAddress: .*#\1BindAddress: 127.0.0.1:$_hp#" \
        "$ROOT/deploy/scheduler/kube-scheduler-v1beta1.yaml" >"$4.yaml"
    printf 'clientConnection:\n  kubeconfig: %s\n' "$KUBECONFIG_FILE" >>"$4.yaml"
    [ "$(grep -c -e "^- schedulerName: $1\$" -e "^- urlPrefix: http://127.0.0.1:$2\$" \
        -e "^  nodeCacheCapable: $3\$" -e "^healthzBindAddress: 127.0.0.1:$_hp\$" "$4.yaml")" = 4 ] ||
        fail "cannot rewrite the scheduler configuration: $(cat "$4.yaml")"
    "$KUBE_BIN/kube-scheduler" --config "$4.yaml" --secure-port 0 2>"$4" &
    K8S_SCHEDULER_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $K8S_SCHEDULER_PID"
    wait_until 60 "curl -fsS --max-time 2 http://127.0.0.1:$_hp/healthz" ||
        fail "scheduler $1 not healthy: $(tail -n 5 "$4")"
}

# k8s_webhook CONFIG LABEL VALUE LOG [ARGS...]: tetris-webhook on a free
# loopback port (killed at exit, its pid in K8S_WEBHOOK_PID) with ARGS,
# registered as MutatingWebhookConfiguration CONFIG (deleted at exit) for
# pod creations in the namespaces labelled LABEL=VALUE, failurePolicy
# Ignore; returns once the webhook has filled in its caBundle.
k8s_webhook() {
    _cfg=$1 _label=$2 _value=$3 _log=$4
    shift 4
    "$BIN/tetris-webhook" --kubeconfig "$KUBECONFIG_FILE" --listen 127.0.0.1:0 \
        --cert-name 127.0.0.1 --webhook-configuration "$_cfg" "$@" 2>"$_log" &
    K8S_WEBHOOK_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $K8S_WEBHOOK_PID"
    wait_until 60 "grep -q event=listening '$_log' || ! kill -0 $K8S_WEBHOOK_PID" || fail "webhook hangs"
    _port=$(sed -n 's/.*event=listening.* port=\([0-9]*\).*/\1/p' "$_log")
    [ -n "$_port" ] || fail "webhook did not start: $(cat "$_log")"
    at_exit "kc delete mutatingwebhookconfiguration $_cfg --wait=false >/dev/null 2>&1"
    kc create -f - >/dev/null <<YAML || fail "cannot create the webhook configuration"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: { name: $_cfg }
webhooks:
- name: pods.webhook.tetris.io
  admissionReviewVersions: ["v1", "v1beta1"]
  clientConfig: { url: "https://127.0.0.1:$_port/mutate" }
  rules:
  - { operations: ["CREATE"], apiGroups: [""], apiVersions: ["v1"], resources: ["pods"] }
  namespaceSelector: { matchLabels: { $_label: "$_value" } }
  failurePolicy: Ignore
  timeoutSeconds: 5
  sideEffects: NoneOnDryRun
YAML
    wait_until "$K8S_TIMEOUT" "[ -n \"\$(kc get mutatingwebhookconfiguration $_cfg \
        -o jsonpath='{.webhooks[0].clientConfig.caBundle}')\" ]" ||
        fail "the webhook never set its caBundle: $(tail -3 "$_log")"
}

# k8s_wait_bound NS POD: waits until POD has a node; sets K8S_NODE to it.
k8s_wait_bound() {
    _i=0
    while [ "$_i" -lt $((K8S_TIMEOUT * 2)) ]; do
        K8S_NODE="$(kc -n "$1" get pod "$2" -o jsonpath='{.spec.nodeName}' 2>/dev/null)"
        [ -n "$K8S_NODE" ] && return 0
        sleep 0.5
        _i=$((_i + 1))
    done
    k8s_describe "$1" "$2"
    fail "pod $1/$2 not bound within ${K8S_TIMEOUT}s"
}

# k8s_wait_phase NS POD PHASE: waits until POD reaches PHASE (Running,
# Succeeded, ...); a pod that reaches Failed instead fails the test.
k8s_wait_phase() {
    _i=0
    while [ "$_i" -lt $((K8S_TIMEOUT * 2)) ]; do
        _phase="$(kc -n "$1" get pod "$2" -o jsonpath='{.status.phase}' 2>/dev/null)"
        [ "$_phase" = "$3" ] && return 0
        if [ "$_phase" = Failed ] && [ "$3" != Failed ]; then
            k8s_describe "$1" "$2"
            fail "pod $1/$2 Failed while waiting for $3"
        fi
        sleep 0.5
        _i=$((_i + 1))
    done
    k8s_describe "$1" "$2"
    fail "pod $1/$2 not $3 within ${K8S_TIMEOUT}s (phase: ${_phase:-none})"
}

# k8s_pod_log NS POD [CONTAINER]: what POD's container (default: its first)
# wrote, stdout and stderr interleaved, from the kubelet's log files on this
# machine (`kubectl logs` cannot reach a kubelet on loopback).
k8s_pod_log() {
    _uid="$(kc -n "$1" get pod "$2" -o jsonpath='{.metadata.uid}')" || return 1
    _c="${3:-$(kc -n "$1" get pod "$2" -o jsonpath='{.spec.containers[0].name}')}"
    # CRI log lines: TIMESTAMP STREAM P|F TEXT (P: partial line, continued).
    for _f in /var/log/pods/"$1_$2_$_uid/$_c"/*.log; do
        [ -f "$_f" ] && cut -d' ' -f4- "$_f"
    done
}

# k8s_describe NS POD: the pod's status and events, on stderr, for failures.
k8s_describe() {
    kc -n "$1" describe pod "$2" >&2 2>/dev/null || true
}

# k8s_openfaas_bin: OpenFaaS CE's faas-netes and gateway, built once
# (scripts/cluster/build-openfaas.sh), their folder in OF_BIN; SKIPs where
# neither the binaries nor their sources are there. The gateway listens on
# 8080 and 8082 (hard-coded upstream): it fails the test when they are taken.
k8s_openfaas_bin() {
    OF_BIN="$("$ROOT/scripts/cluster/build-openfaas.sh" 2>"$WORK/build-openfaas.log")" || {
        _rc=$?
        [ $_rc = 3 ] && skip "no OpenFaaS CE sources (TETRIS_OPENFAAS_SRC, default ../shared/openfaas)"
        fail "cannot build OpenFaaS: $(tail -3 "$WORK/build-openfaas.log")"
    }
    for _port in 8080 8082; do
        ! ss -Hltn "sport = :$_port" | grep -q . ||
            fail "the OpenFaaS gateway needs port $_port (hard-coded upstream), which is in use"
    done
}

# k8s_openfaas NS [VAR=VALUE...]: faas-netes (the provider, on a free port,
# with the VAR=VALUEs of its environment added) and the gateway on
# 127.0.0.1:8080, as OpenFaaS' chart runs them, for functions in NS;
# killed at exit. Returns once both are healthy; the gateway's URL in OF_GW.
k8s_openfaas() {
    _ns=$1
    shift
    _netes_port="$(free_port)"
    env port="$_netes_port" function_namespace="$_ns" image_pull_policy=Never http_probe=true \
        read_timeout=60s write_timeout=60s "$@" \
        "$OF_BIN/faas-netes" -kubeconfig "$KUBECONFIG_FILE" -operator=false >"$WORK/faas-netes.log" 2>&1 &
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    wait_until 60 "curl -fsS --max-time 2 http://127.0.0.1:$_netes_port/healthz" ||
        fail "faas-netes not healthy: $(tail -5 "$WORK/faas-netes.log")"
    env functions_provider_url="http://127.0.0.1:$_netes_port/" function_namespace="$_ns" \
        scale_from_zero=false upstream_timeout=60s read_timeout=65s write_timeout=65s \
        faas_prometheus_host=127.0.0.1 faas_prometheus_port=1 \
        "$OF_BIN/gateway" >"$WORK/gateway.log" 2>&1 &
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    OF_GW=http://127.0.0.1:8080
    wait_until 60 "curl -fsS --max-time 2 $OF_GW/healthz" ||
        fail "gateway not healthy: $(tail -5 "$WORK/gateway.log")"
}
