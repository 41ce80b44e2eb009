#!/bin/sh
# test-tenants.sh - one tetris-reclaimer serves the shared store and the
# tenant stores the operator configured (--tenants, or tenants: in the
# settings file) under <store>/tenants/:
#   - a socket per configured tenant at <store>/tenants/T/public/ingest.sock
#     (where tetris-agent --tenant T connects), its directory made by the
#     daemon at start; none for any other directory there, whatever its
#     name, found at start or made while the daemon runs (as a pod's
#     hostPath DirectoryOrCreate volume would make one): no socket, no
#     metrics, no inventory, so no pod can make a tenant exist;
#   - isolation: what a tenant ingests lands in its store only; another
#     tenant loading the same model gets its own copy; /inventory shows the
#     shared store, /inventory?tenant=T only T's tensors (404 for a tenant
#     not served, 400 for a bad name);
#   - per-tenant metrics with a tenant label pass promtool;
#   - reclaim per store: a tenant's released tensors go after the
#     keep-alive while another tenant's held copy stays;
#   - a configured tenant's removed directory stops being served, and the
#     next pass makes it again, a new, empty store;
#   - a tenant added to the settings file is served after a restart, its
#     existing directory too (the real agent loads through it);
#   - the capacity bounds the node: a tenant's ingest is refused when the
#     shared store already fills it;
#   - descriptors: stores whose tensors spread over every fanout directory
#     do not run a daemon with a low descriptor limit out of them (the
#     fanout descriptors a daemon keeps are bounded, tensorstore);
#   - --no-tenants serves the shared store only.
# Tenants' inventories and series are read on --tenant-listen (what the
# public --listen hides of them: test-tenant-isolation.sh).
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
AGENT="$BIN/tetris-agent"
[ -x "$AGENT" ] || fail "tetris-agent missing"
command -v promtool >/dev/null || fail "promtool not installed (scripts/deps.sh installs it)"

# start_tenant_daemon ARGS...: the daemon, read over its tenant face.
start_tenant_daemon() {
    start_daemon --tenant-listen 127.0.0.1:0 "$@"
    RECLAIMER_PORT=$RECLAIMER_TENANT_PORT
}

# tmetric NAME TENANT: the value of NAME{tenant="TENANT"}.
tmetric() {
    http_get /metrics | awk -v n="$1{tenant=\"$2\"}" '$1 == n { print $2 }'
}
files() { find "$1/public/tensors" -type f 2>/dev/null | wc -l; }
digests() { find "$1/public/tensors" -type f -printf '%f\n' 2>/dev/null | sort; }
inventory_digests() { http_get "/inventory$1" | jq -r '.tensors[].digest' | sort; }
http_code() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$RECLAIMER_PORT$1"; }

# hold_in DIR MODEL OUT: an instance that loads MODEL through the daemon
# socket of the store at DIR and keeps it; sets HOLD_PID.
hold_in() {
    "$PROBE" load --store "$1" --hold "$2" </dev/null >"$3" 2>>"$WORK/probe.log" &
    HOLD_PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $HOLD_PID"
    wait_until 60 "grep -q '\"pid\"' '$3'" || fail "holder of $2 in $1 did not load"
}

synth "$WORK/m1.safetensors" 4 65536 51
synth "$WORK/m2.safetensors" 3 32768 52
M1_BYTES=$((4 * 65536))
# Directories under tenants/ before the daemon starts: one with a tenant
# name that is not configured, one with no tenant name at all.
mkdir -p "$STORE/tenants/rogue" "$STORE/tenants/Bad.Name"
start_tenant_daemon --interval 200ms --keep-alive 1 --scrub-rate 0 --tenants alpha,beta
A="$STORE/tenants/alpha"
B="$STORE/tenants/beta"
[ -S "$A/public/ingest.sock" ] && [ -S "$B/public/ingest.sock" ] || fail "no tenant sockets"
for d in rogue Bad.Name; do
    [ -e "$STORE/tenants/$d/public" ] && fail "an unconfigured directory ($d) was laid out"
done
[ "$(metric tetris_store_tenants)" = 2 ] || fail "tenants gauge $(metric tetris_store_tenants)"
[ "$(http_code '/inventory?tenant=rogue')" = 404 ] || fail "unconfigured tenant has an inventory"
note "configured tenants made and served at start; other directories are not"

# ---- isolation ----
hold_in "$A" "$WORK/m1.safetensors" "$WORK/a1.json"
A1=$HOLD_PID
jq -e '.fallback == false and .ingested == 4' "$WORK/a1.json" >/dev/null ||
    fail "alpha's load: $(cat "$WORK/a1.json")"
[ "$(files "$A")" = 4 ] || fail "alpha has $(files "$A") tensors, want 4"
[ "$(files "$STORE")" = 0 ] || fail "alpha's tensors leaked into the shared store"
[ "$(files "$B")" = 0 ] || fail "alpha's tensors leaked into beta"
# Beta loads the same model: its own copy, nothing found resident.
hold_in "$B" "$WORK/m1.safetensors" "$WORK/b1.json"
B1=$HOLD_PID
jq -e '.fallback == false and .ingested == 4 and .resident == 0' "$WORK/b1.json" >/dev/null ||
    fail "beta's load saw alpha's tensors: $(cat "$WORK/b1.json")"
[ "$(digests "$B")" = "$(digests "$A")" ] || fail "beta's copy differs from alpha's"
hold_in "$STORE" "$WORK/m2.safetensors" "$WORK/s1.json"
S1=$HOLD_PID
[ "$(files "$STORE")" = 3 ] && [ "$(files "$A")" = 4 ] || fail "shared store load crossed stores"

[ "$(inventory_digests '')" = "$(digests "$STORE")" ] || fail "shared inventory is not the shared store"
[ "$(inventory_digests '?tenant=alpha')" = "$(digests "$A")" ] || fail "alpha's inventory"
[ "$(inventory_digests '?tenant=beta')" = "$(digests "$B")" ] || fail "beta's inventory"
http_get '/inventory?tenant=alpha' | jq -e '.tenant == "alpha"' >/dev/null || fail "inventory names no tenant"
http_get '/inventory' | jq -e 'has("tenant") | not' >/dev/null || fail "shared inventory names a tenant"
[ "$(http_code '/inventory?tenant=nope')" = 404 ] || fail "unknown tenant not 404"
[ "$(http_code '/inventory?tenant=Bad.Name')" = 400 ] || fail "bad tenant name not 400"
note "isolation: alpha, beta and the shared store each hold their own tensors; inventories match"

# ---- metrics ----
wait_until 60 '[ "$(tmetric tetris_store_holders alpha)" = 1 ] && [ "$(tmetric tetris_store_holders beta)" = 1 ] && [ "$(metric tetris_store_holders)" = 1 ]' ||
    fail "per-tenant holders not seen"
http_get /metrics >"$WORK/metrics.prom"
promtool check metrics <"$WORK/metrics.prom" || fail "promtool rejects the tenant metrics"
[ "$(tmetric tetris_store_tensors alpha)" = 4 ] || fail "alpha tensors metric"
[ "$(tmetric tetris_ingest_bytes_total beta)" = $M1_BYTES ] || fail "beta ingest bytes metric"
[ "$(metric tetris_ingest_bytes_total)" = $((3 * 32768)) ] || fail "shared ingest bytes metric"
grep -q "^tetris_model_holders{tenant=\"alpha\",model=\"$WORK/m1.safetensors\"} 1\$" "$WORK/metrics.prom" ||
    fail "per-model gauge of a tenant: $(grep tetris_model_holders "$WORK/metrics.prom")"
grep -q '^tetris_ingest_duration_seconds_count{tenant="beta"} 1$' "$WORK/metrics.prom" ||
    fail "per-tenant histogram"
note "metrics: per-tenant series pass promtool"

# ---- reclaim per store ----
release "$A1"
wait_until 60 '[ "$(files "$A")" = 0 ]' || fail "alpha's released tensors not reclaimed"
[ "$(tmetric tetris_reclaims_total alpha)" = 4 ] || fail "alpha reclaims metric"
wait_passes 3
[ "$(files "$B")" = 4 ] && [ "$(files "$STORE")" = 3 ] || fail "a held copy was reclaimed"
[ "$(inventory_digests '?tenant=alpha')" = "" ] || fail "alpha's inventory still lists reclaimed tensors"
note "reclaim: alpha's released tensors freed, beta's and the shared store's held ones kept"

# ---- a directory that appears is not a tenant ----
# What a pod's hostPath volume of type DirectoryOrCreate makes (kubelet,
# as root), a bare directory and one with a store's layout: never served.
mkdir "$STORE/tenants/gamma" "$STORE/tenants/delta" "$STORE/tenants/delta/public"
wait_passes 3
for t in gamma delta; do
    [ -e "$STORE/tenants/$t/public/ingest.sock" ] && fail "unconfigured tenant $t got a socket"
    [ "$(http_code "/inventory?tenant=$t")" = 404 ] || fail "unconfigured tenant $t has an inventory"
done
http_get /metrics | grep -q 'tenant="\(gamma\|delta\|rogue\)"' && fail "unconfigured tenants have series"
grep -q 'tenant=\(gamma\|delta\|rogue\)' "$DAEMON_LOG" && fail "the daemon took up an unconfigured tenant"
[ "$(metric tetris_store_tenants)" = 2 ] || fail "tenants gauge with stray directories: $(metric tetris_store_tenants)"
note "a directory made under tenants/ while running gets no socket, no metrics, no inventory"
release "$B1"
release "$S1"

# ---- a tenant removed: the next pass makes it again, a new, empty store ----
rm -rf "$B"
wait_until 60 "grep -q 'event=tenant-retired tenant=beta' '$DAEMON_LOG'" || fail "removed tenant not retired"
wait_until 60 "[ -S '$B/public/ingest.sock' ]" || fail "removed tenant not made again"
[ "$(inventory_digests '?tenant=beta')" = "" ] || fail "re-made tenant inherited the old inventory"
"$PROBE" load --store "$B" "$WORK/m2.safetensors" >"$WORK/b2.json" 2>>"$WORK/probe.log" || fail "load into re-made beta"
jq -e '.fallback == false and .ingested == 3' "$WORK/b2.json" >/dev/null || fail "re-made beta: $(cat "$WORK/b2.json")"
http_get /metrics >"$WORK/metrics2.prom"
promtool check metrics <"$WORK/metrics2.prom" || fail "promtool rejects metrics after a tenant came back"
[ "$(grep -c '^tetris_store_tensors{tenant="beta"}' "$WORK/metrics2.prom")" = 1 ] || fail "beta reported twice"
[ "$(metric tetris_store_tenants)" = 2 ] || fail "tenants gauge after re-make: $(metric tetris_store_tenants)"
note "a removed tenant is retired, then made again as a new store"
stop_daemon

# ---- a tenant added to the settings file: served after a restart ----
# gamma's directory exists (made above while it was not a tenant); once
# configured it is laid out and served like any other.
printf 'tenants: "alpha,beta,gamma"\n' >"$WORK/tenants.yaml"
start_tenant_daemon --interval 200ms --keep-alive 1 --scrub-rate 0 --config "$WORK/tenants.yaml"
[ -S "$STORE/tenants/gamma/public/ingest.sock" ] || fail "configured tenant gamma not served"
[ -e "$STORE/tenants/delta/public/ingest.sock" ] && fail "unconfigured delta served after restart"
[ "$(metric tetris_store_tenants)" = 3 ] || fail "tenants gauge with gamma: $(metric tetris_store_tenants)"
# The agent holds the model (until its stdin closes) while its tenant's
# inventory is read: released, the tensors go after the 1 s keep-alive.
mkfifo "$WORK/g1.in"
"$AGENT" load --store "$STORE" --tenant gamma --hold "$WORK/m1.safetensors" <"$WORK/g1.in" \
    >"$WORK/g1.json" 2>>"$WORK/probe.log" &
G1=$!
KILL_ON_EXIT="$KILL_ON_EXIT $G1"
exec 3>"$WORK/g1.in"
wait_output $G1 "$WORK/g1.json" "agent --tenant gamma" "$WORK/probe.log"
jq -e ".fell_back == false and .ingested_bytes == $M1_BYTES" "$WORK/g1.json" >/dev/null ||
    fail "agent --tenant gamma: $(cat "$WORK/g1.json")"
[ "$(inventory_digests '?tenant=gamma')" = "$(digests "$STORE/tenants/gamma")" ] &&
    [ "$(files "$STORE/tenants/gamma")" = 4 ] || fail "gamma's inventory"
exec 3>&-
wait $G1 || fail "agent --tenant gamma exited $?"
stop_daemon
note "a tenant added to the settings file is served after a restart; tetris-agent --tenant loads through it"

# ---- capacity bounds the node ----
rm -rf "$STORE"
# (A tensor is a fifth of this capacity, more than the default unverified
# bound per uid, an eighth: the bounds are lifted here.)
start_tenant_daemon --interval 200ms --keep-alive 1h --scrub-rate 0 --capacity $((M1_BYTES * 7 / 5)) \
    --tenants alpha --max-unverified-bytes 100% --max-unverified-bytes-per-uid 100%
hold_in "$STORE" "$WORK/m1.safetensors" "$WORK/s2.json"
S2=$HOLD_PID
jq -e '.fallback == false and .ingested == 4' "$WORK/s2.json" >/dev/null || fail "shared load under capacity"
hold_in "$A" "$WORK/m1.safetensors" "$WORK/a2.json"
A2=$HOLD_PID
jq -e '.rejected >= 3' "$WORK/a2.json" >/dev/null || fail "alpha filled the node past capacity: $(cat "$WORK/a2.json")"
[ "$(tmetric tetris_ingest_rejected_tensors_total alpha)" -ge 3 ] || fail "alpha rejections not counted"
wait_passes 2
[ "$(files "$STORE")" = 4 ] || fail "the held shared tensors were evicted"
note "capacity: the shared store's held bytes leave alpha room for one tensor only"
release "$A2"
release "$S2"
stop_daemon

# ---- descriptors ----
# Four stores of 300 small tensors each (most of the 256 fanout
# directories in every store) under a limit of 200 descriptors: kept
# without a bound, the fanout descriptors alone would need about 900.
rm -rf "$STORE"
synth "$WORK/many.safetensors" 300 256 53
start_tenant_daemon --interval 1h --keep-alive 1h --scrub-rate 0 --tenants alpha,beta,gamma
prlimit --pid "$RECLAIMER_PID" --nofile=200:200 || fail "prlimit"
for s in "$STORE" "$A" "$B" "$STORE/tenants/gamma"; do
    "$PROBE" load --store "$s" "$WORK/many.safetensors" </dev/null >"$WORK/many.json" 2>>"$WORK/probe.log" ||
        fail "load into $s under a low descriptor limit failed"
    jq -e '.fallback == false and .ingested == 300' "$WORK/many.json" >/dev/null ||
        fail "load into $s under a low descriptor limit: $(cat "$WORK/many.json")"
    [ "$(files "$s")" = 300 ] || fail "$s has $(files "$s") tensors, want 300"
done
# The fanout directories the daemon keeps open: at most a quarter of 200
# (no reclaim pass runs meanwhile: its walk opens them for a moment).
kept=$(find "/proc/$RECLAIMER_PID/fd" -mindepth 1 -printf '%l\n' | grep -c '/public/tensors/[0-9a-f][0-9a-f]$' || true)
[ "$kept" -gt 0 ] || fail "the daemon keeps no fanout directory open (what this counts moved?)"
[ "$kept" -le 50 ] || fail "the daemon keeps $kept fanout directories open after the loads"
daemon_alive || fail "the daemon died under a low descriptor limit"
stop_daemon
note "descriptors: four stores of 300 tensors each loaded under a limit of 200; the daemon keeps $kept fanout directories open"

# ---- --no-tenants ----
start_tenant_daemon --interval 200ms --no-tenants --tenants alpha
[ -e "$A/public/ingest.sock" ] && fail "--no-tenants still serves alpha"
[ "$(metric tetris_store_tenants)" = 0 ] || fail "--no-tenants: tenants gauge"
http_get /metrics | grep -q 'tenant="' && fail "--no-tenants: tenant series"
[ "$(http_code '/inventory?tenant=alpha')" = 404 ] || fail "--no-tenants: alpha inventory"
stop_daemon
note "--no-tenants: the shared store only"
echo "ok $PROG"
