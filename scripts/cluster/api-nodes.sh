#!/bin/sh
# api-nodes.sh - makes sure API-only nodes tetris-api-node-1..COUNT exist:
# Node objects created through the API, with no kubelet behind them. The
# scheduler binds pods to them (nothing runs), which is all scheduler tests
# need. Each carries where its tensor inventory is served:
#   label      tetris.io/node-kind=api-only
#   annotation tetris.io/inventory-url=http://127.0.0.1:<BASE+i>/inventory
# so a test starts one tetris-reclaimer per node on that port.
#
# Usage: api-nodes.sh COUNT
# Environment: TETRIS_API_NODE_PORT_BASE (9200), TETRIS_API_NODE_CPU (8),
#   TETRIS_API_NODE_MEMORY (32Gi).
# Exit status: 0 nodes ready for scheduling, 1 failure, 2 usage.
set -eu
PROG=api-nodes
. "$(dirname "$0")/common.sh"

count="${1:-}"
case "$count" in
'' | *[!0-9]*)
    echo "usage: api-nodes.sh COUNT" >&2
    exit 2
    ;;
esac
port_base="${TETRIS_API_NODE_PORT_BASE:-9200}"
cpu="${TETRIS_API_NODE_CPU:-8}"
memory="${TETRIS_API_NODE_MEMORY:-32Gi}"

i=1
while [ "$i" -le "$count" ]; do
    name="tetris-api-node-$i"
    if ! kc get node "$name" >/dev/null 2>&1; then
        kc create -f - >/dev/null <<JSON || die "event=node-create-failed node=$name"
{
  "apiVersion": "v1",
  "kind": "Node",
  "metadata": {
    "name": "$name",
    "labels": {
      "kubernetes.io/hostname": "$name",
      "kubernetes.io/os": "linux",
      "tetris.io/node-kind": "api-only"
    },
    "annotations": {
      "tetris.io/inventory-url": "http://127.0.0.1:$((port_base + i))/inventory"
    }
  },
  "status": {
    "capacity": { "cpu": "$cpu", "memory": "$memory", "pods": "110" },
    "allocatable": { "cpu": "$cpu", "memory": "$memory", "pods": "110" },
    "conditions": [
      { "type": "Ready", "status": "True", "reason": "ApiOnlyNode",
        "message": "tetris test node without a kubelet" }
    ]
  }
}
JSON
        log "event=node-created node=$name inventory=http://127.0.0.1:$((port_base + i))/inventory"
    fi
    # The apiserver taints every new node not-ready; no kubelet will clear it.
    if kc get node "$name" -o jsonpath='{.spec.taints[*].key}' | grep -q node.kubernetes.io/not-ready; then
        kc taint node "$name" node.kubernetes.io/not-ready- >/dev/null ||
            die "event=untaint-failed node=$name"
    fi
    i=$((i + 1))
done
