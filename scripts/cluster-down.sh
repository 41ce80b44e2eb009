#!/bin/sh
# cluster-down.sh - stops what scripts/cluster-up.sh started (kubelet, pod
# containers, containerd, schedulers, apiserver, etcd), unmounts everything
# under the run directory, removes the CNI bridge and the cluster's state.
# logs/ stays for post-mortems. Stopping a cluster that is not running
# succeeds.
#
# Usage: scripts/cluster-down.sh [--help]
# Environment: TETRIS_CLUSTER_DIR (/tmp/tetris-cluster), TETRIS_CNI_BRIDGE.
# Exit status: 0 stopped and cleaned, 1 something could not be cleaned, 2 usage.
set -u
PROG=cluster-down
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/scripts/cluster/common.sh"

case "${1:-}" in
"") ;;
--help | -h) sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) echo "usage: scripts/cluster-down.sh [--help]" >&2; exit 2 ;;
esac

[ -d "$CLUSTER_DIR" ] || { log "event=not-running dir=$CLUSTER_DIR"; exit 0; }
exec 8>"$CLUSTER_DIR/.lock"
flock 8

SOCK="$CLUSTER_DIR/containerd/containerd.sock"

# Pod UIDs name the kubelet's log directories under /var/log/pods (a fixed
# path in this kubelet); collect them while the apiserver still answers.
pod_uids=""
if daemon_running kube-apiserver && apiserver_ready; then
    pod_uids="$(kc get pods -A -o jsonpath='{.items[*].metadata.uid}' 2>/dev/null || true)"
fi

stop_daemon api-node-reaper
stop_daemon kubelet

# Pod containers: kill and remove every task and container of the cluster's
# containerd, then containerd itself and any shim left serving it.
if daemon_running containerd; then
    for id in $(ctr --address "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
        ctr --address "$SOCK" -n k8s.io tasks rm -f "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr --address "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do
        ctr --address "$SOCK" -n k8s.io containers rm "$id" >/dev/null 2>&1 || true
    done
fi
stop_daemon containerd
for pid in $(pgrep -f -- "-address $SOCK" 2>/dev/null); do
    kill -KILL "$pid" 2>/dev/null && log "event=killed-shim pid=$pid"
done

stop_daemon kube-controller-manager
stop_daemon default-scheduler
stop_daemon "$LOCAL_SCHEDULER"
stop_daemon kube-apiserver
stop_daemon etcd

# Mounts under the run directory (container rootfs binds, sandbox /dev/shm,
# network namespaces, kubelet volumes), deepest first.
status=0
for mnt in $(awk -v dir="$CLUSTER_DIR/" 'index($5, dir) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
    umount "$mnt" 2>/dev/null || umount -l "$mnt" || { log "level=error event=umount-failed path=$mnt"; status=1; }
done

bridge="${TETRIS_CNI_BRIDGE:-tetris0}"
if ip link show "$bridge" >/dev/null 2>&1; then
    ip link delete "$bridge" || status=1
fi

for uid in $pod_uids; do
    for d in /var/log/pods/*_"$uid"; do
        [ -d "$d" ] && rm -rf "$d"
    done
done
for l in /var/log/containers/*.log; do
    [ -L "$l" ] && [ ! -e "$l" ] && rm -f "$l"
done

# State goes; logs stay. Never through a mount that would not go away: a
# container's rootfs may hold a bind mount of a host directory.
if [ "$status" != 0 ]; then
    log "level=error event=state-kept dir=$CLUSTER_DIR why=\"mounts remain\""
    exit 1
fi
for entry in "$CLUSTER_DIR"/* "$CLUSTER_DIR"/.lock; do
    case "$entry" in "$CLUSTER_DIR/logs") continue ;; esac
    [ -e "$entry" ] && rm -rf --one-file-system "$entry"
done
log "event=cluster-down dir=$CLUSTER_DIR status=$status"
exit "$status"
