#!/bin/sh
# test-extender-kubeclient.sh - the C Kubernetes client (common/kube.h)
# against the real apiserver of the local cluster, authenticating three
# ways: kubeconfig with a bearer token, kubeconfig with a client
# certificate, and in-cluster service-account files (token + CA) with the
# server given explicitly. Each run creates, lists (paged), watches,
# patches (3 content types), deletes, binds a pod and scales a deployment.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
k8s_cluster_up
k8s_api_nodes 1

run() {
    k8s_namespace kubeclient
    "$BIN/kube-e2e" "$K8S_NS" tetris-api-node-1 "$@" || fail "kube-e2e $*"
}

run --kubeconfig "$KUBECONFIG_FILE"
run --kubeconfig "$CLUSTER_DIR/kubeconfig-cert"

# Service-account layout: token, ca.crt, namespace.
sa="$(mktemp -d /tmp/tetris-sa.XXXXXX)"
K8S_CLEANUP_PATHS="$sa"
kc config view --raw -o jsonpath='{.users[0].user.token}' >"$sa/token"
kc config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' |
    base64 -d >"$sa/ca.crt"
echo default >"$sa/namespace"
server="$(kc config view --raw -o jsonpath='{.clusters[0].cluster.server}')"
run --sa-dir "$sa" --server "$server"
echo "kube client e2e: ok (token, client certificate, service account)" >&2
