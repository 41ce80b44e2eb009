# common.sh - settings and helpers shared by the local-cluster scripts.
# shellcheck shell=sh disable=SC2034
# Sourced (POSIX sh) by scripts/cluster-up.sh, scripts/cluster-down.sh, the
# helpers in scripts/cluster/ and tests/lib/k8s.sh. Every setting can be
# overridden from the environment.

KUBE_VERSION=1.20.2
TETRIS_CACHE="${TETRIS_CACHE:-$HOME/.cache/tetris}"
KUBE_CACHE="$TETRIS_CACHE/kubernetes-$KUBE_VERSION"
KUBE_BIN="$KUBE_CACHE/bin"

# Everything a running cluster owns lives under CLUSTER_DIR.
CLUSTER_DIR="${TETRIS_CLUSTER_DIR:-/tmp/tetris-cluster}"
KUBECONFIG_FILE="$CLUSTER_DIR/kubeconfig"

# Loopback ports. The kubelet's (10250, 10248) are in node.sh's config.
ETCD_CLIENT_PORT="${TETRIS_ETCD_PORT:-2379}"
ETCD_PEER_PORT="${TETRIS_ETCD_PEER_PORT:-2380}"
APISERVER_PORT="${TETRIS_APISERVER_PORT:-6443}"
SCHEDULER_HEALTH_PORT="${TETRIS_SCHEDULER_HEALTH_PORT:-10251}"
DEFAULT_SCHEDULER_HEALTH_PORT="${TETRIS_DEFAULT_SCHEDULER_HEALTH_PORT:-10261}"
CONTROLLER_MANAGER_PORT="${TETRIS_CONTROLLER_MANAGER_PORT:-10252}"

# The real node's name; the cluster's own tetris scheduler and the
# extender it calls. Its name is not tetris-scheduler, the name function
# pods ask for by default (protocol/names.h), so that the Helm chart's
# scheduler, installed here, is the only one serving that name.
NODE_NAME="${TETRIS_NODE_NAME:-tetris-node-0}"
LOCAL_SCHEDULER="${TETRIS_LOCAL_SCHEDULER:-tetris-local-scheduler}"
EXTENDER_URL="${TETRIS_EXTENDER_URL:-http://127.0.0.1:8888}"
EXTENDER_IGNORABLE="${TETRIS_EXTENDER_IGNORABLE:-true}"
API_NODES="${TETRIS_API_NODES:-0}"
# A stock kube-scheduler for pods without a schedulerName (DaemonSet pods
# among them); 0 leaves such pods Pending.
DEFAULT_SCHEDULER="${TETRIS_DEFAULT_SCHEDULER:-1}"

log() {
    echo "ts=$(date -u +%Y-%m-%dT%H:%M:%SZ) prog=${PROG:-cluster} $*" >&2
}

die() {
    log "level=error $*"
    exit 1
}

# What the Go builds of the test tools install (build-kube.sh needs all of
# them; build-openfaas.sh and build-csi-sanity.sh Go and the CA roots).
GO_BUILD_PACKAGES="golang-go rsync jq golang-github-modern-go-reflect2-dev ca-certificates"

# apt_require PKG... installs the Debian packages that are not installed yet
# (waiting for apt's lock while another install holds it).
apt_require() {
    _missing=""
    for _p in "$@"; do
        dpkg-query -W -f='${Status}' "$_p" 2>/dev/null | grep -q "install ok installed" ||
            _missing="$_missing $_p"
    done
    [ -z "$_missing" ] && return 0
    log "event=apt-install packages=\"$_missing\""
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "event=apt-update-failed"
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 $_missing \
        >/dev/null ||
        die "event=apt-install-failed packages=\"$_missing\""
}

# write_file FILE [MODE]: stdin becomes FILE's content (mode 644 unless
# given), atomically and only when it differs, so readers (containerd
# watching its CNI directory, clients reading a kubeconfig) never see a
# half-written or needlessly rewritten file.
write_file() {
    mkdir -p "$CLUSTER_DIR/.tmp"
    _tmp="$(mktemp "$CLUSTER_DIR/.tmp/write.XXXXXX")"
    cat >"$_tmp"
    if cmp -s "$_tmp" "$1"; then
        rm -f "$_tmp"
    else
        chmod "${2:-644}" "$_tmp"
        mv "$_tmp" "$1"
    fi
}

# kc ARGS... runs kubectl against the local cluster.
kc() {
    kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"
}

# wait_for SECONDS DESCRIPTION COMMAND... retries COMMAND every half second.
wait_for() {
    _limit=$(( $1 * 2 )); _what="$2"; shift 2
    _i=0
    while ! "$@" >/dev/null 2>&1; do
        _i=$((_i + 1))
        [ "$_i" -ge "$_limit" ] && return 1
        sleep 0.5
    done
    log "event=ready what=$_what"
}

# start_daemon NAME COMMAND... runs COMMAND in its own session, logging to
# $CLUSTER_DIR/logs/NAME.log. Its pid file records "PID EXECUTABLE" so that
# stop_daemon never signals an unrelated process that reused the pid. A
# daemon already running with other arguments (a cluster started by an
# older checkout) is restarted with these.
start_daemon() {
    _name="$1"; shift
    _pidf="$CLUSTER_DIR/run/$_name.pid"
    _argsf="$CLUSTER_DIR/run/$_name.args"
    _args="$(printf '%s\n' "$@")"
    if daemon_running "$_name"; then
        [ "$(cat "$_argsf" 2>/dev/null)" = "$_args" ] && return 0
        log "event=restarting daemon=$_name why=\"arguments changed\""
        stop_daemon "$_name"
    fi
    [ -x "$(command -v "$1")" ] || die "event=missing-program daemon=$_name path=$1"
    mkdir -p "$CLUSTER_DIR/run" "$CLUSTER_DIR/logs"
    # Not the cluster-up lock (fd 8) nor the build lock (fd 9): a daemon
    # holding them would block every later cluster-up and cluster-down.
    setsid "$@" >>"$CLUSTER_DIR/logs/$_name.log" 2>&1 </dev/null 8>&- 9>&- &
    echo "$! $(command -v "$1")" >"$_pidf"
    printf '%s\n' "$_args" >"$_argsf"
    log "event=started daemon=$_name pid=$! log=$CLUSTER_DIR/logs/$_name.log"
}

# daemon_running NAME: NAME's recorded process is alive and is what we started.
daemon_running() {
    _pidf="$CLUSTER_DIR/run/$1.pid"
    [ -f "$_pidf" ] || return 1
    read -r _pid _exe <"$_pidf" || return 1
    [ "$(readlink "/proc/$_pid/exe" 2>/dev/null)" = "$(readlink -f "$_exe")" ]
}

# stop_daemon NAME: SIGTERM, then SIGKILL after 10 s, to the daemon's
# process group (start_daemon made it one; a script daemon's children are in
# it too).
stop_daemon() {
    _pidf="$CLUSTER_DIR/run/$1.pid"
    if daemon_running "$1"; then
        read -r _pid _exe <"$_pidf"
        kill -TERM "-$_pid" 2>/dev/null || kill -TERM "$_pid" 2>/dev/null || true
        _i=0
        while daemon_running "$1" && [ "$_i" -lt 20 ]; do sleep 0.5; _i=$((_i + 1)); done
        if daemon_running "$1"; then
            kill -KILL "-$_pid" 2>/dev/null || kill -KILL "$_pid" 2>/dev/null
            while daemon_running "$1"; do sleep 0.1; done
        fi
        log "event=stopped daemon=$1 pid=$_pid"
    fi
    rm -f "$_pidf"
}

# api_token: the static bearer token of the cluster's admin user.
api_token() {
    cat "$CLUSTER_DIR/pki/admin.token"
}

# apiserver_ready: /readyz answers ok over TLS with the cluster's CA.
apiserver_ready() {
    curl -fsS --max-time 2 --cacert "$CLUSTER_DIR/pki/ca.crt" \
        -H "Authorization: Bearer $(api_token)" \
        "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null 2>&1
}
