# tests/lib/csi.sh - what the tests of tetris-csi share (sourced; sources
# tests/lib/common.sh): a node as the plugin sees it, under $WORK, and the
# kubelet's side of its gRPC (tetris-test-csi-client). The volumes are
# bind mounts, so a test that sources it is skipped unless it runs as root
# with mountpoint(1); it needs the real models too. Every mount under
# $WORK goes at exit, even after a failure.
#
#   STORE, MODELS_DIR, PODS, CSI_SOCK
#                       the node daemon's store, the plugin's --models-dir
#                       and --pods-dir (the kubelet's, without pods: a test
#                       makes PODS/uid-UID/volumes for the pods it plays),
#                       its CSI socket; the directories are made here
#   csi_exec OPTION...  execs tetris-csi on those, node id node-a: run it
#                       in a subshell, (csi_exec ...), to read its exit
#                       status, or in the background
#   csi_start OPTION... csi_exec in the background, logging to
#                       $WORK/csi.log, until its next event=started line
#                       (fails if it dies first); sets CSI_PID
#   call SOCKET CALL ARGS...
#                       one call of the client; its output in $WORK/reply
#   csi CALL ARGS...    call on the plugin's CSI socket
#   want STATUS WHAT    the last reply's status is STATUS (WHAT names the
#                       check in the failure)
#   field N             the last reply's field N
#   pod NAMESPACE SERVICE-ACCOUNT UID
#                       the volume context the kubelet sends for pod uid-UID
#   publish VOLUME UID MODEL NAMESPACE SERVICE-ACCOUNT [ATTR...]
#                       the kubelet's publish of pod uid-UID's volume at
#                       PODS/uid-UID/volumes/model; MODEL is a file name
#                       in MODELS_DIR, or a path or a reference as it is
#   refused STATUS WHAT COMMAND...
#                       COMMAND (a call or a publish) gets STATUS with a
#                       message, and leaves no mount, volume or kept holder
#   keeps [STORE], all_keeps, volumes, mounts_under DIR
#                       the kept holders of the plugin in STORE (default
#                       the shared one) and in every store, the volumes
#                       recorded, the mounts at or under DIR
# shellcheck shell=sh disable=SC2034
. "$(dirname "$0")/../lib/common.sh"
need_models
[ "$(id -u)" = 0 ] || skip "needs root: the volumes are bind mounts"
command -v mountpoint >/dev/null || skip "no mountpoint(1)"

STORE="$WORK/store"
MODELS_DIR="$WORK/models"
PODS="$WORK/pods"
CSI_SOCK="$WORK/csi.sock"
mkdir -p "$STORE" "$MODELS_DIR" "$PODS"
at_exit "grep -o ' $WORK[^ ]* ' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null || true"

# exec: in the background, $! is the plugin itself, which a test signals.
csi_exec() {
    exec "$BIN/tetris-csi" --store "$STORE" --csi-socket "$CSI_SOCK" --pods-dir "$PODS" \
        --models-dir "$MODELS_DIR" --node-id node-a "$@"
}

# A restart is waited for by counting: the new process's line is one more.
csi_start() {
    : >>"$WORK/csi.log"
    _csi_started=$(grep -c event=started "$WORK/csi.log" || true)
    csi_exec "$@" >>"$WORK/csi.log" 2>&1 &
    CSI_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $CSI_PID"
    wait_until 60 "[ \$(grep -c event=started '$WORK/csi.log') -gt $_csi_started ] || ! kill -0 $CSI_PID" ||
        fail "tetris-csi did not start"
    kill -0 "$CSI_PID" 2>/dev/null || fail "tetris-csi died: $(tail -n 5 "$WORK/csi.log")"
}

call() {
    "$BIN/tetris-test-csi-client" "$@" >"$WORK/reply" 2>"$WORK/reply.err" ||
        fail "no answer to $2: $(cat "$WORK/reply" "$WORK/reply.err")"
}

csi() { call "$CSI_SOCK" "$@"; }

want() {
    grep -q "^status=$1 " "$WORK/reply" || fail "$2: want $1, got $(cat "$WORK/reply")"
}

field() { sed -n "s/^f$1=//p" "$WORK/reply"; }

pod() {
    echo "csi.storage.k8s.io/ephemeral=true csi.storage.k8s.io/pod.name=fn-$3" \
        "csi.storage.k8s.io/pod.namespace=$1 csi.storage.k8s.io/pod.uid=uid-$3" \
        "csi.storage.k8s.io/serviceAccount.name=$2"
}

publish() {
    _vol=$1 _uid=$2 _model=$3 _ns=$4 _sa=$5
    shift 5
    case $_model in
    */* | *:*) ;;
    *) _model="$MODELS_DIR/$_model" ;;
    esac
    # shellcheck disable=SC2046
    csi publish "$_vol" "$PODS/uid-$_uid/volumes/model" "model=$_model" \
        $(pod "$_ns" "$_sa" "$_uid") "$@"
}

refused() {
    _st=$1 _what=$2
    shift 2
    _m=$(mounts_under "$WORK") _v=$(volumes) _k=$(all_keeps)
    "$@"
    want "$_st" "$_what"
    grep -q '^status=[A-Z_]* message="..*"' "$WORK/reply" || fail "$_what: no message"
    [ "$(mounts_under "$WORK")" = "$_m" ] || fail "$_what: a mount was left behind"
    [ "$(volumes)" = "$_v" ] || fail "$_what: a volume was left behind"
    [ "$(all_keeps)" = "$_k" ] || fail "$_what: a reference was left behind"
}

keeps() { find "${1:-$STORE}/private/holders" -name 'csi-*.keep' 2>/dev/null | wc -l; }
all_keeps() { find "$STORE" -path '*/private/holders/csi-*.keep' | wc -l; }
volumes() { find "$STORE/private/volumes" -mindepth 1 -maxdepth 1 | wc -l; }
mounts_under() { grep -c " $1[/ ]" /proc/self/mountinfo || true; }
