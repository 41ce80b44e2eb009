#!/bin/sh
# A CSI volume's model view read by the functions of other languages, as a
# pod reads it: the view mounted by tetris-csi (its store's tensors/
# mounted in it, "store": "."), and the node's model file out of sight.
#   - Node.js (function/node/, stock onnxruntime-node): two pods' volumes
#     of a real model (PP-OCRv4 rec), one instance on each, answer OIP
#     requests with exactly the outputs of `tetris-onnx-run --private`, the
#     external-data folder resolved to the view; both map the store's one
#     copy (each one's PSS of the volume's files is about half its RSS);
#   - Python (python/tetris, numpy): two pods' volumes of a SYNTHETIC
#     safetensors model in BERT-tiny's shapes; every array is read-only,
#     inside the view's mappings, with the bytes its digest names, equal to
#     a private read of the file, the pages shared by the two;
#   - C: `tetris-agent check-view` trusts the volume, ONNX Runtime on its
#     model.onnx computes the model's outputs;
#   - a copy of a volume is a view like any other, and "store": "." does
#     not widen what a reader trusts: a tensor file that leaves the view
#     (a link, an absolute path) or a relative store that is not "." is
#     refused by all three readers (exit 3, the reason named).
# Needs root (mounts).
set -eu
. "$(dirname "$0")/../langs/lib.sh"
need_models
[ "$(id -u)" = 0 ] || skip "needs root: the volumes are bind mounts"
need_node
need_numpy

store="$WORK/store"
models="$WORK/models"
pods="$WORK/pods"
sock="$WORK/csi.sock"
FN="$ROOT/function/node/index.js"
PROBE="$ROOT/tests/langs/view_probe.py"
NAME=ocr
mkdir -p "$store" "$models"
for u in n1 n2 p1 p2; do mkdir -p "$pods/uid-$u/volumes"; done
cp "$MODELS/ch_PP-OCRv4_rec_infer.onnx" "$models/$NAME.onnx"
W=$(stat -c %s "$models/$NAME.onnx")
"$BIN/tetris-synth-model" bert-tiny -o "$models/bert.safetensors" >/dev/null 2>"$WORK/synth.log" ||
    fail "tetris-synth-model bert-tiny"
at_exit "grep -o ' $WORK[^ ]* ' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null || true"

# What the model computes, and what a private read of the safetensors holds.
for i in 1 2; do
    "$BIN/tetris-onnx-run" "$models/$NAME.onnx" --private --seed $i --oip-request "$WORK/req.$i.json" \
        >"$WORK/want.$i.json" 2>>"$WORK/onnx-run.log" || fail "tetris-onnx-run --seed $i"
done
inst_start private env TETRIS_MODEL="$models/bert.safetensors" "$PY" "$PROBE" private
want_py=$(jq -r .sha256 "$WORK/private.out")
kill -TERM "$INST_PID"
wait "$INST_PID" || fail "private probe: exit status $? on SIGTERM"

reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
"$BIN/tetris-csi" --store "$store" --csi-socket "$sock" --registry-dir "" --pods-dir "$pods" \
    --models-dir "$models" >>"$WORK/csi.log" 2>&1 &
KILL_ON_EXIT="$KILL_ON_EXIT $!"
wait_until 60 "grep -q event=started '$WORK/csi.log'" || fail "tetris-csi did not start: $(cat "$WORK/csi.log")"
# publish VOLUME UID MODEL: the volume, as the kubelet asks for a pod's.
publish() {
    "$BIN/tetris-test-csi-client" "$sock" publish "$1" "$pods/uid-$2/volumes/model" \
        "model=$models/$3" csi.storage.k8s.io/ephemeral=true "csi.storage.k8s.io/pod.uid=uid-$2" \
        >"$WORK/reply" 2>&1 || fail "publish $1: no answer: $(cat "$WORK/reply")"
    grep -q '^status=OK ' "$WORK/reply" || fail "publish $1: $(cat "$WORK/reply")"
}
publish vol-n1 n1 "$NAME.onnx"
tensors_one=$(find "$store/public/tensors" -type f | wc -l)
publish vol-n2 n2 "$NAME.onnx"
[ "$(find "$store/public/tensors" -type f | wc -l)" = "$tensors_one" ] || fail "a second volume made a second copy"
publish vol-p1 p1 bert.safetensors
publish vol-p2 p2 bert.safetensors
# The pods do not see the node's model files.
mv "$models/$NAME.onnx" "$models/$NAME.hidden"
mv "$models/bert.safetensors" "$models/bert.hidden"
t1="$pods/uid-n1/volumes/model" t2="$pods/uid-n2/volumes/model"
jq -e '.store == "." and .fallback == null' "$t1/tensors.json" >/dev/null || fail "not a CSI view: $(jq -c 'del(.tensors)' "$t1/tensors.json")"

# ---- C: the agent's reader, ONNX Runtime ----
"$BIN/tetris-agent" check-view "$t1" >"$WORK/check.json" 2>"$WORK/check.err" ||
    fail "tetris-agent check-view refuses the volume: $(cat "$WORK/check.err")"
got=$("$BIN/tetris-onnx-run" "$t1/model.onnx" --private --seed 1 2>"$WORK/run.err" | jq -r .sha256)
[ "$got" = "$(jq -r .sha256 "$WORK/want.1.json")" ] || fail "ONNX Runtime on the volume: $got ($(cat "$WORK/run.err"))"

# ---- Node.js: one instance per pod's volume ----
pids=""
for i in 1 2; do
    eval "t=\$t$i"
    inst_start "node$i" env TETRIS_MODEL_VIEW="$t" port=0 node "$FN"
    grep 'prog=tetris-node-function' "$WORK/node$i.log" | grep -q 'event=serving.* mode=view' ||
        fail "node $i: not serving the view: $(grep event= "$WORK/node$i.log" | tail -n 3)"
    got=$(oip_sha "http://127.0.0.1:$INST_PORT" "$NAME" "$WORK/req.$i.json" "$WORK/node.$i.resp")
    want="$(jq -r .sha256 "$WORK/want.$i.json") $(jq -r .output_bytes "$WORK/want.$i.json")"
    [ "$got" = "$want" ] || fail "node $i: outputs $got, tetris-onnx-run --private gives $want"
    pids="$pids $INST_PID"
done
i=1
for p in $pids; do
    eval "t=\$t$i"
    s=$(pss_kb "$p" "$t/") r=$(rss_kb "$p" "$t/")
    [ "$r" -ge $((W / 1024 / 2)) ] || fail "node $i maps only $r kB of its volume (weights: $((W / 1024)) kB)"
    [ $((s * 2)) -le $((r + r / 10)) ] || fail "node $i: volume PSS $s kB of RSS $r kB: the two pods do not share the store's pages"
    i=$((i + 1))
done
for p in $pids; do kill -TERM "$p"; done
for p in $pids; do wait "$p" || fail "node instance $p: exit status $? on SIGTERM"; done
note "Node.js: two pods' volumes, outputs equal tetris-onnx-run's, one copy shared"

# ---- Python: one process per pod's volume ----
pids=""
for u in p1 p2; do
    inst_start "py-$u" env TETRIS_MODEL_VIEW="$pods/uid-$u/volumes/model" "$PY" "$PROBE" view
    [ "$(jq -r .sha256 "$WORK/py-$u.out")" = "$want_py" ] ||
        fail "python $u: the volume's tensors differ from a private read of the file"
    pids="$pids $INST_PID"
done
set -- p1 p2
for p in $pids; do
    t="$pods/uid-$1/volumes/model"
    s=$(pss_kb "$p" "$t/") r=$(rss_kb "$p" "$t/")
    [ "$r" -gt 0 ] && [ $((s * 2)) -le $((r + r / 10)) ] ||
        fail "python $1: volume PSS $s kB of RSS $r kB: the two pods do not share the store's pages"
    shift
done
for p in $pids; do kill -TERM "$p"; done
for p in $pids; do wait "$p" || fail "python probe $p: exit status $? on SIGTERM"; done
note "Python: two pods' volumes, read-only arrays with the right digests, pages shared"

# ---- "store": "." trusts the view, and nothing beyond it ----
bad="$WORK/bad"
mkdir -p "$bad"
cp -a "$t1" "$bad/copy"
rel=$(jq -r '[.tensors[] | select(.file != null)][0].file' "$t1/tensors.json")
# index CASE JQ: a copy whose tensors.json says something else
index() {
    cp -a "$bad/copy" "$bad/$1"
    chmod u+w "$bad/$1/tensors.json"
    jq "$2" "$bad/copy/tensors.json" >"$bad/$1/tensors.json"
    chmod 0444 "$bad/$1/tensors.json"
}
cp -a "$bad/copy" "$bad/link-out"
cp "$t1/$rel" "$bad/outside"
ln -sfn "$bad/outside" "$bad/link-out/$rel"
index absolute-out "(.tensors | map(.file != null) | index(true)) as \$i | .tensors[\$i].file = \"$bad/outside\""
index relative-store '.store = "tensors"'
printf '%s\t%s\n' link-out "outside the store" absolute-out "outside the store" \
    relative-store 'nor an absolute path' >"$bad/cases"
# A copy is a view like any other (its tensors are its own files now).
env TETRIS_MODEL_VIEW="$bad/copy" node -e "require('$ROOT/function/node/tetris-view.js').openView()" \
    2>"$WORK/copy.err" || fail "node refuses a copy of the volume: $(cat "$WORK/copy.err")"
while IFS="$(printf '\t')" read -r case want; do
    rc=0
    env TETRIS_MODEL_VIEW="$bad/$case" port=0 node "$FN" >/dev/null 2>"$WORK/bad.$case.err" || rc=$?
    [ $rc -eq 3 ] && grep -qF -- "$want" "$WORK/bad.$case.err" ||
        fail "node, bad view $case: exit $rc, want 3 and \"$want\": $(cat "$WORK/bad.$case.err")"
    rc=0
    env TETRIS_MODEL_VIEW="$bad/$case" "$PY" "$PROBE" view >/dev/null 2>"$WORK/bad.$case.err" || rc=$?
    [ $rc -eq 3 ] && grep -qF -- "$want" "$WORK/bad.$case.err" ||
        fail "python, bad view $case: exit $rc, want 3 and \"$want\": $(cat "$WORK/bad.$case.err")"
    rc=0
    # from inside the view: a relative store must not resolve against the cwd
    (cd "$bad/$case" && "$BIN/tetris-agent" check-view "$bad/$case") >/dev/null 2>&1 || rc=$?
    [ $rc -eq 3 ] || fail "tetris-agent check-view, bad view $case: exit $rc, want 3"
done <"$bad/cases"
note "$(wc -l <"$bad/cases") views that leave the view refused by the Node.js, Python and C readers"

for v in "vol-n1 n1" "vol-n2 n2" "vol-p1 p1" "vol-p2 p2"; do
    set -- $v
    "$BIN/tetris-test-csi-client" "$sock" unpublish "$1" "$pods/uid-$2/volumes/model" >"$WORK/reply" 2>&1
    grep -q '^status=OK ' "$WORK/reply" || fail "unpublish $1: $(cat "$WORK/reply")"
done
[ "$(find "$store/private/holders" -name 'csi-*.keep' | wc -l)" = 0 ] || fail "kept holders after unpublish"
echo "ok CSI views: Node.js, Python and C readers on two pods' volumes each"
