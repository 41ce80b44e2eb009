#!/bin/sh
# run-fuzzers.sh - runs each fuzzer (the parsers', the ONNX rewriter's,
# the ingest, JSON reader's, inventory, AdmissionReview and inference request
# decoders', the registry's (artifacts, references, credentials, challenges,
# tokens), the holder, store marker, daemon state file, pin file and CSI
# tenant map readers', the YAML reader's with the settings and profiles on
# top of it) for
# FUZZ_SECONDS (default 60) from a seed corpus made now from the real models
# (.deps/models), the synthetic valid and malformed files of
# tetris-gen-model-corpus and a few messages. The corpus grows under
# build/fuzz/corpus and is kept between runs; crashes land in
# build/fuzz/artifacts.
# Usage: run-fuzzers.sh FUZZ_DIR GEN_CORPUS_BIN
# Exit status: 0 no fuzzer found anything, 1 otherwise.
set -eu
dir=$1
gen=$2
secs=${FUZZ_SECONDS:-60}
models=.deps/models
seeds=$dir/seeds
rm -rf "$seeds"
mkdir -p "$seeds/files" "$seeds/safetensors" "$seeds/onnx" "$seeds/manifest" "$seeds/ingest" \
    "$seeds/json_scan" "$seeds/inventory" "$seeds/webhook" "$seeds/holders" \
    "$seeds/store_marker" "$seeds/state" "$seeds/view_check" "$seeds/oip" "$seeds/yaml" \
    "$seeds/derived" "$seeds/pin_file" "$seeds/oci" "$seeds/oci_auth" "$seeds/pbwire" \
    "$seeds/tenant_map" \
    "$dir/artifacts"

"$gen" --valid "$seeds/files" >/dev/null
cp "$seeds"/files/*.safetensors "$seeds/safetensors/"
cp "$seeds"/files/*.onnx "$seeds/onnx/"
# Real models up to a few MB keep each run fast enough to mutate.
for m in silero_vad_v5.onnx silero_vad_legacy.onnx hello_deepa.onnx \
         ch_ppocr_mobile_v2.0_cls_infer.onnx; do
    [ -f "$models/$m" ] && cp "$models/$m" "$seeds/onnx/"
done
# The rewriter (what ONNX Runtime is handed in store mode) reads ONNX too.
cp -r "$seeds/onnx" "$seeds/onnx_rewrite"
"$dir/seed-manifests" "$seeds/manifest" "$seeds/files/valid-features.onnx" \
    "$seeds/files/valid-features.safetensors" "$models/hello_deepa.onnx"

d=sha256:0101010101010101010101010101010101010101010101010101010101010101
printf '%s' '{"op":"ingest","label":"fn","sources":["/m/a.onnx","/m/b.bin"],"tensors":[{"name":"w","dtype":"float32","shape":[1,2],"source_index":1,"offset":0,"length":8,"nbytes":8,"encoding":"raw","digest":"'$d'","crc32":1},{"name":"v","dtype":"int64","shape":[2],"source_index":0,"offset":8,"length":3,"nbytes":16,"encoding":"varint","digest":"'$d'","crc32":2}]}' \
    >"$seeds/ingest/request.json"
printf '%s' '{"op":"report_fallback","label":"fn","reason":"store full"}' >"$seeds/ingest/fallback.json"
printf '%s' '{"ok":true,"holder":"h","ingested_bytes":8,"tensors":[{"status":"ingested"},{"status":"rejected","error":"full","reason":"store full"}]}' \
    >"$seeds/ingest/reply.json"
printf '%s' '{"ok":false,"error":"format","message":"bad"}' >"$seeds/ingest/error.json"
printf '%s' '{"op":"pull","label":"fn","ref":"oci://registry.example:5000/models/bert:v1"}' \
    >"$seeds/ingest/pull.json"
printf '%s' '{"ok":true,"holder":"h","digest":"'$d'","tensors":3,"pulled_tensors":1,"pulled_bytes":9,"skipped_bytes":4}' \
    >"$seeds/ingest/pull-reply.json"
# JSON of every kind for the reader ingest requests are cut with.
cp "$seeds"/ingest/*.json "$seeds/json_scan/"
printf '%s' '[1, -0.5e+3, "\u00e9\ud83d\ude00\n", true, false, null, {"a": {"b": []}}, "x"]' \
    >"$seeds/json_scan/kinds.json"
printf '%s\n' '{"node":"n-1","tenant":"alpha","generation":7,"capacity_bytes":0,"resident_bytes":8,"evictable_bytes":8,"tensors":[{"digest":"'${d#sha256:}'","bytes":8}]}' \
    >"$seeds/inventory/inventory.json"
# A derived-form entry the daemon wrote (its identity matches its fields).
printf '%s\n' '{"cpu":"x86_64 sse4_1 avx avx2 fma f16c avx512f avx512bw avx512dq avx512vl avx512_vnni avx_vnni avx512_bf16","data":{"crc32":217682605,"digest":"sha256:93fa8d2d7e7d7711b626ccd0e1e1013889160e9ded1931c026f051141a573a35","nbytes":15147008},"data_location":"derived.data","format":"tetris-derived/1","graph":{"crc32":2243505611,"digest":"sha256:1ee9849c8fd55347455bc7f02ed7fe3e15e0b7dcf3a47ffabaea99585177bce5","nbytes":58013},"identity":"sha256:43814ad856e35e7994de1fe33aefdbce84495c4d1437eff3fa72d7c846f74b60","runtime":"onnxruntime 1.29.0","source":"sha256:1e958a97944d2f71441188e506db4fc93cda06a8b9e858d21573c3d9d58f4ae0","transform":"ort-optimize-all-prepack"}' \
    >"$seeds/derived/entry.json"
h=${d#sha256:}
printf 'tetris-holder 1\npid 42\nlabel /models/a.onnx\n%s 8\n%s 4096\n' "$h" "$h" \
    >"$seeds/holders/holder.ref"
printf 'tetris-holder 1\npid 7\nlabel x\n%s 1' "$h" >"$seeds/holders/torn.ref"
printf '%s\n' '{"format":"tetris-store","version":1,"capacity_bytes":1073741824}' \
    >"$seeds/store_marker/marker.json"
printf '%s 1795313081\n%s 1\n' "$h" "$(echo "$h" | tr 0 f)" >"$seeds/state/state"
printf '# pins\n%s\nsha256:%s alpha # kept\n' "$h" "$(echo "$h" | tr 0 f)" >"$seeds/pin_file/pins"

printf '%s' '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},"operation":"CREATE","namespace":"openfaas-fn","dryRun":false,"object":{"metadata":{"name":"p","labels":{"faas_function":"f","tetris.io/tenant":"acme"},"annotations":{"tetris.io/model":"m"}},"spec":{"schedulerName":"default-scheduler","volumes":[{"name":"tetris-store","hostPath":{"path":"/"}}],"containers":[{"name":"c","env":[{"name":"TETRIS_MODEL","value":"/m"}],"volumeMounts":[]},{"name":"d"}]}}}}' \
    >"$seeds/webhook/pod.json"
printf '%s' '{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},"operation":"CREATE","object":{"metadata":{"annotations":{"tetris.io/model":"m"}},"spec":{"containers":[{}]}}}}' \
    >"$seeds/webhook/v1beta1.json"

m=$(realpath "$models/hello_deepa.onnx")
printf '%s' '{"format":"tetris-model-view/1","model":"'"$m"'","model_format":"onnx","graph":"'"$m"'","store":null,"shared":false,"fallback":"private","session_options":{"graph_optimization_level":"disabled"},"tensors":[{"name":"w","dtype":"float32","shape":[2],"file":"'"$m"'","offset":16,"length":8,"digest":null,"shared":false},{"name":"v","dtype":"int64","shape":[1],"file":null,"offset":0,"length":8,"digest":"'$d'","shared":false}]}' \
    >"$seeds/view_check/private.json"

# Inference requests: a selector byte (signature, header length follows),
# see fuzz/fuzz_oip.c. Signature 0 takes every datatype at [-1, 2].
{
    printf '\000{"id":"e","parameters":{"binary_data_output":true},"outputs":[{"name":"in_FP16"}],"inputs":['
    sep=""
    for t in BOOL:true,false UINT8:0,255 UINT16:1,65535 UINT32:2,4294967295 \
        UINT64:3,18446744073709551615 INT8:-128,127 INT16:-32768,32767 INT32:-1,2147483647 \
        INT64:-9223372036854775808,9 FP16:65504,-0.0 FP32:3.40282347e+38,1e-45 \
        FP64:1.7976931348623157e+308,5e-324 BF16:1.5,-2 'BYTES:"caf\u00e9","\ud83d\ude00"'; do
        printf '%s{"name":"in_%s","datatype":"%s","shape":[1,2],"data":[[%s]]}' "$sep" "${t%%:*}" \
            "${t%%:*}" "${t#*:}"
        sep=,
    done
    printf ']}'
} >"$seeds/oip/every.json"
printf '\001{"inputs":[{"name":"input","datatype":"FP32","shape":[1,4],"data":[0.5,-1,2e-3,0]},{"name":"state","datatype":"FP32","shape":[2,0,128],"data":[]},{"name":"sr","datatype":"INT64","shape":[],"data":[16000]}]}' \
    >"$seeds/oip/vad.json"
printf '\002{"inputs":[{"name":"x","datatype":"FP32","shape":[2,3],"data":[[1,2,3],[4,5,6]]}],"outputs":[{"name":"x","parameters":{"binary_data":true}}]}' \
    >"$seeds/oip/nested.json"
h='{"inputs":[{"name":"x","datatype":"FP32","shape":[1,3],"parameters":{"binary_data_size":12}},{"name":"n","datatype":"INT64","shape":[2],"data":[1,2]}]}'
{ printf '\007'; printf "\\$(printf %03o ${#h})\\000\\000\\000"; printf '%s' "$h"
  printf '\000\000\200\077\000\000\000\100\000\000\100\100'; } >"$seeds/oip/binary.bin"
printf '\003{"inputs":[{"name":"x","datatype":"FP32","shape":[1,3],"data":[1,2]}]}' >"$seeds/oip/short.json"
# The inference requests' JSON, without the selector byte, for the reader
# they are pulled with: every datatype's numbers, \u escapes, nesting.
for f in "$seeds"/oip/*.json; do
    tail -c +2 "$f" >"$seeds/json_scan/oip-${f##*/}"
done

# YAML: the shipped profiles and settings, a kubeconfig-shaped tree.
cp deploy/profiles/*.yaml deploy/reclaimer.yaml "$seeds/yaml/"
printf '%s\n' 'apiVersion: v1' 'current-context: a' 'contexts:' \
    '- {name: a, context: {cluster: c, user: u, namespace: "n"}}' \
    'clusters: [{name: c, cluster: {server: "https://x:6443"}}]' \
    'users:' '- name: u' '  user:' '    token: |' '      secret' >"$seeds/yaml/kubeconfig.yaml"

# A registry artifact's manifest (protocol/oci.h), and a reference.
a=$(printf 'a%.0s' $(seq 64)); b=$(echo "$a" | tr a b)
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.tetris.model.v1","config":{"mediaType":"application/vnd.tetris.manifest.v1+json","digest":"sha256:%s","size":10},"layers":[{"mediaType":"application/vnd.tetris.onnx-graph.v1","digest":"sha256:%s","size":20},{"mediaType":"application/vnd.tetris.tensor.v1","digest":"sha256:%s","size":37,"annotations":{"io.tetris.tensor.name":"w"}}],"annotations":{"io.tetris.model":"m.onnx"}}' \
    "$a" "$b" "$(echo "$a" | tr a c)" >"$seeds/oci/manifest.json"
printf 'oci://reg.example:5000/models/bert-base:v1' >"$seeds/oci/ref"
# Registry credentials (a dockerconfigjson Secret), a challenge, a token.
printf '%s' '{"auths":{"reg.example:5000":{"auth":"YWxpY2U6czNjcmV0"},"https://other.example/v1/":{"username":"bob","password":"pa:ss","email":"b@x"}},"credsStore":"x"}' \
    >"$seeds/oci_auth/dockerconfig.json"
printf '%s' 'Bearer realm="https://auth.example/token",service="reg.example",scope="repository:models/bert:pull,push"' \
    >"$seeds/oci_auth/challenge"
printf '%s' 'Basic realm="Registry Realm"' >"$seeds/oci_auth/basic"
printf '%s' '{"token":"eyJhbGciOi.J9.x","access_token":"a","expires_in":300}' \
    >"$seeds/oci_auth/token.json"

# CSI requests as the kubelet sends them (protocol/csi.h): a publish with
# its capability and volume context, an unpublish, a registration status.
printf '\012\003vol\042\013/pods/x/mnt\052\004\022\000\032\000\060\001\102\022\012\005model\022\011/m/a.onnx' \
    >"$seeds/pbwire/publish"
printf '\012\003vol\022\013/pods/x/mnt' >"$seeds/pbwire/unpublish"
printf '\010\001\022\002no' >"$seeds/pbwire/registration"
# tetris-csi's tenant map, as the chart renders it.
printf '%s\n' '# tenants' 'team-a  *  tenant:alpha' 'team-b inference tenant:beta # ml' \
    'team-b * shared' '* * shared' >"$seeds/tenant_map/map"

failed=0
for t in ${FUZZ_TARGETS:-safetensors onnx onnx_rewrite manifest ingest json_scan inventory webhook \
         holders store_marker state view_check oip yaml derived pin_file oci oci_auth pbwire \
         tenant_map}; do
    mkdir -p "$dir/corpus/$t"
    dict=""
    case $t in
    onnx* | pbwire | tenant_map) ;;
    yaml) dict="-dict=$(pwd)/fuzz/yaml.dict" ;;
    *) dict="-dict=$(pwd)/fuzz/json.dict" ;;
    esac
    echo "fuzz target=$t seconds=$secs"
    # Inputs may name external data files: run where none exist.
    if ! (cd "$dir" && ./fuzz_$t $dict -max_total_time="$secs" -timeout=10 \
            -rss_limit_mb=2048 -max_len=4194304 -print_final_stats=1 \
            -artifact_prefix="artifacts/$t-" "corpus/$t" "seeds/$t" \
            >"fuzz_$t.log" 2>&1); then
        failed=1
        echo "FAIL fuzz target=$t (see $dir/fuzz_$t.log)"
        tail -40 "$dir/fuzz_$t.log"
    else
        grep -E "^stat::number_of_executed_units|^Done" "$dir/fuzz_$t.log" || true
        echo "PASS fuzz target=$t"
    fi
done
exit $failed
