#!/bin/sh
# test-extender-registry.sh - a model named by a registry reference is
# scored by the bytes a node lacks. A model and a fine-tuned variant that
# shares its embeddings and first layer (synthetic BERT-tiny weights,
# tetris-synth-model) are pushed to a real registry (docker-registry on
# loopback) and pulled by three real daemons' stores: the model, the
# variant, nothing. The
# extender's manifest of the model is the artifact's config as the
# registry serves it; a pod of the model scores 10 on the node that holds
# it, 0 on the empty one, and on the variant's node what the bytes it
# lacks make (docs/programs/tetris-scheduler-ext.md, "Models from a
# registry"); every node passes the filter (no capacity limit).
set -eu
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/registry.sh"
registry_start
host="127.0.0.1:$REGISTRY_PORT"
accept='Accept: application/vnd.oci.image.manifest.v1+json'
"$BIN/tetris-synth-model" -o "$WORK/base.safetensors" bert-tiny >/dev/null 2>"$WORK/synth.log" ||
    fail "synth: $(cat "$WORK/synth.log")"
"$BIN/tetris-synth-model" -o "$WORK/variant.safetensors" --variant 1 --shared-layers 1 bert-tiny \
    >/dev/null 2>>"$WORK/synth.log" || fail "synth the variant: $(cat "$WORK/synth.log")"
"$BIN/tetris-registry" push "$WORK/base.safetensors" "oci://$host/models/hello:v1" \
    >"$WORK/push.out" 2>"$WORK/push.log" || fail "push: $(cat "$WORK/push.log")"
"$BIN/tetris-registry" push "$WORK/variant.safetensors" "oci://$host/models/hello:variant" \
    >>"$WORK/push.out" 2>>"$WORK/push.log" || fail "push the variant: $(cat "$WORK/push.log")"

# One daemon and store per node; each pulls what its node holds.
for node in v1 variant none; do
    mkdir -p "$WORK/store-$node"
    reclaimer_start "$WORK/store-$node" "$WORK/daemon-$node.log" --listen 127.0.0.1:0 \
        --interval 3600 --registries "$host"
    eval "port_$node=$RECLAIMER_PORT"
    [ $node = none ] && continue
    "$BIN/tetris-agent" load --store "$WORK/store-$node" "oci://$host/models/hello:$node" \
        >"$WORK/load-$node.out" 2>"$WORK/load-$node.log" ||
        fail "pull $node: $(tail -3 "$WORK/load-$node.log")"
done

# The manifest the extender reads: the artifact's config, unchanged.
mkdir -p "$WORK/manifests"
curl -fsS -H "$accept" "$REGISTRY/v2/models/hello/manifests/v1" >"$WORK/v1.json"
curl -fsS -H "$accept" "$REGISTRY/v2/models/hello/manifests/variant" >"$WORK/variant.json"
config=$(jq -r .config.digest "$WORK/v1.json")
curl -fsS "$REGISTRY/v2/models/hello/blobs/$config" >"$WORK/manifests/hello.json"
[ "sha256:$(sha256sum <"$WORK/manifests/hello.json" | cut -d' ' -f1)" = "$config" ] ||
    fail "the config blob is not its digest"

ext_port=$(free_port)
"$BIN/tetris-scheduler-ext" --standalone --manifest-dir "$WORK/manifests" \
    --listen "127.0.0.1:$ext_port" --refresh 1 --inventory-url-ports 1024-65535 \
    >>"$WORK/extender.log" 2>&1 &
KILL_ON_EXIT="$KILL_ON_EXIT $!"
wait_until 30 "curl -sf http://127.0.0.1:$ext_port/healthz >/dev/null" || fail "the extender did not start"

# The score the bytes make: the model's distinct tensors (the config's),
# those whose identity is a layer of the variant present on its node.
want_variant=$(jq -n --slurpfile c "$WORK/manifests/hello.json" --slurpfile o "$WORK/variant.json" '
    ([$o[0].layers[] | .digest] | map({(.): true}) | add) as $have |
    ([$c[0].tensors[] | {(.digest): .nbytes}] | add) as $need |
    ([$need | to_entries[] | .value] | add) as $total |
    ([$need | to_entries[] | select($have[.key]) | .value] | add // 0) as $present |
    if $present == 0 then 0 elif $present == $total then 10
    else ([1, ([9, ($present * 10 / $total | round)] | min)] | max) end')
[ "$want_variant" -gt 0 ] && [ "$want_variant" -lt 10 ] ||
    fail "the variant shares all or none of the model's bytes ($want_variant): not a variant"

args=$(jq -nc --arg v1 "$port_v1" --arg variant "$port_variant" --arg none "$port_none" '
    def node(n; p): {metadata: {name: n, annotations:
        {"tetris.io/inventory-url": "http://127.0.0.1:\(p)/inventory"}}};
    {Pod: {metadata: {name: "fn-1", namespace: "openfaas-fn", labels: {"tetris.io/model": "hello"}}},
     Nodes: {items: [node("n-v1"; $v1), node("n-variant"; $variant), node("n-none"; $none)]},
     NodeNames: null}')
curl -fsS -d "$args" "http://127.0.0.1:$ext_port/filter" >"$WORK/filter.json" || fail "/filter"
[ "$(jq '.Nodes.items | length' "$WORK/filter.json")" = 3 ] || fail "filter: $(cat "$WORK/filter.json")"
curl -fsS -d "$args" "http://127.0.0.1:$ext_port/prioritize" >"$WORK/scores.json" || fail "/prioritize"
score() { jq --arg h "$1" '.[] | select(.Host == $h) | .Score' "$WORK/scores.json"; }
[ "$(score n-v1)" = 10 ] || fail "the node holding the model: $(cat "$WORK/scores.json")"
[ "$(score n-none)" = 0 ] || fail "the empty node: $(cat "$WORK/scores.json")"
[ "$(score n-variant)" = "$want_variant" ] ||
    fail "the variant's node: score $(score n-variant), its missing bytes make $want_variant"
echo "ok scored by the bytes each node lacks: 10, $want_variant (the variant's node), 0"
echo "PASS $PROG"
