#!/bin/sh
# control-plane.sh - the cluster's credentials, etcd, kube-apiserver and
# kube-controller-manager, all on loopback, and the kubeconfig files clients
# use. Idempotent: what exists
# is kept, what runs is left running.
#
# Credentials (in $CLUSTER_DIR/pki): a CA, the apiserver's serving cert for
# 127.0.0.1/localhost signed by it, a static bearer token in group
# system:masters (kubeconfig), a client certificate in the same group
# (kubeconfig-cert, for clients that authenticate with certificates) and the
# service-account signing key.
#
# Exit status: 0 apiserver ready, 1 failure (see the logs it names).
set -eu
PROG=control-plane
. "$(dirname "$0")/common.sh"

PKI="$CLUSTER_DIR/pki"

make_pki() {
    [ -f "$PKI/.done" ] && return 0
    mkdir -p "$PKI"
    chmod 700 "$PKI"
    (
        cd "$PKI"
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt \
            -subj "/CN=tetris-local-ca" >/dev/null 2>&1
        openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
            -subj "/CN=kube-apiserver" >/dev/null 2>&1
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >apiserver.ext
        openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
            -days 3650 -extfile apiserver.ext -out apiserver.crt >/dev/null 2>&1
        openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr \
            -subj "/O=system:masters/CN=tetris-admin" >/dev/null 2>&1
        printf 'extendedKeyUsage=clientAuth\n' >admin.ext
        openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
            -days 3650 -extfile admin.ext -out admin.crt >/dev/null 2>&1
        openssl genrsa -out sa.key 2048 >/dev/null 2>&1
        openssl rand -hex 24 >admin.token
        printf '%s,tetris-admin,tetris-admin,"system:masters"\n' "$(cat admin.token)" >tokens.csv
        rm -f ./*.csr ./*.ext ca.srl
    ) || die "event=pki-failed dir=$PKI"
    touch "$PKI/.done"
    log "event=pki-created dir=$PKI"
}

start_etcd() {
    mkdir -p "$CLUSTER_DIR/etcd"
    chmod 700 "$CLUSTER_DIR/etcd"
    start_daemon etcd /usr/bin/etcd --name tetris --data-dir "$CLUSTER_DIR/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "tetris=http://127.0.0.1:$ETCD_PEER_PORT"
    wait_for 30 etcd curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" ||
        die "event=etcd-not-ready log=$CLUSTER_DIR/logs/etcd.log"
}

# ServiceAccount admission is off: no controller-manager runs to create the
# default service accounts it would demand. The endpoint reconciler is off
# because the only address is loopback, which the `kubernetes` service
# endpoint may not use.
start_apiserver() {
    start_daemon kube-apiserver "$KUBE_BIN/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
        --secure-port "$APISERVER_PORT" \
        --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
        --client-ca-file "$PKI/ca.crt" \
        --token-auth-file "$PKI/tokens.csv" \
        --authorization-mode RBAC \
        --service-account-key-file "$PKI/sa.key" \
        --service-account-signing-key-file "$PKI/sa.key" \
        --service-account-issuer https://kubernetes.default.svc \
        --service-cluster-ip-range 10.96.0.0/24 \
        --disable-admission-plugins ServiceAccount \
        --endpoint-reconciler-type none \
        --allow-privileged=true \
        --profiling=false
    wait_for 90 kube-apiserver apiserver_ready ||
        die "event=apiserver-not-ready log=$CLUSTER_DIR/logs/kube-apiserver.log"
}

# The controllers tests need: Deployments (the autoscaler scales them),
# DaemonSets (the node daemon), Jobs (the profiler), Endpoints (OpenFaaS
# routes to a function's ready pods through them), garbage collection and
# namespace deletion. Not node lifecycle: it would mark API-only nodes, which
# send no heartbeats, unreachable. Not service-account tokens: ServiceAccount
# admission is off (see above).
start_controller_manager() {
    start_daemon kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
        --kubeconfig "$KUBECONFIG_FILE" \
        --controllers deployment,replicaset,daemonset,job,endpoint,garbagecollector,namespace \
        --leader-elect=false \
        --address 127.0.0.1 --port "$CONTROLLER_MANAGER_PORT" --secure-port 0 \
        --profiling=false
    wait_for 60 kube-controller-manager \
        curl -fsS --max-time 2 "http://127.0.0.1:$CONTROLLER_MANAGER_PORT/healthz" ||
        die "event=controller-manager-not-ready log=$CLUSTER_DIR/logs/kube-controller-manager.log"
}

write_kubeconfigs() {
    ca="$(base64 -w0 <"$PKI/ca.crt")"
    server="https://127.0.0.1:$APISERVER_PORT"
    write_file "$KUBECONFIG_FILE" 600 <<KC
apiVersion: v1
kind: Config
clusters:
- name: tetris-local
  cluster:
    server: $server
    certificate-authority-data: $ca
users:
- name: tetris-admin
  user:
    token: $(api_token)
contexts:
- name: tetris-local
  context:
    cluster: tetris-local
    user: tetris-admin
current-context: tetris-local
KC
    write_file "$CLUSTER_DIR/kubeconfig-cert" 600 <<KC
apiVersion: v1
kind: Config
clusters:
- name: tetris-local
  cluster:
    server: $server
    certificate-authority: $PKI/ca.crt
users:
- name: tetris-admin-cert
  user:
    client-certificate: $PKI/admin.crt
    client-key: $PKI/admin.key
contexts:
- name: tetris-local
  context:
    cluster: tetris-local
    user: tetris-admin-cert
current-context: tetris-local
KC
}

mkdir -p "$CLUSTER_DIR"
make_pki
start_etcd
start_apiserver
write_kubeconfigs
start_controller_manager
