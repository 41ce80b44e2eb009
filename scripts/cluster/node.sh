#!/bin/sh
# node.sh - the cluster's one real node: containerd (private config, root,
# state and socket under $CLUSTER_DIR), runc behind runc-oom-wrapper, a CNI
# bridge network, the pause image built from the kubernetes source tree, and
# a kubelet that registers as $TETRIS_NODE_NAME. Idempotent.
#
# Exit status: 0 node Ready, 1 failure (see the logs it names).
set -eu
PROG=node
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/common.sh"

CTRD="$CLUSTER_DIR/containerd"
SOCK="$CTRD/containerd.sock"
CONF="$CLUSTER_DIR/config"
PAUSE_IMAGE="localhost/tetris/pause:3.4.1"
CNI_BRIDGE="${TETRIS_CNI_BRIDGE:-tetris0}"
POD_SUBNET="${TETRIS_POD_SUBNET:-10.244.0.0/24}"

write_configs() {
    mkdir -p "$CONF" "$CTRD" "$CLUSTER_DIR/bin" "$CLUSTER_DIR/cni/net.d" "$CLUSTER_DIR/cni/ipam"
    cp "$HERE/runc-oom-wrapper" "$CLUSTER_DIR/bin/runc-oom-wrapper"
    write_file "$CONF/containerd.toml" <<TOML
version = 2
root = "$CTRD/root"
state = "$CTRD/state"

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$CTRD/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$CLUSTER_DIR/bin/runc-oom-wrapper"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CLUSTER_DIR/cni/net.d"
TOML
    # No ipMasq: pods talk to the node and each other, never beyond.
    write_file "$CLUSTER_DIR/cni/net.d/10-tetris.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "tetris",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CLUSTER_DIR/cni/ipam",
        "ranges": [[{ "subnet": "$POD_SUBNET" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "loopback" }
  ]
}
JSON
    # cgroupsPerQOS and node-allocatable enforcement need a cgroup hierarchy
    # the kubelet owns; on a shared machine it owns none.
    write_file "$CONF/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
YAML
}

containerd_ready() {
    ctr --address "$SOCK" version
}

start_containerd() {
    start_daemon containerd /usr/bin/containerd --config "$CONF/containerd.toml"
    wait_for 30 containerd containerd_ready ||
        die "event=containerd-not-ready log=$CLUSTER_DIR/logs/containerd.log"
}

# The pause image: pause.c from the kubernetes tree, static, packed once
# into the cache and imported into each new containerd.
import_pause() {
    ctr --address "$SOCK" -n k8s.io images check "name==$PAUSE_IMAGE" 2>/dev/null |
        grep -q "$PAUSE_IMAGE" && return 0
    dir="$KUBE_CACHE/pause"
    if [ ! -f "$dir/pause.tar" ]; then
        gcc -Os -static -Wall -o "$dir/pause" "$dir/pause.c" -DVERSION=v3.4.1-tetris ||
            die "event=pause-build-failed"
        "$HERE/pack-image.sh" -n "$PAUSE_IMAGE" -x "$dir/pause:/pause" -e /pause -o "$dir/pause.tar.tmp"
        mv "$dir/pause.tar.tmp" "$dir/pause.tar"
    fi
    ctr --address "$SOCK" -n k8s.io images import --base-name "${PAUSE_IMAGE%:*}" \
        --snapshotter native "$dir/pause.tar" >/dev/null || die "event=pause-import-failed"
    log "event=image-imported image=$PAUSE_IMAGE"
}

node_ready() {
    [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

start_kubelet() {
    mkdir -p "$CLUSTER_DIR/kubelet"
    start_daemon kubelet "$KUBE_BIN/kubelet" \
        --config "$CONF/kubelet.yaml" \
        --kubeconfig "$KUBECONFIG_FILE" \
        --container-runtime remote \
        --container-runtime-endpoint "unix://$SOCK" \
        --pod-infra-container-image "$PAUSE_IMAGE" \
        --root-dir "$CLUSTER_DIR/kubelet" \
        --hostname-override "$NODE_NAME" \
        --node-labels "tetris.io/node-kind=real"
    wait_for 120 "node $NODE_NAME" node_ready ||
        die "event=node-not-ready node=$NODE_NAME log=$CLUSTER_DIR/logs/kubelet.log"
    # The apiserver taints a new node not-ready; the node lifecycle
    # controller would clear it but does not run here (it would also mark
    # the API-only nodes, which send no heartbeats, unreachable).
    if kc get node "$NODE_NAME" -o jsonpath='{.spec.taints[*].key}' | grep -q node.kubernetes.io/not-ready; then
        kc taint node "$NODE_NAME" node.kubernetes.io/not-ready- >/dev/null ||
            die "event=untaint-failed node=$NODE_NAME"
    fi
}

write_configs
start_containerd
import_pause
start_kubelet
