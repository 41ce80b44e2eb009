#!/bin/sh
# tetris-webhook, the real binary, over TLS on loopback: curl trusts only
# the CA the webhook made and wrote out; a function pod's review gets a
# JSON Patch that, applied, gives the pod the read-only store, the model
# label and the tetris scheduler, and reviewing the patched pod again gives
# no patch; a pod's tenant is its namespace's (read from a fake apiserver):
# a pod that says another tenant than its namespace (label or annotation),
# or sits in a namespace naming a tenant the operator did not configure,
# is denied with a message, one that agrees or says nothing gets its
# tenant's store only, from a directory the daemon made (type Directory);
# malformed reviews get 400 with a message and the webhook keeps serving;
# SIGTERM exits 0; bad options exit 2.
set -eu
. "$(dirname "$0")/../lib/common.sh"
command -v jq >/dev/null || skip "jq missing"

wh_start() { # NAME ARGS...: starts the webhook, sets URL, CA and PID
    _n=$1
    shift
    "$BIN/tetris-webhook" --listen 127.0.0.1:0 --cert-name 127.0.0.1 \
        --ca-out "$WORK/$_n.ca.pem" "$@" 2>"$WORK/$_n.log" &
    PID=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $PID"
    wait_until 60 "grep -q event=listening '$WORK/$_n.log' || ! kill -0 $PID" ||
        fail "$_n: never listened"
    grep -q event=listening "$WORK/$_n.log" || fail "$_n: died: $(cat "$WORK/$_n.log")"
    _port=$(sed -n 's/.*event=listening.* port=\([0-9]*\).*/\1/p' "$WORK/$_n.log")
    URL="https://127.0.0.1:$_port"
    CA="$WORK/$_n.ca.pem"
}

post() { # BODY -> "STATUS BODY"
    printf '%s' "$1" >"$WORK/body.json"
    curl -sS --max-time 20 --cacert "$CA" -o "$WORK/resp.json" -w '%{http_code}' \
        -H 'Content-Type: application/json' --data-binary @"$WORK/body.json" "$URL/mutate"
    printf ' '
    cat "$WORK/resp.json"
}

review() { # API_VERSION NAMESPACE POD_JSON
    jq -cn --arg v "$1" --arg ns "$2" --argjson pod "$3" \
        '{apiVersion: $v, kind: "AdmissionReview", request: {uid: "u-7",
          kind: {group: "", version: "v1", kind: "Pod"}, operation: "CREATE",
          namespace: $ns, object: $pod}}'
}

# The patch of a 200 answer, decoded ([] when there is none).
patch_of() {
    _b64=$(printf '%s' "${1#* }" | jq -r '.response.patch // empty')
    if [ -z "$_b64" ]; then echo '[]'; else printf '%s' "$_b64" | base64 -d; fi
}

# RFC 6902 as the apiserver applies it, for the operations the webhook uses.
JPATCH='def topath: ltrimstr("/") | split("/")
          | map(gsub("~1"; "/") | gsub("~0"; "~") | if test("^[0-9]+$") then tonumber else . end);
        reduce $ops[] as $o (.; ($o.path | topath) as $p
          | if $o.op == "test" then .
            elif $p[-1] == "-" then setpath($p[:-1] + [getpath($p[:-1]) | length]; $o.value)
            else setpath($p; $o.value) end)'

pod='{"metadata":{"generateName":"fn-","labels":{"faas_function":"fn"},
      "annotations":{"tetris.io/model":"silero_vad_v5"}},
      "spec":{"schedulerName":"default-scheduler","containers":[
        {"name":"fn","image":"fn:latest","env":[{"name":"fprocess","value":"x"}]},
        {"name":"side","image":"side:latest"}]}}'
pod=$(printf '%s' "$pod" | jq -c .)

wh_start main --no-api --namespace openfaas-fn --store /dev/shm/tetris --store-subdir public

# TLS only, and only with the CA it made.
curl -sS --max-time 20 -o /dev/null "http://127.0.0.1:${URL##*:}/healthz" 2>/dev/null &&
    fail "plain HTTP answered"
curl -sS --max-time 20 -o /dev/null "$URL/healthz" 2>/dev/null &&
    fail "TLS verified without the webhook's CA"
[ "$(curl -sS --max-time 20 --cacert "$CA" "$URL/healthz")" = ok ] || fail "healthz over TLS"
echo "ok TLS with the webhook's own CA only"

for v in admission.k8s.io/v1 admission.k8s.io/v1beta1; do
    got=$(post "$(review "$v" openfaas-fn "$pod")")
    [ "${got%% *}" = 200 ] || fail "$v: $got"
    printf '%s' "${got#* }" | jq -e --arg v "$v" '.apiVersion == $v and .kind == "AdmissionReview"
        and .response.uid == "u-7" and .response.allowed == true
        and .response.patchType == "JSONPatch"' >/dev/null || fail "$v: answer: $got"
    patched=$(printf '%s' "$pod" | jq -c --argjson ops "$(patch_of "$got")" "$JPATCH")
    printf '%s' "$patched" | jq -e '
        (.spec.volumes[] | select(.name == "tetris-store") | .hostPath.path) == "/dev/shm/tetris/public"
        and ([.spec.containers[] | .volumeMounts[] | select(.name == "tetris-store")
              | select(.readOnly == true and .mountPath == "/dev/shm/tetris/public")] | length) == 2
        and ([.spec.containers[] | .env[] | select(.name == "TETRIS_STORE" and .value == "/dev/shm/tetris")]
             | length) == 2
        and (.spec.containers[0].env[] | select(.name == "fprocess") | .value) == "x"
        and .metadata.labels["tetris.io/model"] == "silero_vad_v5"
        and .metadata.labels.faas_function == "fn"
        and .spec.schedulerName == "tetris-scheduler"' >/dev/null ||
        fail "$v: patched pod lacks the store: $patched"
    again=$(post "$(review "$v" openfaas-fn "$patched")")
    [ "$(patch_of "$again")" = '[]' ] || fail "$v: second review patched again: $again"
done
echo "ok v1 and v1beta1: read-only store, model label, scheduler; second review empty"

# Without an apiserver no namespace names a tenant: a pod that says it is
# a tenant's (label or annotation, whatever the name, one that would climb
# out of tenants/ included) is denied, never given that store.
for t in acme .. ../.. 'a/../../..' Acme; do
    for where in labels annotations; do
        hpod=$(printf '%s' "$pod" | jq -c --arg w "$where" --arg t "$t" \
            '.metadata[$w]["tetris.io/tenant"] = $t')
        got=$(post "$(review admission.k8s.io/v1 openfaas-fn "$hpod")")
        [ "${got%% *}" = 200 ] || fail "tenant '$t' ($where): $got"
        printf '%s' "${got#* }" | jq -e '.response.allowed == false
            and .response.status.code == 403 and (.response | has("patch") | not)' \
            >/dev/null || fail "tenant '$t' ($where) not denied: $got"
    done
done
grep -q 'event=denied.*belongs to no tenant' "$WORK/main.log" || fail "denial not logged"
echo "ok without namespace tenants, a pod that claims a tenant is denied"

# Namespaces it does not serve, other pods, other operations: no patch.
got=$(post "$(review admission.k8s.io/v1 kube-system "$pod")")
[ "$(patch_of "$got")" = '[]' ] || fail "unserved namespace patched: $got"
plain=$(printf '%s' "$pod" | jq -c 'del(.metadata.labels.faas_function) | del(.metadata.annotations)')
got=$(post "$(review admission.k8s.io/v1 openfaas-fn "$plain")")
[ "$(patch_of "$got")" = '[]' ] || fail "unselected pod patched: $got"
got=$(post "$(review admission.k8s.io/v1 openfaas-fn "$pod" | jq -c '.request.operation = "UPDATE"')")
[ "$(patch_of "$got")" = '[]' ] || fail "UPDATE patched: $got"
echo "ok other namespaces, pods and operations pass unchanged"

# Malformed reviews: 400 with a message saying what is wrong.
expect400() { # BODY MESSAGE_PART
    got=$(post "$1")
    [ "${got%% *}" = 400 ] || fail "body '$1': got $got, want 400"
    printf '%s' "${got#* }" | jq -e --arg m "$2" '.error | contains($m)' >/dev/null ||
        fail "body '$1': error does not say '$2': $got"
}
expect400 'garbage' 'not JSON'
expect400 '' 'not JSON'
expect400 '[1]' 'not a JSON object'
expect400 '{"apiVersion":"v1","kind":"AdmissionReview","request":{"uid":"u"}}' 'apiVersion'
expect400 '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}' 'no request'
expect400 '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}' 'uid'
expect400 "$(review admission.k8s.io/v1 x "$pod" | jq -c '.request.object = [1]')" 'request.object'
head -c 4096 /dev/urandom >"$WORK/random.bin"
code=$(curl -sS --max-time 20 --cacert "$CA" -o /dev/null -w '%{http_code}' \
    --data-binary @"$WORK/random.bin" "$URL/mutate")
[ "$code" = 400 ] || fail "random bytes: $code"
head -c $((5 * 1024 * 1024)) /dev/zero >"$WORK/big.bin"
code=$(curl -sS --max-time 20 --cacert "$CA" -o /dev/null -w '%{http_code}' \
    --data-binary @"$WORK/big.bin" "$URL/mutate")
[ "$code" = 413 ] || fail "5 MiB body: $code"
code=$(curl -sS --max-time 20 --cacert "$CA" -o /dev/null -w '%{http_code}' "$URL/mutate")
[ "$code" = 405 ] || fail "GET /mutate: $code"
got=$(post "$(review admission.k8s.io/v1 openfaas-fn "$pod")")
[ "$(patch_of "$got")" != '[]' ] || fail "not serving after bad requests: $got"
echo "ok malformed reviews: 400 with a message, 413, 405; still serving"

kill -TERM "$PID"
rc=0
wait "$PID" || rc=$?
[ "$rc" = 0 ] || fail "SIGTERM: exit status $rc"
grep -q event=stopping "$WORK/main.log" || fail "no stopping line"
echo "ok SIGTERM exits 0"

# ---- the CSI way: the model view volume, Pod Security "restricted" ----
# restricted POD: the rules "restricted" has that POD breaks, one per line.
restricted() {
    printf '%s' "$1" | jq -r -L "$ROOT/tests/lib" 'include "pod_security"; restricted_violations[]'
}
# The checker can fail: the hostPath way breaks "restricted" (and baseline).
wh_start hostpath --no-api --namespace openfaas-fn
hp_got=$(post "$(review admission.k8s.io/v1 openfaas-fn "$pod")")
hp_pod=$(printf '%s' "$pod" | jq -c --argjson ops "$(patch_of "$hp_got")" "$JPATCH")
restricted "$hp_pod" | grep -q 'volume tetris-store: type hostPath' ||
    fail "the restricted check passed a hostPath pod: $(restricted "$hp_pod")"
wh_start csi --no-api --volume csi --namespace openfaas-fn
ref=oci://registry.example:5000/models/silero_vad_v5:v1
csi_pod=$(printf '%s' "$pod" | jq -c --arg r "$ref" '.metadata.annotations["tetris.io/model-ref"] = $r')
got=$(post "$(review admission.k8s.io/v1 openfaas-fn "$csi_pod")")
patched=$(printf '%s' "$csi_pod" | jq -c --argjson ops "$(patch_of "$got")" "$JPATCH")
printf '%s' "$patched" | jq -e --arg r "$ref" '
    [.spec.volumes[]] == [{name: "tetris-model", csi: {driver: "csi.tetris.io", readOnly: true,
                                                      volumeAttributes: {model: $r}}}]
    and ([.spec.containers[] | .volumeMounts[] | select(.name == "tetris-model"
          and .readOnly == true and .mountPath == "/var/run/tetris/model")] | length) == 2
    and ([.spec.containers[] | .env[] | select(.name == "TETRIS_MODEL_VIEW"
          and .value == "/var/run/tetris/model")] | length) == 2
    and ([.spec.containers[] | .env[]? | select(.name == "TETRIS_STORE")] | length) == 0
    and .spec.schedulerName == "tetris-scheduler"
    and .metadata.labels["tetris.io/model"] == "silero_vad_v5"' >/dev/null ||
    fail "csi: patched pod: $patched"
v=$(restricted "$patched")
[ -z "$v" ] || fail "csi: the mutated pod breaks restricted: $v"
again=$(post "$(review admission.k8s.io/v1 openfaas-fn "$patched")")
[ "$(patch_of "$again")" = '[]' ] || fail "csi: second review patched again: $again"
echo "ok csi: model view volume, no hostPath, passes restricted; second review empty"

# The pod's derived-form choice goes to its volume's attributes (the plugin
# checks them).
d_pod=$(printf '%s' "$csi_pod" | jq -c '.metadata.annotations["tetris.io/derived"] = "auto"
    | .metadata.annotations["tetris.io/runtime"] = "onnxruntime 1.22.0"')
got=$(post "$(review admission.k8s.io/v1 openfaas-fn "$d_pod")")
patched=$(printf '%s' "$d_pod" | jq -c --argjson ops "$(patch_of "$got")" "$JPATCH")
printf '%s' "$patched" | jq -e --arg r "$ref" '[.spec.volumes[].csi.volumeAttributes] ==
    [{model: $r, derived: "auto", runtime: "onnxruntime 1.22.0"}]' >/dev/null ||
    fail "csi: the derived annotations: $(printf '%s' "$patched" | jq -c .spec.volumes)"
again=$(post "$(review admission.k8s.io/v1 openfaas-fn "$patched")")
[ "$(patch_of "$again")" = '[]' ] || fail "csi: derived annotations patched again: $again"
echo "ok csi: tetris.io/derived and tetris.io/runtime become the volume's attributes"

# What a pod states itself is kept; what it lacks is added. Its own
# capabilities get ALL dropped too; a capability it adds stays its choice
# (and restricted then names it).
own=$(printf '%s' "$csi_pod" | jq -c '.spec.securityContext = {runAsUser: 1000}
    | .spec.containers[0].securityContext = {capabilities: {drop: ["NET_RAW"], add: ["SYS_ADMIN"]}}
    | .spec.containers[1].securityContext = {allowPrivilegeEscalation: false,
                                             capabilities: {add: ["NET_BIND_SERVICE"]}}
    | .spec.initContainers = [{name: "init", image: "init:1"}]')
got=$(post "$(review admission.k8s.io/v1 openfaas-fn "$own")")
patched=$(printf '%s' "$own" | jq -c --argjson ops "$(patch_of "$got")" "$JPATCH")
printf '%s' "$patched" | jq -e '.spec.securityContext == {runAsUser: 1000, runAsNonRoot: true,
        seccompProfile: {type: "RuntimeDefault"}}
    and .spec.containers[0].securityContext == {allowPrivilegeEscalation: false,
        capabilities: {drop: ["NET_RAW", "ALL"], add: ["SYS_ADMIN"]}}
    and .spec.containers[1].securityContext == {allowPrivilegeEscalation: false,
        capabilities: {add: ["NET_BIND_SERVICE"], drop: ["ALL"]}}
    and .spec.initContainers[0].securityContext == {allowPrivilegeEscalation: false,
        capabilities: {drop: ["ALL"]}}' >/dev/null || fail "csi: own security context: $patched"
[ "$(restricted "$patched")" = "container fn: adds capability SYS_ADMIN" ] ||
    fail "csi: restricted on a pod adding SYS_ADMIN: $(restricted "$patched")"
again=$(post "$(review admission.k8s.io/v1 openfaas-fn "$patched")")
[ "$(patch_of "$again")" = '[]' ] || fail "csi: own context patched again: $again"
echo "ok csi: the pod's own security settings kept, the missing ones added"

# Nothing to mount (no reference, no manifest without an apiserver): the
# pod passes unchanged, and the log says why.
got=$(post "$(review admission.k8s.io/v1 openfaas-fn "$pod")")
printf '%s' "${got#* }" | jq -e '.response.allowed == true' >/dev/null || fail "csi: no model: $got"
[ "$(patch_of "$got")" = '[]' ] || fail "csi: a pod without a model was patched: $got"
grep -q 'event=not-mutated.*no model to mount' "$WORK/csi.log" || fail "csi: no not-mutated line"
"$BIN/tetris-webhook" --volume nfs >/dev/null 2>&1 && fail "--volume nfs accepted"
"$BIN/tetris-webhook" --volume csi --csi-driver 'bad/name' >/dev/null 2>&1 &&
    fail "--csi-driver bad/name accepted"
echo "ok csi: a pod without a model passes unchanged; bad --volume and --csi-driver refused"

# ---- tenants: the namespace's, never the pod's ----
# Namespaces as the cluster's admin labelled them, read through the API:
# alpha-fn and beta-fn are tenants' (configured with --tenant), rogue-fn
# names a tenant the operator did not configure, openfaas-fn and blank-fn
# (an empty label) none; any other namespace cannot be read (404).
# ns NAME [TENANT]: a namespace's object, labelled for TENANT when given.
ns() {
    jq -cn --arg n "$1" --arg t "${2-}" --argjson tenant "$([ $# -gt 1 ] && echo true || echo false)" \
        '{metadata: {name: $n, labels: ({"kubernetes.io/metadata.name": $n}
          + (if $tenant then {"tetris.io/tenant": $t} else {} end))}}'
}
jq -n --argjson a "$(ns openfaas-fn)" --argjson b "$(ns alpha-fn alpha)" \
    --argjson c "$(ns beta-fn beta)" --argjson d "$(ns rogue-fn gamma)" \
    --argjson e "$(ns blank-fn '')" '{namespaces: [$a, $b, $c, $d, $e]}' >"$WORK/objects.json"
fake_apiserver_start "$WORK/objects.json" openfaas-fn
wh_start api --kubeconfig "$WORK/kubeconfig" --webhook-configuration '' \
    --manifest-namespace openfaas-fn --store /dev/shm/tetris --store-subdir public \
    --tenant alpha --tenant beta

# denied NAMESPACE POD MESSAGE_PART: the answer refuses the pod with 403
# and a message saying why, and carries no patch.
denied() {
    got=$(post "$(review admission.k8s.io/v1 "$1" "$2")")
    [ "${got%% *}" = 200 ] || fail "$1: $got"
    printf '%s' "${got#* }" | jq -e --arg m "$3" '.response.uid == "u-7"
        and .response.allowed == false and .response.status.code == 403
        and (.response.status.message | contains($m)) and (.response | has("patch") | not)' \
        >/dev/null || fail "$1: not denied with '$3': $got"
}
# mutated NAMESPACE POD STORE_PATH [TENANT]: the patched pod mounts
# STORE_PATH only, a directory the daemon made (type Directory), with
# TETRIS_TENANT=TENANT (none without).
mutated() {
    got=$(post "$(review admission.k8s.io/v1 "$1" "$2")")
    printf '%s' "${got#* }" | jq -e '.response.allowed == true' >/dev/null || fail "$1: $got"
    patched=$(printf '%s' "$2" | jq -c --argjson ops "$(patch_of "$got")" "$JPATCH")
    printf '%s' "$patched" | jq -e --arg p "$3" --arg t "${4:-}" '
        [.spec.volumes[] | select(.hostPath) | .hostPath] == [{path: $p, type: "Directory"}]
        and ([.spec.containers[] | .volumeMounts[] | select(.name == "tetris-store")
              | select(.mountPath == $p and .readOnly == true)] | length) == 2
        and ([.spec.containers[0].env[] | select(.name == "TETRIS_TENANT") | .value]
             == (if $t == "" then [] else [$t] end))' >/dev/null ||
        fail "$1: patched pod: $(printf '%s' "$patched" | jq -c .spec)"
}
with() { # WHERE TENANT: the function pod saying TENANT in its labels or annotations
    printf '%s' "$pod" | jq -c --arg w "$1" --arg t "$2" '.metadata[$w]["tetris.io/tenant"] = $t'
}

# The attacks: a pod in alpha's namespace that says beta, by label or by
# annotation, or says both; a pod in a namespace without a tenant that says
# one; a namespace naming a tenant no node serves.
denied alpha-fn "$(with labels beta)" "label says 'beta' but its namespace belongs to tenant 'alpha'"
denied alpha-fn "$(with annotations beta)" "annotation says 'beta'"
denied alpha-fn "$(with labels alpha | jq -c '.metadata.annotations["tetris.io/tenant"] = "beta"')" \
    "annotation says 'beta'"
denied openfaas-fn "$(with labels alpha)" "belongs to no tenant"
denied blank-fn "$(with annotations alpha)" "belongs to no tenant"
denied rogue-fn "$pod" "names tenant 'gamma', which the operator has not configured"
denied rogue-fn "$(with labels gamma)" "names tenant 'gamma'"
grep -q "event=denied namespace=alpha-fn .*label says 'beta'" "$WORK/api.log" ||
    fail "denial not logged: $(grep event= "$WORK/api.log" | tail -3)"
echo "ok a pod that says another tenant than its namespace, or whose namespace names an unconfigured tenant, is denied"

# A pod that agrees with its namespace, or says nothing, gets its
# namespace's tenant store; a shared namespace's pod the shared store.
mutated alpha-fn "$pod" /dev/shm/tetris/tenants/alpha/public alpha
mutated alpha-fn "$(with labels alpha)" /dev/shm/tetris/tenants/alpha/public alpha
mutated alpha-fn "$(with annotations alpha)" /dev/shm/tetris/tenants/alpha/public alpha
mutated beta-fn "$pod" /dev/shm/tetris/tenants/beta/public beta
mutated openfaas-fn "$pod" /dev/shm/tetris/public
mutated blank-fn "$pod" /dev/shm/tetris/public
echo "ok a pod that agrees or says nothing gets its namespace's tenant store (type Directory)"

# A namespace that cannot be read: the pod might be a tenant's, so it gets
# no store at all, and starts (loading privately).
got=$(post "$(review admission.k8s.io/v1 unknown-fn "$pod")")
printf '%s' "${got#* }" | jq -e '.response.allowed == true' >/dev/null || fail "unknown-fn: $got"
[ "$(patch_of "$got")" = '[]' ] || fail "unreadable namespace patched: $got"
echo "ok a namespace that cannot be read: allowed, unchanged"
kill -TERM "$PID" "$API_PID"

# Usage errors exit 2, runtime failures 1.
[ "$(status "$BIN/tetris-webhook" --store relative --no-api)" = 2 ] || fail "relative --store"
[ "$(status "$BIN/tetris-webhook" --store-subdir ../up --no-api)" = 2 ] || fail "--store-subdir .."
[ "$(status "$BIN/tetris-webhook" --cert-days 0 --no-api)" = 2 ] || fail "--cert-days 0"
[ "$(status "$BIN/tetris-webhook" --bogus)" = 2 ] || fail "unknown option"
for t in .. 'a/b' Acme ''; do
    [ "$(status "$BIN/tetris-webhook" --no-api --tenant "$t")" = 2 ] || fail "--tenant '$t'"
done
[ "$(status "$BIN/tetris-webhook" --no-api --kubeconfig x)" = 2 ] || fail "--no-api --kubeconfig"
[ "$(status "$BIN/tetris-webhook" --no-api --listen 127.0.0.1:0 --ca-out "$WORK/no/such/ca.pem")" = 1 ] ||
    fail "unwritable --ca-out"
grep -q 'ca.pem' "$WORK/status.err" || fail "unwritable --ca-out: message does not name it"
[ "$(status "$BIN/tetris-webhook" --no-api --listen 127.0.0.1:notaport)" = 1 ] || fail "bad listen"
echo "ok usage errors exit 2, runtime failures 1"
