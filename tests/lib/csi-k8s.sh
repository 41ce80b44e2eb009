# tests/lib/csi-k8s.sh - tetris-csi for the local cluster's real kubelet, run on
# this machine as the chart's DaemonSet runs it on a node (the kubelet's
# directories, the node daemon's store), and what the tests check of its
# volumes. Source it after tests/lib/k8s.sh:
#
#   csi_start STORE MODELS [ARGS...]  tetris-csi (pid in CSI_PID, log in
#                                     $WORK/csi.log); returns once started
#   csi_register                      the chart's CSIDriver object, and the
#                                     kubelet's registration of the plugin
#   csi_cleanup_at_exit               at exit: unpublish, stop, unmount
#   csi_volumes STORE                 volumes published
#   csi_keeps DIR                     kept holders of DIR's store
#   csi_mounts                        CSI volumes mounted in the kubelet's pods
#   store_mappers TENSORS OUT         processes mapping TENSORS' files
#
# The plugin is not a child of the test's shell: the exit handlers must
# delete the pods (and the kubelet unpublish their volumes) while it still
# runs, and a test's exit waits for its children before its handlers run.
# shellcheck shell=sh

CSI_DRIVER=csi.tetris.io
CSI_KUBELET="$CLUSTER_DIR/kubelet"
CSI_PLUGIN_DIR="$CSI_KUBELET/plugins/$CSI_DRIVER"

csi_start() {
    _store=$1 _models=$2
    shift 2
    mkdir -p "$CSI_PLUGIN_DIR"
    _n=$(grep -c event=started "$WORK/csi.log" 2>/dev/null || true)
    ("$BIN/tetris-csi" --store "$_store" --csi-socket "$CSI_PLUGIN_DIR/csi.sock" \
        --registry-dir "$CSI_KUBELET/plugins_registry" --pods-dir "$CSI_KUBELET/pods" \
        --models-dir "$_models" --node-id "$NODE_NAME" "$@" >>"$WORK/csi.log" 2>&1 &
        echo $! >"$WORK/csi.pid")
    CSI_PID=$(cat "$WORK/csi.pid")
    wait_until 60 "[ \$(grep -c event=started '$WORK/csi.log') -gt ${_n:-0} ] || ! kill -0 $CSI_PID" ||
        fail "tetris-csi did not start"
    kill -0 "$CSI_PID" 2>/dev/null || fail "tetris-csi died: $(tail -n 5 "$WORK/csi.log")"
}

csi_register() {
    "$("$ROOT/scripts/helm.sh")" template tetris "$ROOT/charts/tetris" --set csi.enabled=true \
        --show-only templates/csi.yaml >"$WORK/csidriver.yaml" || fail "helm template of the CSIDriver"
    kc apply -f "$WORK/csidriver.yaml" >/dev/null || fail "cannot create the CSIDriver"
    wait_until 60 "grep -q 'event=registered driver=$CSI_DRIVER' '$WORK/csi.log'" ||
        fail "the kubelet did not register the plugin: $(tail -n 5 "$WORK/csi.log")"
    wait_until 60 "kc get csinode '$NODE_NAME' -o json | jq -e '.spec.drivers // [] | any(.name == \"$CSI_DRIVER\" and .nodeID == \"$NODE_NAME\")' >/dev/null" ||
        fail "CSINode $NODE_NAME does not list $CSI_DRIVER: $(kc get csinode "$NODE_NAME" -o json | jq -c .spec)"
}

csi_volumes() { find "$1/private/volumes" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
csi_keeps() { find "$1/private/holders" -name 'csi-*.keep' 2>/dev/null | wc -l; }
csi_mounts() { grep -c " $CSI_KUBELET/pods/.*/kubernetes.io~csi/" /proc/self/mountinfo || true; }

# csi_cleanup_at_exit STORE NAMESPACES: at exit, before the namespaces
# go, the pods of NAMESPACES are deleted while the plugin still answers,
# so that the kubelet unpublishes their volumes; then the plugin stops,
# whatever is still mounted from the store goes, and so does the
# CSIDriver.
csi_cleanup_at_exit() {
    CSI_CLEANUP_STORE=$1 CSI_CLEANUP_NAMESPACES=$2
    at_exit csi_cleanup
}
csi_cleanup() {
    for _ns in $CSI_CLEANUP_NAMESPACES; do
        kc -n "$_ns" delete pods --all --grace-period=1 --wait=false >/dev/null 2>&1
    done
    wait_until 90 "[ \$(csi_volumes '$CSI_CLEANUP_STORE') = 0 ]" 2>/dev/null
    kill -TERM "$CSI_PID" 2>/dev/null
    wait_until 30 "! kill -0 $CSI_PID 2>/dev/null" 2>/dev/null
    grep -o " $CSI_KUBELET/pods/[^ ]*/kubernetes.io~csi/[^ ]* " /proc/self/mountinfo | sort -r |
        xargs -r -n1 umount -l 2>/dev/null
    kc delete csidriver "$CSI_DRIVER" --wait=false >/dev/null 2>&1
    rm -rf "$CSI_PLUGIN_DIR"
}

# store_mappers TENSORS OUT: every process that maps a file of the
# directory TENSORS (a store's public/tensors, or links to some of its
# files), one line "PID RSS PSS" (kB of those files) each, into OUT. A
# process that mapped them and touched none of their pages yet is listed
# with an RSS of 0.
store_mappers() {
    find -L "$1" -type f -printf '%i\n' >"$2.inodes"
    for _s in /proc/[0-9]*/smaps; do
        awk -v p="${_s%/smaps}" 'NR == FNR { ino[$1] = 1; next }
            /^[0-9a-f]+-[0-9a-f]+ / { in_store = ($5 in ino) && $6 ~ /\/tensors\// }
            /^Size:/ && in_store { z += $2 } /^Rss:/ && in_store { r += $2 } /^Pss:/ && in_store { s += $2 }
            END { if (z > 0) print p, r + 0, s + 0 }' "$2.inodes" "$_s" 2>/dev/null
    done >"$2"
}
