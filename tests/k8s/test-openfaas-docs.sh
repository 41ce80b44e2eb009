#!/bin/sh
# test-openfaas-docs.sh - docs/OPENFAAS.md's "On the local cluster, end to
# end" runs as written: its sh blocks, in order, in one shell (sh -eu), from
# the repository's root, with the real OpenFaaS CE gateway and faas-netes,
# the Helm chart, the profiling Job and a model no other test deploys
# through OpenFaaS (PaddleOCR's recognition model). Each block checks what
# it shows (the answer equals a private run's, two holders of one copy, the
# copied manifest gone with the last function). Before the doc's clean-up
# block, the test checks what the doc's output alone does not prove:
#  1. nothing of the deleted functions is left in openfaas-fn;
#  2. the gateway and faas-netes timeouts of step 2 let a request slower
#     than faas-netes' 10 s default through, which a faas-netes with its
#     code defaults cuts (the slow function: a batch of 2 that waits 12 s
#     for its second request);
#  3. deploy/openfaas/stack.yml holds the config step 5's plan picks from
#     deploy/profiles/ocr-rec.profile.yaml;
# and after it, that the clean-up left nothing: namespaces, release,
# webhook configuration, processes, ports, the store.
#
# The doc uses fixed names (namespaces openfaas-fn and tetris-system,
# /dev/shm/tetris, /tmp/tetris-openfaas, ports 8080-8082, 8443, 8888, 9464,
# 10259): the test fails at once where one is taken, and removes what it
# made at exit when a block failed. SKIPs where the OpenFaaS sources and
# binaries are both absent.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
k8s_release_only tetris-function
need_models
doc="$ROOT/docs/OPENFAAS.md"
OF=/tmp/tetris-openfaas
GW=http://127.0.0.1:8080
"$ROOT/scripts/cluster/build-openfaas.sh" >"$WORK/of-bin" 2>"$WORK/build-openfaas.log" || {
    rc=$?
    [ $rc = 3 ] && skip "no OpenFaaS CE sources (TETRIS_OPENFAAS_SRC, default ../shared/openfaas)"
    fail "cannot build OpenFaaS"
}
of_bin="$(cat "$WORK/of-bin")"
HELM="$("$ROOT/scripts/helm.sh")" || fail "cannot install helm (scripts/helm.sh)"
k8s_cluster_up

# The doc's blocks: those before its clean-up, and the clean-up.
awk -v steps="$WORK/steps.sh" -v cleanup="$WORK/cleanup.sh" '
    /^## / { in_run = ($0 == "## On the local cluster, end to end"); next }
    !in_run { next }
    /^### / { out = ($0 ~ /^### [0-9]+\. Clean up$/) ? cleanup : steps; print ": \"" $0 "\"" >out; next }
    /^```sh$/ { in_block = 1; next }
    /^```$/ { in_block = 0; next }
    in_block { print >out }' "$doc"
[ "$(grep -c '^: "### ' "$WORK/steps.sh")" -ge 9 ] && [ -s "$WORK/cleanup.sh" ] ||
    fail "no steps and clean-up found in $doc"
# The clean-up runs in a shell of its own, after this test's checks: the
# variables the steps set reach it as a reader's shell keeps them.
sed -n 's/^\(export \)\{0,1\}\([A-Z_][A-Z0-9_]*\)=.*/\2/p' "$WORK/steps.sh" | sort -u >"$WORK/doc.vars"
cat >>"$WORK/steps.sh" <<'SH'
while read -r _v; do
    eval "_val=\${$_v-}"
    printf "export %s='%s'\n" "$_v" "$_val"
done <"$DOC_VARS" >"$DOC_ENV"
SH
{ echo '. "$DOC_ENV"'; cat "$WORK/cleanup.sh"; } >"$WORK/cleanup-run.sh"

# The doc's fixed names are free.
for port in 8080 8081 8082 8443 8888 9464 10259; do
    ! ss -Hltn "sport = :$port" | grep -q . || fail "port $port, which the doc uses, is taken"
done
for ns in openfaas-fn tetris-system; do
    ! kc get namespace "$ns" >/dev/null 2>&1 || fail "namespace $ns, which the doc makes, exists"
done
! kc get mutatingwebhookconfiguration tetris-webhook >/dev/null 2>&1 ||
    fail "a tetris-webhook configuration exists (another release)"
for d in /dev/shm/tetris "$OF"; do
    [ ! -e "$d" ] || fail "$d, which the doc makes, exists"
done

# What a failed block leaves behind goes at exit (the doc's clean-up,
# forced); once the doc's own clean-up ran, nothing is left to do.
docs_cleanup() {
    [ -e "$WORK/cleaned" ] && return 0
    "$HELM" uninstall tetris -n tetris-system --wait --timeout 120s >/dev/null 2>&1
    for p in gateway faas-netes; do
        [ ! -f "$OF/$p.pid" ] || kill -KILL "$(cat "$OF/$p.pid")" 2>/dev/null
    done
    for ns in openfaas-fn tetris-system; do
        kc delete namespace "$ns" --wait=false >/dev/null 2>&1
        kc -n "$ns" delete pods --all --grace-period=0 --force --wait=false >/dev/null 2>&1
    done
    rm -rf /dev/shm/tetris "$OF"
}
at_exit docs_cleanup

# The doc's shell, not this test's: no make jobserver of an outer make.
run_doc() { # SCRIPT LOG
    (cd "$ROOT" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL DOC_VARS="$WORK/doc.vars" \
        DOC_ENV="$WORK/doc.env" sh -eux "$1") >"$2" 2>&1
}
# diagnose: the functions' and tetris' pods, with their events, on stderr.
diagnose() {
    for ns in openfaas-fn tetris-system; do
        kc -n "$ns" get pods -o wide >&2 2>/dev/null
        for p in $(kc -n "$ns" get pods -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
            k8s_describe "$ns" "$p"
        done
    done
    tail -5 "$OF/gateway.log" "$OF/faas-netes.log" >&2 2>/dev/null
}
start=$(date +%s)
run_doc "$WORK/steps.sh" "$WORK/steps.log" || {
    diagnose
    fail "a block of docs/OPENFAAS.md failed in $(grep '^+ : ###' "$WORK/steps.log" | tail -1 | cut -c5-)"
}
note "steps 1-9 of the doc took $(($(date +%s) - start)) s"
echo "ok the doc's steps ran as written: $(grep -c '^+ : ###' "$WORK/steps.log") sections"
PASSWORD="$(cat "$OF/secrets/basic-auth-password")"

# 1. The deleted functions left nothing.
left="$(kc -n openfaas-fn get deployments,replicasets,services,pods,configmaps -l faas_function -o name)"
[ -z "$left" ] || fail "left in openfaas-fn: $left"
left="$(kc -n openfaas-fn get configmaps -l app.kubernetes.io/managed-by=tetris-webhook -o name)"
[ -z "$left" ] || fail "manifest copies left in openfaas-fn: $left"
echo "ok 1. deleting both functions left no Deployment, ReplicaSet, Service, pod or manifest copy"

# 2. A request slower than faas-netes' default 10 s passes with the doc's
# timeouts. The slow function answers a lone request after its batch of 2
# has waited 12 s for a second one.
curl -fsS -u "admin:$PASSWORD" "$GW/system/functions" -H 'Content-Type: application/json' \
    --data-binary @- >"$WORK/slow-deploy.out" 2>&1 <<JSON || fail "slow function: $(cat "$WORK/slow-deploy.out")"
{"service": "ocr-rec-slow", "image": "tetris-ocr-rec:latest", "namespace": "openfaas-fn",
 "envVars": {"TETRIS_MODEL": "/models/ch_PP-OCRv4_rec_infer.onnx", "TETRIS_BATCH": "2",
             "TETRIS_MAX_WAIT_MS": "12000"},
 "annotations": {"tetris.io/model": "ocr-rec"},
 "labels": {"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"}}
JSON
kc -n openfaas-fn rollout status deployment/ocr-rec-slow --timeout="${K8S_TIMEOUT}s" >/dev/null ||
    fail "the slow function did not become ready"
got="$(curl -sS -o "$WORK/slow.json" -w '%{http_code} %{time_total}' --max-time 60 \
    -d '{"seed": 3}' "$GW/function/ocr-rec-slow")"
[ "${got% *}" = 200 ] && jq -e '.batch_size == 1 and .queue_ms >= 11000' "$WORK/slow.json" >/dev/null ||
    fail "through the doc's gateway: $got $(cat "$WORK/slow.json")"
# faas-netes as its code sets it (read_timeout 10 s) cuts the same request.
netes_port="$(free_port)"
env port="$netes_port" function_namespace=openfaas-fn \
    "$of_bin/faas-netes" -kubeconfig "$KUBECONFIG_FILE" -operator=false >"$WORK/faas-netes-default.log" 2>&1 &
KILL_ON_EXIT="$KILL_ON_EXIT $!"
wait_until 60 "curl -fsS --max-time 2 http://127.0.0.1:$netes_port/healthz" ||
    fail "faas-netes with its defaults not healthy"
cut="$(curl -sS -o "$WORK/cut.out" -w '%{http_code} %{time_total}' --max-time 60 \
    -d '{"seed": 3}' "http://127.0.0.1:$netes_port/function/ocr-rec-slow")"
[ "${cut% *}" != 200 ] && awk -v t="${cut#* }" 'BEGIN { exit !(t >= 9 && t < 12) }' ||
    fail "faas-netes with its 10 s default answered $cut, want an error after about 10 s"
echo "ok 2. a 12 s request passes the doc's timeouts (${got#* } s); faas-netes' defaults cut it (${cut#* } s, HTTP ${cut% *})"
curl -fsS -u "admin:$PASSWORD" -X DELETE "$GW/system/functions" \
    -d '{"functionName": "ocr-rec-slow"}' >/dev/null || fail "cannot delete the slow function"
wait_until "$K8S_TIMEOUT" "[ -z \"\$(kc -n openfaas-fn get deployments,pods,configmaps -l faas_function -o name)\" ] &&
    [ -z \"\$(kc -n openfaas-fn get configmaps -l app.kubernetes.io/managed-by=tetris-webhook -o name)\" ]" ||
    fail "the slow function left: $(kc -n openfaas-fn get deployments,pods,configmaps -o name | tr '\n' ' ')"

# 3. stack.yml is step 5 for the profile in deploy/profiles/.
plan_args="--rps 2 --slo-ms 2000 --sharing"
grep -qF "tetris-autoscaler plan --profile \"\$OF/ocr-rec.profile.yaml\" $plan_args" "$doc" ||
    fail "step 5 of the doc no longer plans with $plan_args"
"$BIN/tetris-autoscaler" plan --profile "$ROOT/deploy/profiles/ocr-rec.profile.yaml" $plan_args \
    >"$WORK/plan.json" 2>"$WORK/plan.log" || fail "plan of deploy/profiles/ocr-rec.profile.yaml"
yq -c '.functions["ocr-rec"]' "$ROOT/deploy/openfaas/stack.yml" >"$WORK/stack.json"
jq -e --slurpfile plan "$WORK/plan.json" '$plan[0].configs[0] as $c |
    (.limits == .requests) and (.limits.cpu | tonumber) == $c.c and
    .limits.memory == "\($c.m | ceil)Mi" and .environment.TETRIS_BATCH == "\($c.b)" and
    .environment.TETRIS_CONCURRENCY == "\($c.p)" and
    .environment.TETRIS_THREADS == "\([1, ($c.c / $c.p | floor)] | max)" and
    .annotations["tetris.io/model"] == "ocr-rec"' "$WORK/stack.json" >/dev/null ||
    fail "deploy/openfaas/stack.yml $(cat "$WORK/stack.json") is not the plan $(jq -c '.configs[0]' "$WORK/plan.json")"
echo "ok 3. deploy/openfaas/stack.yml is the plan for deploy/profiles/ocr-rec.profile.yaml"

# The doc's clean-up, and nothing left.
run_doc "$WORK/cleanup-run.sh" "$WORK/cleanup.log" || fail "the doc's clean-up failed"
touch "$WORK/cleaned"
for ns in openfaas-fn tetris-system; do
    ! kc get namespace "$ns" >/dev/null 2>&1 || fail "namespace $ns left"
done
! kc get mutatingwebhookconfiguration tetris-webhook >/dev/null 2>&1 || fail "webhook configuration left"
left="$(kc get clusterroles,clusterrolebindings -l app.kubernetes.io/instance=tetris -o name)"
[ -z "$left" ] || fail "cluster-scoped objects left: $left"
"$HELM" status tetris -n tetris-system >/dev/null 2>&1 && fail "the release is still there"
for port in 8080 8081 8082 8443 9464; do
    wait_until 30 "! ss -Hltn 'sport = :$port' | grep -q ." || fail "port $port still served after the clean-up"
done
[ ! -e /dev/shm/tetris ] && [ ! -e "$OF" ] || fail "the store or $OF left"
note "the whole doc took $(($(date +%s) - start)) s"
echo "ok the doc's clean-up left nothing"
echo "docs/OPENFAAS.md on the local cluster: ok" >&2
