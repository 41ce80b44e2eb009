#!/bin/sh
# test-openfaas-registry.sh - docs/OPENFAAS.md's "Models from a registry"
# runs as written on the local cluster, after steps 1 to 3 of "On the local
# cluster, end to end" (the cluster, OpenFaaS CE, the chart) and before its
# step 11 (the clean-up): BERT-base and three fine-tuned variants (random
# weights, scripts/models/paper-models.sh) pushed to a real registry on the
# host's loopback (each variant uploading only its own tensors, the rest
# mounted from the base's repository), functions deployed through the gateway from images that
# hold no weights, each pulled by the node's daemon. The doc's blocks check
# what the issue asks: the base's node pulls all of it, each variant
# exactly the layers the store lacked (tetris_pull_bytes_total against the
# node's inventory and the registry's manifests), and every function
# answers what a private run of its file computes. After the doc's
# clean-up the test checks that nothing is left. Exports BERT-base with
# variants the first time (minutes, PyTorch); SKIPs without PyTorch and
# where OpenFaaS cannot be built.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
k8s_release_only tetris-function
paper_model bert-base:3
doc="$ROOT/docs/OPENFAAS.md"
OF=/tmp/tetris-openfaas
"$ROOT/scripts/cluster/build-openfaas.sh" >"$WORK/of-bin" 2>"$WORK/build-openfaas.log" || {
    rc=$?
    [ $rc = 3 ] && skip "no OpenFaaS CE sources (TETRIS_OPENFAAS_SRC, default ../shared/openfaas)"
    fail "cannot build OpenFaaS"
}
HELM="$("$ROOT/scripts/helm.sh")" || fail "cannot install helm (scripts/helm.sh)"
k8s_cluster_up

# Steps 1-3 and the section's blocks into one script, step 11 into another.
awk -v steps="$WORK/steps.sh" -v cleanup="$WORK/cleanup.sh" '
    /^## / { sec = $0; out = ""; next }
    sec == "## On the local cluster, end to end" && /^### / {
        out = ($0 ~ /^### [123]\. /) ? steps : ($0 ~ /^### [0-9]+\. Clean up$/) ? cleanup : ""
        if (out != "") print ": \"" $0 "\"" >out
        next }
    sec == "## Models from a registry" && out == "" { out = steps; print ": \"" sec "\"" >out }
    out == "" { next }
    /^```sh$/ { in_block = 1; next }
    /^```$/ { in_block = 0; next }
    in_block { print >out }' "$doc"
[ "$(grep -c '^: "### [123]\. ' "$WORK/steps.sh")" = 3 ] &&
    grep -q "tetris-registry push" "$WORK/steps.sh" && [ -s "$WORK/cleanup.sh" ] ||
    fail "no steps 1-3, registry blocks and clean-up found in $doc"
sed -n 's/^\(export \)\{0,1\}\([A-Z_][A-Z0-9_]*\)=.*/\2/p' "$WORK/steps.sh" | sort -u >"$WORK/doc.vars"
cat >>"$WORK/steps.sh" <<'SH'
while read -r _v; do
    eval "_val=\${$_v-}"
    printf "export %s='%s'\n" "$_v" "$_val"
done <"$DOC_VARS" >"$DOC_ENV"
SH
{ echo '. "$DOC_ENV"'; cat "$WORK/cleanup.sh"; } >"$WORK/cleanup-run.sh"

for port in 5000 8080 8081 8082 8443 8888 9464 10259; do
    ! ss -Hltn "sport = :$port" | grep -q . || fail "port $port, which the doc uses, is taken"
done
for ns in openfaas-fn tetris-system; do
    ! kc get namespace "$ns" >/dev/null 2>&1 || fail "namespace $ns, which the doc makes, exists"
done
for d in /dev/shm/tetris "$OF"; do
    [ ! -e "$d" ] || fail "$d, which the doc makes, exists"
done
registry_cleanup() {
    [ -e "$WORK/cleaned" ] && return 0
    [ ! -f "$OF/registry.pid" ] || kill -KILL "$(cat "$OF/registry.pid")" 2>/dev/null
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
at_exit registry_cleanup

run_doc() { # SCRIPT LOG
    (cd "$ROOT" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL DOC_VARS="$WORK/doc.vars" \
        DOC_ENV="$WORK/doc.env" sh -eux "$1") >"$2" 2>&1
}
diagnose() {
    for ns in openfaas-fn tetris-system; do
        kc -n "$ns" get pods -o wide >&2 2>/dev/null
        for p in $(kc -n "$ns" get pods -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
            k8s_describe "$ns" "$p"
        done
    done
    tail -5 "$OF/gateway.log" "$OF/faas-netes.log" "$OF/registry.log" >&2 2>/dev/null
}
start=$(date +%s)
run_doc "$WORK/steps.sh" "$WORK/steps.log" || {
    diagnose
    tail -20 "$WORK/steps.log" >&2
    fail "a block of docs/OPENFAAS.md failed in $(grep '^+ : ' "$WORK/steps.log" | tail -1 | cut -c5-)"
}
note "steps 1-3 and the registry's blocks took $(($(date +%s) - start)) s"
grep -E '^bert-base[-a-z0-9]*: pulled|^\{"ref"' "$WORK/steps.log" | sed "s/^/# $PROG: /"
echo "ok the doc's registry flow ran as written: pulls equal the bytes each node lacked, outputs equal private runs"

[ "$(grep -c '^bert-base[-a-z0-9]*: pulled' "$WORK/steps.log")" = 4 ] ||
    fail "not four pull lines in the doc's output"
# Pushed, each variant sent the registry only its own tensors: the rest
# it mounted from the base's repository.
grep '^{"ref"' "$WORK/steps.log" | jq -s -e '.[0] as $base | .[0].mounted == 0 and
    ([.[1:][] | .mounted > 0 and .uploaded_bytes * 3 < $base.uploaded_bytes] | all)' >/dev/null ||
    fail "the variants' pushes sent more than their own tensors: $(grep '^{"ref"' "$WORK/steps.log")"

run_doc "$WORK/cleanup-run.sh" "$WORK/cleanup.log" || fail "the doc's clean-up failed"
touch "$WORK/cleaned"
for ns in openfaas-fn tetris-system; do
    ! kc get namespace "$ns" >/dev/null 2>&1 || fail "namespace $ns left"
done
for port in 5000 8080 8081 8082 8443 9464; do
    wait_until 30 "! ss -Hltn 'sport = :$port' | grep -q ." || fail "port $port still served after the clean-up"
done
[ ! -e /dev/shm/tetris ] && [ ! -e "$OF" ] || fail "the store or $OF left"
note "the whole run took $(($(date +%s) - start)) s"
echo "PASS $PROG"
