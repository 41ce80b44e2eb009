# tests/lib/registry.sh - OCI registries for the tests: Debian's
# docker-registry (CNCF distribution), installed with apt when missing,
# on a loopback port, plain HTTP or TLS (a CA and certificate made here
# with openssl), anonymous or with htpasswd basic auth; the hostile one,
# tetris-test-fault-registry (tests/reclaimer/fault_registry.c); and what
# the pull and push tests all start from. Source after common.sh (or
# reclaimer.sh).
#
#   registry_start [--htpasswd FILE] [--tls] [--addr IP]
#                       a docker-registry; sets REGISTRY_PORT, REGISTRY_HOST
#                       (IP:PORT) and REGISTRY (its URL)
#   registry_tls        makes $WORK/tls/{ca,server}.pem once: a CA, and a
#                       certificate it signed for localhost, 127.0.0.1 and
#                       the host's own addresses; sets TLS_CA
#   registry_htpasswd FILE USER PASSWORD
#   registry_auth_file FILE HOST:PORT USER PASSWORD [HOST:PORT USER PASSWORD]...
#                       a dockerconfigjson document (what a Secret of type
#                       kubernetes.io/dockerconfigjson holds)
#   registry_push MODEL REF [OPTION]...
#                       tetris-registry push; its JSON in $WORK/push.out
#   registry_manifest REPO REFERENCE
#                       the manifest of an anonymous, plain registry
#   registry_with_hello a registry holding hello_deepa.onnx as
#                       models/hello:v1 ($WORK/v1.json its manifest); sets
#                       RUN (tetris-onnx-run) too
#   registry_copy_artifact DIR
#                       models/hello:v1 copied to DIR for a fault registry;
#                       sets TARGET (the largest tensor blob's hex) and
#                       TARGET_FILE (where the store would publish it)
#   fault_registry NAME ARGUMENT...
#                       a tetris-test-fault-registry; sets PORT_<NAME>, its
#                       requests in $WORK/NAME.requests
# shellcheck shell=sh disable=SC2034,SC2120,SC2119

REGISTRY_ACCEPT='Accept: application/vnd.oci.image.manifest.v1+json'

registry_start() {
    _reg_auth=""
    _reg_tls=""
    _reg_addr=127.0.0.1
    while [ $# -gt 0 ]; do
        case $1 in
        --htpasswd)
            _reg_auth=$(printf 'auth:\n  htpasswd:\n    realm: tetris-test\n    path: %s\n' "$2")
            shift 2 ;;
        --tls)
            registry_tls
            _reg_tls=$(printf '  tls:\n    certificate: %s\n    key: %s\n' \
                       "$WORK/tls/server.pem" "$WORK/tls/server.key")
            shift ;;
        --addr) _reg_addr=$2; shift 2 ;;
        *) fail "registry_start: unknown option $1" ;;
        esac
    done
    need_package docker-registry
    REGISTRY_PORT=$(free_port)
    REGISTRY_HOST="$_reg_addr:$REGISTRY_PORT"
    _reg_dir="$WORK/registry-$REGISTRY_PORT"
    mkdir -p "$_reg_dir"
    {
        printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n'
        printf '    rootdirectory: %s\nhttp:\n  addr: %s\n' "$_reg_dir/data" "$REGISTRY_HOST"
        [ -z "$_reg_tls" ] || printf '%s\n' "$_reg_tls"
        [ -z "$_reg_auth" ] || printf '%s\n' "$_reg_auth"
    } >"$_reg_dir/config.yml"
    docker-registry serve "$_reg_dir/config.yml" >>"$WORK/registry.log" 2>&1 &
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    if [ -n "$_reg_tls" ]; then
        REGISTRY="https://$REGISTRY_HOST"
        _reg_probe="curl -s -o /dev/null --cacert '$TLS_CA' '$REGISTRY/v2/'"
    else
        REGISTRY="http://$REGISTRY_HOST"
        _reg_probe="curl -s -o /dev/null '$REGISTRY/v2/'"
    fi
    wait_until 30 "$_reg_probe" || fail "the registry on $REGISTRY_HOST did not start"
}

registry_tls() {
    TLS_CA="$WORK/tls/ca.pem"
    [ -s "$TLS_CA" ] && return 0
    need_package openssl
    mkdir -p "$WORK/tls"
    _san="DNS:localhost,IP:127.0.0.1"
    for _ip in $(hostname -I 2>/dev/null); do _san="$_san,IP:$_ip"; done
    (
        cd "$WORK/tls"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
            -subj "/CN=tetris test CA" >openssl.log 2>&1 &&
        openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
            -subj "/CN=localhost" >>openssl.log 2>&1 &&
        printf 'subjectAltName=%s\n' "$_san" >server.ext &&
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
            -out server.pem -days 2 -extfile server.ext >>openssl.log 2>&1
    ) || fail "openssl: $(tail -3 "$WORK/tls/openssl.log")"
}

registry_htpasswd() {
    need_package apache2-utils
    htpasswd -Bbc "$1" "$2" "$3" >/dev/null 2>&1 || fail "htpasswd $1"
}

registry_auth_file() {
    _file=$1
    shift
    _entries=""
    while [ $# -ge 3 ]; do
        _b64=$(printf '%s:%s' "$2" "$3" | base64 | tr -d '\n')
        _entries="$_entries${_entries:+, }\"$1\": {\"auth\": \"$_b64\"}"
        shift 3
    done
    printf '{"auths": {%s}}\n' "$_entries" >"$_file"
}

registry_push() {
    _model=$1
    _ref=$2
    shift 2
    "$BIN/tetris-registry" push "$@" "$_model" "$_ref" >"$WORK/push.out" 2>>"$WORK/push.log" ||
        fail "push $_ref: $(tail -3 "$WORK/push.log")"
}

registry_manifest() {
    curl -sf -H "$REGISTRY_ACCEPT" "$REGISTRY/v2/$1/manifests/$2" || fail "no manifest $1:$2"
}

registry_with_hello() {
    need_models
    registry_start
    RUN="$BIN/tetris-onnx-run"
    registry_push "$MODELS/hello_deepa.onnx" "oci://$REGISTRY_HOST/models/hello:v1"
    cp "$WORK/push.out" "$WORK/push1"
    registry_manifest models/hello v1 >"$WORK/v1.json"
}

registry_copy_artifact() {
    mkdir -p "$1/blobs"
    cp "$WORK/v1.json" "$1/manifest"
    for _d in $(jq -r '.config.digest, .layers[].digest' "$1/manifest"); do
        curl -sf "$REGISTRY/v2/models/hello/blobs/$_d" >"$1/blobs/${_d#sha256:}" ||
            fail "blob $_d"
    done
    TARGET=$(jq -r '[.layers[] | select(.mediaType == "application/vnd.tetris.tensor.v1")] |
                    max_by(.size) | .digest | sub("sha256:"; "")' "$1/manifest")
    TARGET_FILE="$STORE/public/tensors/$(printf %.2s "$TARGET")/$TARGET"
}

fault_registry() {
    _name=$1
    shift
    : >"$WORK/$_name.requests"
    "$BIN/tetris-test-fault-registry" --port-file "$WORK/$_name.port" \
        --requests "$WORK/$_name.requests" "$@" &
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    wait_until 10 "[ -s '$WORK/$_name.port' ]" || fail "fault registry $_name did not start"
    eval "PORT_$_name=\$(cat '$WORK/$_name.port')"
}
