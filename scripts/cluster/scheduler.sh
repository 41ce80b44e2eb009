#!/bin/sh
# scheduler.sh - runs kube-scheduler as `tetris-local-scheduler`
# (TETRIS_LOCAL_SCHEDULER), configured to call the tetris extender, and
# unless TETRIS_DEFAULT_SCHEDULER=0 a stock
# `default-scheduler` too. Both listen on loopback only (healthz + metrics;
# the secure port is off).
#
# Usage: scheduler.sh [--restart]
#   --restart  stop the schedulers and start them again, e.g. to apply a new
#              TETRIS_EXTENDER_URL / TETRIS_EXTENDER_IGNORABLE.
# Environment: TETRIS_EXTENDER_URL (http://127.0.0.1:8888),
#   TETRIS_EXTENDER_IGNORABLE (true), TETRIS_EXTENDER_NODE_CACHE (false),
#   TETRIS_EXTENDER_WEIGHT (1), TETRIS_DEFAULT_SCHEDULER (1),
#   TETRIS_LOCAL_SCHEDULER (tetris-local-scheduler).
# Exit status: 0 schedulers healthy, 1 failure, 2 usage.
set -eu
PROG=scheduler
. "$(dirname "$0")/common.sh"

case "${1:-}" in
"") ;;
--restart)
    stop_daemon "$LOCAL_SCHEDULER"
    stop_daemon default-scheduler
    ;;
*)
    echo "usage: scheduler.sh [--restart]" >&2
    exit 2
    ;;
esac

case "$EXTENDER_IGNORABLE" in true | false) ;; *) die "event=bad-env TETRIS_EXTENDER_IGNORABLE=$EXTENDER_IGNORABLE want=true|false" ;; esac
node_cache="${TETRIS_EXTENDER_NODE_CACHE:-false}"
case "$node_cache" in true | false) ;; *) die "event=bad-env TETRIS_EXTENDER_NODE_CACHE=$node_cache want=true|false" ;; esac
weight="${TETRIS_EXTENDER_WEIGHT:-1}"

conf="$CLUSTER_DIR/config"
mkdir -p "$conf"

# write_config FILE NAME PORT [extender]: a v1beta1 configuration with one
# profile; leader election off (one replica).
write_config() {
    cat >"$1" <<YAML
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $KUBECONFIG_FILE
leaderElection:
  leaderElect: false
healthzBindAddress: 127.0.0.1:$3
metricsBindAddress: 127.0.0.1:$3
profiles:
- schedulerName: $2
YAML
    [ "${4:-}" = extender ] || return 0
    cat >>"$1" <<YAML
extenders:
- urlPrefix: $EXTENDER_URL
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: $weight
  nodeCacheCapable: $node_cache
  ignorable: $EXTENDER_IGNORABLE
  httpTimeout: 5s
YAML
}

# run_scheduler NAME PORT [extender]
run_scheduler() {
    daemon_running "$1" && return 0
    write_config "$conf/$1.yaml" "$1" "$2" "${3:-}"
    start_daemon "$1" "$KUBE_BIN/kube-scheduler" --config "$conf/$1.yaml" --secure-port 0
    wait_for 60 "$1" curl -fsS --max-time 2 "http://127.0.0.1:$2/healthz" ||
        die "event=scheduler-not-ready name=$1 log=$CLUSTER_DIR/logs/$1.log"
    if [ "${3:-}" = extender ]; then
        log "event=scheduler name=$1 extender=$EXTENDER_URL ignorable=$EXTENDER_IGNORABLE"
    fi
}

run_scheduler "$LOCAL_SCHEDULER" "$SCHEDULER_HEALTH_PORT" extender
if [ "$DEFAULT_SCHEDULER" = 1 ]; then
    run_scheduler default-scheduler "$DEFAULT_SCHEDULER_HEALTH_PORT"
fi
