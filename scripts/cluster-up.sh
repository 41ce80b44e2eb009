#!/bin/sh
# cluster-up.sh - a real, single-machine Kubernetes for tests: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler
# `tetris-local-scheduler` (with the tetris extender; not `tetris-scheduler`,
# which the Helm chart's scheduler serves) and `default-scheduler`, one real
# node (kubelet
# + containerd + runc) and N API-only nodes, everything on loopback and all
# state under one run directory. The Kubernetes programs are built once from
# Debian's kubernetes source package and cached (scripts/cluster/build-kube.sh);
# the project's programs in bin/ become the image tetris:latest.
#
# Idempotent: with the cluster up it changes nothing and succeeds; with parts
# of it down it starts those. Prints the kubeconfig path on stdout.
#
# Usage: scripts/cluster-up.sh [--help | --version]
# Environment:
#   TETRIS_CLUSTER_DIR      run directory (/tmp/tetris-cluster): kubeconfig,
#                           kubeconfig-cert, logs/, pki/, config/, ...
#   TETRIS_CACHE            cache for the built binaries ($HOME/.cache/tetris)
#   TETRIS_API_NODES        API-only nodes to create (0)
#   TETRIS_EXTENDER_URL     extender URL prefix (http://127.0.0.1:8888)
#   TETRIS_EXTENDER_IGNORABLE  true|false (true): schedule when it is down
#   TETRIS_EXTENDER_NODE_CACHE true|false (false): nodeCacheCapable
#   TETRIS_DEFAULT_SCHEDULER   0: no stock default-scheduler (1: pods without
#                           a schedulerName, DaemonSet pods among them)
#   TETRIS_NODE_NAME        the real node's name (tetris-node-0)
#   TETRIS_LOCAL_SCHEDULER  the extender-calling scheduler's name
#                           (tetris-local-scheduler)
#   TETRIS_IMAGE=0          skip packing bin/ into the tetris:latest image
# Exit status: 0 cluster up, 1 failure (the message names the log), 2 usage.
set -eu
PROG=cluster-up
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/scripts/cluster/common.sh"
HELPERS="$ROOT/scripts/cluster"

case "${1:-}" in
"") ;;
--help | -h)
    sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
--version)
    echo "cluster-up (tetris) kubernetes $KUBE_VERSION"
    exit 0
    ;;
*)
    echo "usage: scripts/cluster-up.sh [--help | --version]" >&2
    exit 2
    ;;
esac

[ "$(id -u)" = 0 ] || die "event=need-root why=\"kubelet, containerd and CNI need root\""

mkdir -p "$CLUSTER_DIR"
# One cluster-up or cluster-down at a time; tests running in parallel share
# the cluster the first of them starts.
exec 8>"$CLUSTER_DIR/.lock"
flock 8

apt_require etcd-server containerd runc containernetworking-plugins umoci \
    jq curl openssl gcc libc6-dev util-linux iproute2
# Any kubectl will do (it talks to a 1.20 apiserver); Debian's is 1.20.
command -v kubectl >/dev/null || apt_require kubernetes-client
"$HELPERS/build-kube.sh"
"$HELPERS/control-plane.sh"
"$HELPERS/scheduler.sh"
"$HELPERS/node.sh"

# The real node's reclaimer (the DaemonSet, hostNetwork) serves its
# inventory on loopback; API-only nodes name their own port.
kc annotate --overwrite node "$NODE_NAME" \
    "tetris.io/inventory-url=http://127.0.0.1:${TETRIS_RECLAIMER_PORT:-9464}/inventory" >/dev/null
"$HELPERS/api-nodes.sh" "$API_NODES"
start_daemon api-node-reaper /bin/sh "$HELPERS/api-node-reaper.sh"

if [ "${TETRIS_IMAGE:-1}" != 0 ] && ls "$ROOT"/bin/tetris-* >/dev/null 2>&1; then
    "$ROOT/deploy/images/build.sh" -b "$ROOT/bin"
fi

log "event=cluster-up kubeconfig=$KUBECONFIG_FILE logs=$CLUSTER_DIR/logs"
echo "$KUBECONFIG_FILE"
