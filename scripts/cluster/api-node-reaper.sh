#!/bin/sh
# api-node-reaper.sh - stands in for the kubelet that API-only nodes lack in
# one respect: when a pod bound to such a node (tetris-api-node-*) is being
# deleted, it confirms the deletion (grace period 0), as a kubelet would once
# the containers stopped. Without it those pods stay Terminating forever,
# and with them scaled-in Deployments and deleted namespaces.
#
# Runs as a cluster daemon (cluster-up starts it); watches pods, so it costs
# nothing while nothing changes. Exit status: runs until killed.
PROG=api-node-reaper
. "$(dirname "$0")/common.sh"

while :; do
    kc get pods -A --watch \
        -o jsonpath='{.metadata.namespace} {.metadata.name} {.spec.nodeName} {.metadata.deletionTimestamp}{"\n"}' 2>/dev/null |
        while read -r ns name node deleting; do
            case "$node" in tetris-api-node-*) ;; *) continue ;; esac
            [ -n "$deleting" ] || continue
            kc -n "$ns" delete pod "$name" --grace-period=0 --force --wait=false >/dev/null 2>&1 &&
                log "event=pod-deleted pod=$ns/$name node=$node"
        done
    # The watch ends on server timeouts and apiserver restarts: start again.
    sleep 1
done
