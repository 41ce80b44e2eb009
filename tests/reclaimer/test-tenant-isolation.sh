#!/bin/sh
# test-tenant-isolation.sh - tenants are isolated by construction, against
# pods that try to cross (each pod a process under its own uid):
#   - a pod that mounts only tenants/T (as the chart's snippet does) sees
#     T's store alone and loads through T's socket;
#   - with --tenant-uids, a tenant's socket serves only that tenant's uids:
#     another tenant's pod, or an unbound uid, that connects to it anyway
#     is refused (SO_PEERCRED) and nothing lands in the store; a tenant's
#     uid is refused on the shared socket too, so its models never land
#     where every pod sees them;
#   - --listen (reachable by every pod) shows the shared store and the
#     node only: no tenant-labelled series, every ?tenant= inventory 403
#     alike (served or not); --tenant-listen shows the tenants' detail.
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
command -v unshare >/dev/null || skip "unshare not installed"
unshare -m true 2>/dev/null || skip "cannot make a mount namespace here"

ALPHA_UID=60001
BETA_UID=60002
NOBODY=65534
# as UID CMD...: CMD under another uid, with no groups (a pod's process).
as() {
    _uid=$1
    shift
    setpriv --reuid="$_uid" --regid="$_uid" --clear-groups "$@"
}
files() { find "$1/public/tensors" -type f 2>/dev/null | wc -l; }
code() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1$2"; }

# Pods read the models and reach the sockets; they write nothing.
chmod 755 "$WORK"
synth "$WORK/m1.safetensors" 4 65536 61
synth "$WORK/m2.safetensors" 3 32768 62
chmod 644 "$WORK"/*.safetensors
A="$STORE/tenants/alpha"
B="$STORE/tenants/beta"
start_daemon --interval 200ms --keep-alive 1h --scrub-rate 0 --tenants alpha,beta \
    --tenant-uids "alpha=$ALPHA_UID,beta=$BETA_UID" --tenant-listen 127.0.0.1:0
[ -n "$RECLAIMER_TENANT_PORT" ] || fail "no tenant listen address"

# ---- a pod that mounts tenants/beta/public only ----
mkdir "$WORK/pod"
# shellcheck disable=SC2016
unshare -m sh -c 'mount --bind -o ro "$1" "$2" && exec setpriv --reuid="$3" --regid="$3" --clear-groups "$4" load --store "$2" "$5"' \
    sh "$B/public" "$WORK/pod" "$BETA_UID" "$PROBE" "$WORK/m1.safetensors" >"$WORK/beta.json" 2>>"$WORK/probe.log" ||
    fail "beta's pod could not load"
jq -e '.fallback == false and .ingested == 4' "$WORK/beta.json" >/dev/null ||
    fail "beta's pod through its own mount: $(cat "$WORK/beta.json")"
[ "$(files "$B")" = 4 ] && [ "$(files "$A")" = 0 ] && [ "$(files "$STORE")" = 0 ] ||
    fail "beta's load landed outside beta's store"
# What that pod sees of the node's stores: beta's, nothing else.
# shellcheck disable=SC2016
unshare -m sh -c 'mount --bind -o ro "$1" "$2" && exec setpriv --reuid="$3" --regid="$3" --clear-groups find "$2"' \
    sh "$B/public" "$WORK/pod" "$BETA_UID" >"$WORK/seen.txt" 2>/dev/null
grep -q '/tenants/\|alpha' "$WORK/seen.txt" && fail "beta's pod sees other stores: $(grep alpha "$WORK/seen.txt")"
grep -q "^$WORK/pod/ingest.sock\$" "$WORK/seen.txt" || fail "beta's pod does not see its socket"
note "a pod mounting tenants/beta sees beta's store only and loads through it"

# ---- the peer's credentials decide ----
as $ALPHA_UID "$PROBE" load --store "$A" "$WORK/m1.safetensors" >"$WORK/alpha.json" 2>>"$WORK/probe.log"
jq -e '.fallback == false and .ingested == 4' "$WORK/alpha.json" >/dev/null ||
    fail "alpha's own uid on alpha's socket: $(cat "$WORK/alpha.json")"
# beta's pod (it found alpha's socket somehow) and an unbound uid.
for uid in $BETA_UID $NOBODY; do
    as "$uid" "$PROBE" load --store "$B" --socket "$A/public/ingest.sock" "$WORK/m2.safetensors" \
        >"$WORK/cross.json" 2>>"$WORK/probe.log" || fail "uid $uid: the probe failed"
    jq -e '.fallback == true' "$WORK/cross.json" >/dev/null ||
        fail "uid $uid was served on alpha's socket: $(cat "$WORK/cross.json")"
    grep -q "event=ingest-denied tenant=alpha .*uid=$uid " "$DAEMON_LOG" || fail "uid $uid's refusal not logged"
done
[ "$(files "$A")" = 4 ] || fail "alpha's store took another uid's tensors ($(files "$A") files)"
# A tenant's uid on the shared socket: refused; an unbound one: served.
as $ALPHA_UID "$PROBE" load --store "$STORE" "$WORK/m2.safetensors" >"$WORK/shared-a.json" 2>>"$WORK/probe.log"
jq -e '.fallback == true' "$WORK/shared-a.json" >/dev/null ||
    fail "alpha's uid was served on the shared socket: $(cat "$WORK/shared-a.json")"
[ "$(files "$STORE")" = 0 ] || fail "alpha's model landed in the shared store"
as $NOBODY "$PROBE" load --store "$STORE" "$WORK/m2.safetensors" >"$WORK/shared-n.json" 2>>"$WORK/probe.log"
jq -e '.fallback == false and .ingested == 3' "$WORK/shared-n.json" >/dev/null ||
    fail "an unbound uid on the shared socket: $(cat "$WORK/shared-n.json")"
note "SO_PEERCRED: alpha's socket serves alpha's uid only; tenants' uids stay off the shared socket"

# ---- what HTTP shows to whom ----
http_get /metrics >"$WORK/public.prom"
grep -q 'tenant="' "$WORK/public.prom" && fail "the public /metrics names tenants: $(grep -m 3 'tenant="' "$WORK/public.prom")"
grep -q "m1.safetensors" "$WORK/public.prom" && fail "the public /metrics shows a tenant's model"
[ "$(metric tetris_store_tensors)" = 3 ] || fail "the public /metrics lost the shared store"
[ "$(metric tetris_store_tenants)" = 2 ] || fail "tenants gauge"
for t in alpha beta nope; do
    [ "$(code "$RECLAIMER_PORT" "/inventory?tenant=$t")" = 403 ] ||
        fail "the public /inventory?tenant=$t is not 403"
done
[ "$(code "$RECLAIMER_PORT" /inventory)" = 200 ] || fail "the public shared inventory"
curl -sS "http://127.0.0.1:$RECLAIMER_TENANT_PORT/inventory?tenant=alpha" | jq -r '.tensors[].digest' | sort >"$WORK/inv-a"
find "$A/public/tensors" -type f -printf '%f\n' | sort >"$WORK/files-a"
cmp -s "$WORK/inv-a" "$WORK/files-a" || fail "the tenant face's inventory of alpha"
[ "$(code "$RECLAIMER_TENANT_PORT" "/inventory?tenant=nope")" = 404 ] || fail "tenant face: unknown tenant"
metric_at "http://127.0.0.1:$RECLAIMER_TENANT_PORT" 'tetris_store_tensors{tenant="alpha"}' >"$WORK/t.txt"
[ "$(cat "$WORK/t.txt")" = 4 ] || fail "the tenant face's alpha series: $(cat "$WORK/t.txt")"
note "HTTP: --listen shows the shared store and node; --tenant-listen the tenants"

# ---- SIGHUP re-reads the bindings: nobody becomes beta's ----
printf 'tenants: "alpha,beta"\ntenant_uids: "beta=%s"\n' $NOBODY >"$WORK/r.yaml"
# Flags override the file: restart with the file only.
stop_daemon
start_daemon --interval 200ms --keep-alive 1h --scrub-rate 0 --config "$WORK/r.yaml"
as $NOBODY "$PROBE" load --store "$B" "$WORK/m2.safetensors" >"$WORK/nb.json" 2>>"$WORK/probe.log"
jq -e '.fallback == false' "$WORK/nb.json" >/dev/null || fail "nobody bound to beta: $(cat "$WORK/nb.json")"
as $NOBODY "$PROBE" load --store "$STORE" "$WORK/m1.safetensors" >"$WORK/nb2.json" 2>>"$WORK/probe.log"
jq -e '.fallback == true' "$WORK/nb2.json" >/dev/null || fail "beta's uid served on the shared socket"
printf 'tenants: "alpha,beta"\ntenant_uids: ""\n' >"$WORK/r.yaml"
kill -HUP "$RECLAIMER_PID"
wait_until 30 "grep -q event=reloaded '$DAEMON_LOG'" || fail "no reload"
as $NOBODY "$PROBE" load --store "$STORE" "$WORK/m1.safetensors" >"$WORK/nb3.json" 2>>"$WORK/probe.log"
jq -e '.fallback == false' "$WORK/nb3.json" >/dev/null || fail "bindings not dropped by SIGHUP: $(cat "$WORK/nb3.json")"
note "the bindings come from the config file too and SIGHUP re-reads them"
stop_daemon
echo "ok $PROG"
