# tests/lib/registry.sh - a real OCI registry for the tests: Debian's
# docker-registry (CNCF distribution), installed with apt when missing,
# serving plain HTTP on a loopback port. Source after common.sh.
# shellcheck shell=sh

# registry_start: starts one under $WORK/registry; sets REGISTRY_PORT and
# REGISTRY (http://127.0.0.1:PORT). Skips when it cannot be installed.
registry_start() {
    if ! command -v docker-registry >/dev/null 2>&1; then
        command -v apt-get >/dev/null 2>&1 || skip "no docker-registry and no apt-get to install it"
        apt-get install -y docker-registry >"$WORK/apt.log" 2>&1 ||
            skip "apt-get install docker-registry failed: $(tail -1 "$WORK/apt.log")"
    fi
    REGISTRY_PORT=$(free_port)
    REGISTRY="http://127.0.0.1:$REGISTRY_PORT"
    mkdir -p "$WORK/registry"
    printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
        "$WORK/registry/data" "$REGISTRY_PORT" >"$WORK/registry/config.yml"
    docker-registry serve "$WORK/registry/config.yml" >>"$WORK/registry.log" 2>&1 &
    KILL_ON_EXIT="$KILL_ON_EXIT $!"
    wait_until 30 "curl -sf '$REGISTRY/v2/'" || fail "the registry did not start"
}
