#!/bin/sh
# test-dry-run.sh - both renderings of the Helm chart (the defaults, and
# every optional part on: tests/helm/values-all.yaml) pass `kubectl apply
# --dry-run=server` against the local cluster's apiserver (kubectl cannot
# validate offline), which also checks every field against the server's
# OpenAPI schema. The ServiceMonitor's CRD is not installed there; its
# shape is checked by tests/helm/test-render.sh.
. "$(dirname "$0")/../lib/k8s.sh"
CHART="$ROOT/charts/tetris"
ALL="$ROOT/tests/helm/values-all.yaml"

k8s_skip_unless_possible
HELM="$("$ROOT/scripts/helm.sh")" || fail "cannot install helm (scripts/helm.sh)"
k8s_cluster_up
k8s_namespace helm-render
# The autoscaler's Roles live where its Deployments and profiles do: here.
printf 'autoscaler:\n  functionNamespace: %s\n  functions:\n  - {name: ocr-rec, profile: "configmap:%s/tetris-profile-ocr-rec"}\n' \
    "$K8S_NS" "$K8S_NS" >"$WORK/here.yaml"
for v in default all; do
    set -- -n "$K8S_NS" --kube-version 1.20.2 --set manifestNamespace="$K8S_NS"
    [ "$v" = all ] && set -- "$@" -f "$ALL" -f "$WORK/here.yaml"
    "$HELM" template tetris "$CHART" "$@" | awk 'BEGIN { RS = "\n---\n" } !/\nkind: ServiceMonitor\n/ { print "---"; print }' \
        >"$WORK/$v.dry.yaml" || fail "helm template for the dry run"
    kc apply --dry-run=server -f "$WORK/$v.dry.yaml" >"$WORK/dry.out" 2>&1 ||
        fail "kubectl apply --dry-run=server of the $v rendering: $(cat "$WORK/dry.out")"
    n="$(grep -c '(server dry run)' "$WORK/dry.out")"
    [ "$n" = "$(grep -c '^kind:' "$WORK/$v.dry.yaml")" ] || fail "$v: $n objects accepted: $(cat "$WORK/dry.out")"
done
echo "helm dry run: ok" >&2
