#!/bin/sh
# tetris-profiler's other commands and its errors: index writes the same
# manifest as tetris-agent index; job prints a Job manifest that names the
# ConfigMaps the scheduler extender reads (parsed, and validated by the
# apiserver when the local cluster runs); bad usage exits 2, a missing or bad
# model 3, a missing function 1, each with a message.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
model="$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx"

"$BIN/tetris-profiler" index "$model" -o "$WORK/p.json" 2>"$WORK/index.log" || fail "index failed"
"$BIN/tetris-agent" index "$model" -o "$WORK/a.json" 2>/dev/null || fail "tetris-agent index failed"
# The same manifest up to how the model's path is spelled.
same='del(.model) | .tensors |= map(del(.source))'
[ "$(jq -cS "$same" "$WORK/p.json")" = "$(jq -cS "$same" "$WORK/a.json")" ] ||
    fail "index differs from tetris-agent index"
"$BIN/tetris-profiler" index "$model" 2>/dev/null | jq -e '.format == "tetris-manifest/1"' >/dev/null ||
    fail "index to stdout"
cmp -s "$WORK/p.json" "$WORK/a.json" || fail "index is not byte-identical to tetris-agent index"
echo "ok index = tetris-agent index (byte-identical manifest)"

# The Job manifest, read back as YAML (one JSON object a line).
"$BIN/tetris-profiler" job ch_ppocr_mobile_v2.0_cls_infer.onnx >"$WORK/default.yaml" || fail "job failed"
yq -c . "$WORK/default.yaml" >"$WORK/default.json" || fail "job manifest is not YAML"
[ "$(jq -s '[.[].metadata.namespace] | unique' -c "$WORK/default.json")" = '["tetris-system"]' ] ||
    fail "job: default namespace is not tetris-system"
# In namespace default, which every cluster has, for the apiserver's dry run.
"$BIN/tetris-profiler" job ch_ppocr_mobile_v2.0_cls_infer.onnx --grid "c=1 b=1,2 p=1" \
    --node tetris-node-0 --namespace default >"$WORK/job.yaml" || fail "job failed"
yq -c . "$WORK/job.yaml" >"$WORK/job.json" || fail "job manifest is not YAML"
[ "$(jq -r .kind "$WORK/job.json" | tr '\n' ' ')" = "ServiceAccount Role RoleBinding ConfigMap ConfigMap Job " ] ||
    fail "job manifest is not ServiceAccount, Role, RoleBinding, 2 ConfigMaps, Job: $(jq -r .kind "$WORK/job.json")"
# The Job's own account patches its two ConfigMaps by name and creates
# none (docs/SECURITY.md): the daemon's settings in the same namespace stay
# out of its reach.
jq -s -e '(map(select(.kind == "Role")) | .[0].rules == [{"apiGroups": [""], "resources": ["configmaps"],
        "resourceNames": ["tetris-manifest-ch-ppocr-mobile-v2-0-cls-infer",
                          "tetris-profile-ch-ppocr-mobile-v2-0-cls-infer"], "verbs": ["patch"]}]) and
    ([.[] | select(.kind == "ConfigMap") | .metadata.name] == ["tetris-manifest-ch-ppocr-mobile-v2-0-cls-infer",
        "tetris-profile-ch-ppocr-mobile-v2-0-cls-infer"]) and
    ([.[] | select(.kind == "ConfigMap") | .metadata.labels | has("tetris.io/model")] == [false, false]) and
    (map(select(.kind == "Job")) | .[0].spec.template.spec.serviceAccountName) ==
        (map(select(.kind == "RoleBinding")) | .[0].subjects[0].name)' "$WORK/job.json" >/dev/null ||
    fail "job RBAC is not patch-by-name: $(jq -c 'select(.kind == "Role")' "$WORK/job.json")"
jq -e 'select(.kind == "Job") |
    .metadata.name == "tetris-profile-ch-ppocr-mobile-v2-0-cls-infer" and
    .metadata.labels["tetris.io/profile"] == "ch_ppocr_mobile_v2.0_cls_infer" and
    .spec.template.metadata.labels["tetris.io/profile"] == "ch_ppocr_mobile_v2.0_cls_infer" and
    (.spec.template.spec | .restartPolicy == "Never" and
        .nodeSelector["kubernetes.io/hostname"] == "tetris-node-0" and
        ([.containers[0].volumeMounts[].readOnly] | all) and
        .containers[0].securityContext == {runAsNonRoot: true, runAsUser: 65534,
            runAsGroup: 65534, allowPrivilegeEscalation: false,
            capabilities: {drop: ["ALL"]}, seccompProfile: {type: "RuntimeDefault"}} and
        (.containers[0].args | .[0] == "profile" and
            index("/models/ch_ppocr_mobile_v2.0_cls_infer.onnx") == 1 and
            index("--store-configmaps") != null and index("c=1 b=1,2 p=1") != null))' \
    "$WORK/job.json" >/dev/null || fail "job manifest content: $(jq -c 'select(.kind == "Job")' "$WORK/job.json")"
# The ConfigMap naming must be the extender's (label and key).
grep -q '"tetris.io/model"' "$ROOT/protocol/names.h" || fail "extender label changed?"
kubeconfig="${TETRIS_CLUSTER_DIR:-/tmp/tetris-cluster}/kubeconfig"
if [ -f "$kubeconfig" ] && command -v kubectl >/dev/null &&
    kubectl --kubeconfig "$kubeconfig" --request-timeout=5s get --raw /healthz >/dev/null 2>&1; then
    kubectl --kubeconfig "$kubeconfig" apply --dry-run=server -f "$WORK/job.yaml" \
        >"$WORK/kubectl.log" 2>&1 || fail "apiserver rejects the Job: $(cat "$WORK/kubectl.log")"
    echo "ok job manifest accepted by the apiserver (dry run)"
else
    echo "ok job manifest parses (no cluster to validate against)"
fi

[ "$(status "$BIN/tetris-profiler")" = 2 ] || fail "no command: not 2"
[ "$(status "$BIN/tetris-profiler" frobnicate)" = 2 ] || fail "unknown command: not 2"
grep -q "unknown command 'frobnicate'" "$WORK/status.err" || fail "unknown command message"
[ "$(status "$BIN/tetris-profiler" --help)" = 0 ] || fail "--help"
grep -q 'profile MODEL' "$WORK/status.out" || fail "--help text"
[ "$(status "$BIN/tetris-profiler" --version)" = 0 ] || fail "--version"
[ "$(status "$BIN/tetris-profiler" profile "$model" --grid "b=0")" = 2 ] || fail "b=0 not 2"
grep -q "bad value" "$WORK/status.err" || fail "bad grid message: $(cat "$WORK/status.err")"
[ "$(status "$BIN/tetris-profiler" profile "$model" x=1)" = 2 ] || fail "bad grid word not 2"
[ "$(status "$BIN/tetris-profiler" profile "$model" --duration -1)" = 2 ] || fail "bad duration not 2"
[ "$(status "$BIN/tetris-profiler" profile)" = 2 ] || fail "no model not 2"
[ "$(status "$BIN/tetris-profiler" profile "$WORK/none.onnx" --private)" = 3 ] || fail "missing model not 3"
head -c 3000 /dev/urandom >"$WORK/junk.onnx"
[ "$(status "$BIN/tetris-profiler" profile "$WORK/junk.onnx" --private --grid "c=1 b=1 p=1" --duration 0.1)" = 1 ] ||
    fail "junk model: not 1 (function does not start)"
grep -q 'exited before it was ready' "$WORK/status.err" || fail "junk model message: $(cat "$WORK/status.err")"
[ "$(status "$BIN/tetris-profiler" index "$WORK/junk.onnx")" = 3 ] || fail "index junk not 3"
[ "$(status "$BIN/tetris-profiler" profile "$model" --private --function "$WORK/nope")" = 1 ] ||
    fail "missing function not 1"
grep -q 'tetris-function at' "$WORK/status.err" || fail "missing function message"
[ "$(status "$BIN/tetris-profiler" job "a/b.onnx")" = 2 ] || fail "job with a path not 2"
[ "$(status "$BIN/tetris-profiler" job "x.onnx" --name "-bad-")" = 2 ] || fail "job bad name not 2"
[ "$(status "$BIN/tetris-profiler" load http://127.0.0.1:1 --duration 1)" = 2 ] || fail "load without rate not 2"
echo "ok usage errors 2, bad model 3, missing function 1"
