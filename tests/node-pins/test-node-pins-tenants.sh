#!/bin/sh
# test-node-pins-tenants.sh - pins follow trust, not labels: the real
# tetris-node-pins, reading a fake apiserver (tests/lib/fake_apiserver.c),
# writes the pin file the real tetris-reclaimer serving tenant stores reads.
#   - the attack: a pod in tenant alpha's namespace names tenant beta's
#     model and forges the pod label tetris.io/tenant=beta; another names
#     an operator's shared model whose tensors are beta's too. Nothing is
#     pinned in beta's store: beta's released tensors are reclaimed (before
#     the fix, every pin applied in every store and kept them resident in
#     beta's quota). What alpha's pods pin lands in alpha's store only;
#   - a manifest labelled for one tenant is never another's, nor the shared
#     store's; a pod in a namespace that is gone, or whose tenant label is
#     not a tenant name, pins nothing;
#   - the honest case still works: beta's own pod pins beta's model in
#     beta's store and its released tensors stay; a namespace without a
#     tenant pins in the shared store (a pin line without a tenant).
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
PINS_BIN="$BIN/tetris-node-pins"
[ -x "$PINS_BIN" ] || fail "tetris-node-pins missing"

files() { find "$1/public/tensors" -type f 2>/dev/null | wc -l; }
digests() { find "$1/public/tensors" -type f -printf '%f\n' 2>/dev/null | sort; }
hold_in() {
    "$PROBE" load --store "$1" --hold "$2" </dev/null >"$3" 2>>"$WORK/probe.log" &
    HOLD_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $HOLD_PID"
    wait_until 60 "grep -q '\"pid\"' '$3'" || fail "holder of $2 in $1 did not load"
}

# The fake apiserver and a kubeconfig for it.
OBJECTS="$WORK/objects.json"
echo '{}' >"$OBJECTS"
fake_apiserver_start "$OBJECTS" tetris-system

# pins_once: one tetris-node-pins refresh for node-x into $PINS.
PINS="$WORK/pins"
pins_once() {
    "$PINS_BIN" --once --node node-x --pin-file "$PINS" --kubeconfig "$WORK/kubeconfig" \
        >>"$WORK/node-pins.log" 2>&1 || fail "tetris-node-pins --once exited $?"
}
# wait_pins_loaded N: the daemon's latest load of the pin file had N pins.
last_load() { grep 'event=pins-loaded' "$DAEMON_LOG" | tail -n 1; }
wait_pins_loaded() {
    wait_until 30 "last_load | grep -q 'digests=$1\$'" ||
        fail "the daemon's last pin load: $(last_load), want $1 pins"
}

# objects PODS: the cluster, with PODS (a JSON array) bound to node-x.
# Beta's model's manifest is labelled for beta; an operator's shared model
# (no tenant label) happens to name the same tensors.
manifest() {
    digests "$B" | jq -R '{digest: ("sha256:" + .)}' | jq -sc '{format: "tetris-manifest/1", tensors: .}'
}
objects() {
    jq -n --argjson pods "$1" --arg manifest "$(manifest)" '{
      namespaces: [
        {metadata: {name: "team-a", labels: {"tetris.io/tenant": "alpha"}}},
        {metadata: {name: "team-b", labels: {"tetris.io/tenant": "beta"}}},
        {metadata: {name: "plain"}},
        {metadata: {name: "odd", labels: {"tetris.io/tenant": "Not.A/Tenant"}}}],
      configmaps: [
        {metadata: {name: "tetris-manifest-beta-model", namespace: "tetris-system",
                    labels: {"tetris.io/model": "beta-model", "tetris.io/tenant": "beta"}},
         data: {"manifest.json": $manifest}},
        {metadata: {name: "tetris-manifest-shared-model", namespace: "tetris-system",
                    labels: {"tetris.io/model": "shared-model"}},
         data: {"manifest.json": $manifest}}],
      pods: $pods}' >"$OBJECTS.tmp" && mv "$OBJECTS.tmp" "$OBJECTS"
}
pod() { # NAMESPACE NAME MODEL [FORGED_TENANT]
    jq -nc --arg ns "$1" --arg name "$2" --arg model "$3" --arg t "${4:-}" '{
      metadata: {namespace: $ns, name: $name,
                 labels: ({"tetris.io/model": $model} +
                          (if $t == "" then {} else {"tetris.io/tenant": $t} end))},
      spec: {nodeName: "node-x"}, status: {phase: "Running"}}'
}
# expect_pins TENANT...: the pin file is beta's digests once for each
# TENANT ("-": the shared store, a line without a tenant).
expect_pins() {
    : >"$WORK/want"
    for _t in "$@"; do
        if [ "$_t" = - ]; then digests "$B" >>"$WORK/want"; else digests "$B" | sed "s/\$/ $_t/" >>"$WORK/want"; fi
    done
    sort "$PINS" >"$WORK/got"
    sort -o "$WORK/want" "$WORK/want"
    cmp -s "$WORK/got" "$WORK/want" || fail "pin file: $(cat "$PINS"), want: $(cat "$WORK/want")"
}

synth "$WORK/m1.safetensors" 4 65536 61
A="$STORE/tenants/alpha"
B="$STORE/tenants/beta"
start_daemon --interval 200ms --keep-alive 1 --scrub-rate 0 --tenants alpha,beta --pin-file "$PINS"
hold_in "$B" "$WORK/m1.safetensors" "$WORK/b1.json"
B1=$HOLD_PID
[ "$(files "$B")" = 4 ] || fail "beta has $(files "$B") tensors, want 4"

# ---- the attack ----
objects "[$(pod team-a forged beta-model beta), $(pod team-a shared-names shared-model),
          $(pod plain plain-forged beta-model beta), $(pod gone ghost shared-model),
          $(pod odd odd-tenant shared-model)]"
pins_once
expect_pins alpha
grep -q 'event=manifest-missing model=beta-model tenant=alpha' "$WORK/node-pins.log" ||
    fail "beta's manifest was not refused for alpha's pod"
grep -q 'event=manifest-missing model=beta-model tenant=(shared)' "$WORK/node-pins.log" ||
    fail "beta's manifest was not refused for the shared store"
grep -q 'event=namespace-gone namespace=gone' "$WORK/node-pins.log" || fail "a gone namespace"
grep -q 'event=namespace-tenant-invalid namespace=odd' "$WORK/node-pins.log" ||
    fail "a namespace with an invalid tenant"
grep -q 'pods_skipped=2 pins=4' "$WORK/node-pins.log" || fail "pins-written counts"
wait_pins_loaded 4
release "$B1"
wait_until 30 '[ "$(files "$B")" = 0 ]' ||
    fail "alpha's pods keep beta's released tensors resident ($(files "$B") left)"
note "attack: alpha's pods (one forging tetris.io/tenant=beta) pin nothing in beta's store; beta's released tensors were reclaimed"

# ---- the honest case ----
hold_in "$B" "$WORK/m1.safetensors" "$WORK/b2.json"
B2=$HOLD_PID
objects "[$(pod team-b own beta-model), $(pod plain shared shared-model)]"
pins_once
expect_pins beta -
wait_pins_loaded 8
release "$B2"
wait_passes 10
[ "$(files "$B")" = 4 ] || fail "beta's own pins did not keep its tensors ($(files "$B") left)"
grep -q "GET /api/v1/namespaces/team-b\$" "$WORK/api.requests" || fail "the namespace was not read"
note "honest: beta's pod pins its model in beta's store; a namespace without a tenant pins in the shared store"
stop_daemon
