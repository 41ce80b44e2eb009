#!/bin/sh
# test-webhook-k8s.sh - tetris-webhook registered with the local cluster's
# apiserver (a MutatingWebhookConfiguration with a loopback URL and an
# empty caBundle, limited to this test's namespaces by a label): the
# webhook fills the caBundle itself; a pod created with the annotation
# tetris.io/model is stored with the read-only store mount, TETRIS_STORE,
# the model label, the manifest ConfigMap (copied into the pod's
# namespace) and the webhook's scheduler; a function pod in a tenant's
# namespace gets tenants/T only; a server-side dry run is mutated but
# copies nothing; the copy a function's pods use goes with the last
# function of its model (its owners are their ReplicaSets) and stays while
# one is left; with the webhook down, pods are still created, unchanged.
# The pods ask for a scheduler nobody runs, so nothing is ever started.
. "$(dirname "$0")/../lib/k8s.sh"

k8s_skip_unless_possible
k8s_cluster_up
k8s_namespace whk-manifests
mns="$K8S_NS"
k8s_namespace whk-fn
fns="$K8S_NS"
k8s_namespace whk-tenant
tns="$K8S_NS"
work="$(mktemp -d /tmp/tetris-webhook.XXXXXX)"
K8S_CLEANUP_PATHS="$work"
scheduler=tetris-webhook-test-nobody
config="tetris-webhook-test-$mns"
sel=tetris.io/webhook-test
kc label namespace "$fns" "$sel=$mns" >/dev/null
kc label namespace "$tns" "$sel=$mns" tetris.io/tenant=acme >/dev/null
k8s_manifest "$mns" vad "$ROOT/.deps/models/silero_vad_v5.onnx" "$work/vad.json"
model_path="$(jq -r .model "$work/vad.json")"

k8s_webhook "$config" "$sel" "$mns" "$work/webhook.log" --namespace "$fns" --namespace "$tns" \
    --manifest-namespace "$mns" --store-subdir public --scheduler "$scheduler"
wpid=$K8S_WEBHOOK_PID
echo "ok the webhook set its configuration's caBundle"

pod() { # NS NAME ANNOTATIONS LABELS [EXTRA kubectl create ARGS]
    _ns=$1 _name=$2 _ann=$3 _lab=$4
    shift 4
    kc -n "$_ns" create "$@" -o json -f - >"$work/$_name.json" <<YAML || fail "cannot create pod $_name"
apiVersion: v1
kind: Pod
metadata: { name: $_name, annotations: { $_ann }, labels: { $_lab } }
spec:
  containers:
  - { name: fn, image: tetris-test-tools:latest, imagePullPolicy: Never,
      env: [{ name: fprocess, value: x }] }
YAML
}

# A pod annotated with its model, as faas-netes creates it for
# faas-cli deploy --annotation tetris.io/model=vad.
pod "$fns" annotated '"tetris.io/model": vad' 'faas_function: annotated'
stored="$(kc -n "$fns" get pod annotated -o json)"
printf '%s' "$stored" | jq -e --arg s "$scheduler" --arg m "$model_path" '
    (.spec.containers[0].env | from_entries) as $e
    | (.spec.volumes[] | select(.name == "tetris-store") | .hostPath.path) == "/dev/shm/tetris/public"
    and (.spec.containers[0].volumeMounts[] | select(.name == "tetris-store") | .readOnly) == true
    and $e.TETRIS_STORE == "/dev/shm/tetris" and $e.TETRIS_MODEL == $m and $e.fprocess == "x"
    and $e.TETRIS_MANIFEST == "/etc/tetris/manifest/manifest.json"
    and (.spec.volumes[] | select(.name == "tetris-manifest") | .configMap.name) == "tetris-manifest-vad"
    and .metadata.labels["tetris.io/model"] == "vad"
    and .spec.schedulerName == $s' >/dev/null ||
    fail "stored pod lacks the webhook's mutation: $(printf '%s' "$stored" | jq -c .spec)"
copy="$(kc -n "$fns" get configmap tetris-manifest-vad -o json)" || fail "manifest not copied"
[ "$(printf '%s' "$copy" | jq -r '.data["manifest.json"]')" = "$(kc -n "$mns" get configmap \
    tetris-manifest-vad -o json | jq -r '.data["manifest.json"]')" ] || fail "copied manifest differs"
echo "ok annotated pod: read-only store, env, manifest (copied), label, scheduler"

# A function pod in a tenant's namespace: its own store only.
pod "$tns" tenant '"x": "y"' 'faas_function: tenant'
stored="$(kc -n "$tns" get pod tenant -o json)"
printf '%s' "$stored" | jq -e '
    [.spec.volumes[] | select(.hostPath) | .hostPath.path] == ["/dev/shm/tetris/tenants/acme/public"]
    and (.spec.containers[0].env | from_entries).TETRIS_TENANT == "acme"' >/dev/null ||
    fail "tenant pod: $(printf '%s' "$stored" | jq -c .spec)"
echo "ok tenant namespace: tenants/acme only"

# A server-side dry run is mutated, and copies no ConfigMap.
pod "$tns" dry '"tetris.io/model": vad' 'faas_function: dry' --dry-run=server
jq -e '.spec.volumes[] | select(.name == "tetris-store")' "$work/dry.json" >/dev/null ||
    fail "dry run not mutated: $(jq -c .spec "$work/dry.json")"
kc -n "$tns" get configmap tetris-manifest-vad >/dev/null 2>&1 && fail "dry run copied the manifest"
echo "ok dry run: mutated, no ConfigMap copied"

# The copy goes with the last function of its model. Two functions
# (Deployments, as faas-netes makes them) of one model: their pods name
# their ReplicaSets as controllers when admitted, each ReplicaSet becomes
# an owner of the copy, and the garbage collector deletes the copy only
# once neither is left.
k8s_manifest "$mns" vadfn "$ROOT/.deps/models/silero_vad_v5.onnx" "$work/vadfn.json"
function_deployment() { # NAME
    kc -n "$fns" create -f - >/dev/null <<YAML || fail "cannot create Deployment $1"
apiVersion: apps/v1
kind: Deployment
metadata: { name: $1, labels: { faas_function: $1 } }
spec:
  replicas: 1
  selector: { matchLabels: { faas_function: $1 } }
  template:
    metadata: { labels: { faas_function: $1 }, annotations: { tetris.io/model: vadfn } }
    spec:
      containers:
      - { name: $1, image: tetris-test-tools:latest, imagePullPolicy: Never }
YAML
    wait_until "$K8S_TIMEOUT" "[ -n \"\$(kc -n $fns get pods -l faas_function=$1 -o name)\" ]" ||
        fail "Deployment $1 made no pod"
}
replicaset_uid() { # DEPLOYMENT
    kc -n "$fns" get replicasets -l faas_function="$1" -o jsonpath='{.items[0].metadata.uid}'
}
copy_owners() { # the copy's owners' uids, sorted, one line; "gone" when it is
    _cm="$(kc -n "$fns" get configmap tetris-manifest-vadfn --ignore-not-found -o json)" || {
        echo unreadable
        return
    }
    if [ -z "$_cm" ]; then echo gone; return; fi
    printf '%s' "$_cm" | jq -r '[.metadata.ownerReferences[]?.uid] | sort | join(" ")'
}
function_deployment fa
function_deployment fb
rs_a="$(replicaset_uid fa)" rs_b="$(replicaset_uid fb)"
both="$(printf '%s\n' "$rs_a" "$rs_b" | sort | tr '\n' ' ' | sed 's/ $//')"
[ "$(copy_owners)" = "$both" ] ||
    fail "copy's owners '$(copy_owners)', want the ReplicaSets of fa and fb ($both)"
kc -n "$fns" get configmap tetris-manifest-vadfn -o json | jq -e '
    .metadata.labels["app.kubernetes.io/managed-by"] == "tetris-webhook"
    and all(.metadata.ownerReferences[]; .kind == "ReplicaSet" and .apiVersion == "apps/v1")' \
    >/dev/null || fail "copy not labelled as the webhook's or not owned by ReplicaSets"
kc -n "$fns" delete deployment fa --cascade=foreground >/dev/null || fail "cannot delete fa"
wait_until "$K8S_TIMEOUT" "[ -z \"\$(kc -n $fns get replicasets -l faas_function=fa -o name)\" ] &&
    [ \"\$(copy_owners)\" = '$rs_b' ]" ||
    fail "after fa's deletion the copy's owners are '$(copy_owners)', want fb's ReplicaSet $rs_b only"
kc -n "$fns" delete deployment fb >/dev/null || fail "cannot delete fb"
wait_until "$K8S_TIMEOUT" '[ "$(copy_owners)" = gone ]' ||
    fail "the copy outlived the last function of its model: owners '$(copy_owners)'"
kc -n "$fns" get configmap tetris-manifest-vad >/dev/null ||
    fail "the copy a pod without a controller uses went too"
echo "ok manifest copy: owned by the functions' ReplicaSets, kept for fb, gone with the last"

# Webhook down: pods are still created, unchanged.
kill -TERM "$wpid"
wait "$wpid" || fail "webhook: exit status $? on SIGTERM"
pod "$fns" down '"tetris.io/model": vad' 'faas_function: down'
stored="$(kc -n "$fns" get pod down -o json)"
printf '%s' "$stored" | jq -e '[.spec.volumes[]? | select(.name == "tetris-store")] == [] and
    .spec.schedulerName == "default-scheduler"' >/dev/null ||
    fail "pod created while the webhook was down: $(printf '%s' "$stored" | jq -c .spec)"
echo "ok webhook down: pods created unchanged"
echo "webhook on the cluster: ok" >&2
