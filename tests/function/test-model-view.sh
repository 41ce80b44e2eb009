#!/bin/sh
# A model view the platform made (tetris-csi's volume, TETRIS_MODEL_VIEW)
# served with no store and no model file, as a function pod of the CSI
# way does:
#   - tetris-function on two volumes of one model answers Open Inference
#     Protocol requests with exactly `tetris-onnx-run --private`'s outputs,
#     says mode "view", and counts what it maps of the store (its ready
#     line and /metrics: the mapped tensor files, each one's bytes); the two
#     map the same files, the store's one copy;
#   - `tetris-agent exec` (the Node.js and Python templates' entrypoint)
#     on such a view loads nothing: CMD replaces it (same pid) with the
#     view unchanged, its status is exec's, a missing CMD is 127;
#   - a view not to trust (a copy writable by others) is refused by both
#     before anything serves or runs (exit 3).
# Needs root: the volumes are bind mounts.
set -eu
. "$(dirname "$0")/../lib/function.sh"
[ "$(id -u)" = 0 ] || skip "needs root: the volumes are bind mounts"

store="$WORK/store"
models="$WORK/models"
pods="$WORK/pods"
sock="$WORK/csi.sock"
mkdir -p "$store" "$models" "$pods/uid-1/volumes" "$pods/uid-2/volumes"
cp "$MODELS/ch_PP-OCRv4_rec_infer.onnx" "$models/ocr.onnx"
at_exit "grep -o ' $WORK[^ ]* ' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null || true"
"$BIN/tetris-onnx-run" "$models/ocr.onnx" --private --seed 5 --oip-request "$WORK/req.json" 2>"$WORK/onnx-run.log" |
    jq -r .sha256 >"$WORK/want" || fail "tetris-onnx-run --private"

reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600
"$BIN/tetris-csi" --store "$store" --csi-socket "$sock" --registry-dir "" --pods-dir "$pods" \
    --models-dir "$models" >>"$WORK/csi.log" 2>&1 &
KILL_ON_EXIT="$KILL_ON_EXIT $!"
wait_until 60 "grep -q event=started '$WORK/csi.log'" || fail "tetris-csi did not start: $(cat "$WORK/csi.log")"
for i in 1 2; do
    "$BIN/tetris-test-csi-client" "$sock" publish "vol-$i" "$pods/uid-$i/volumes/model" \
        "model=$models/ocr.onnx" csi.storage.k8s.io/ephemeral=true "csi.storage.k8s.io/pod.uid=uid-$i" \
        >"$WORK/reply" 2>&1 || fail "publish vol-$i: $(cat "$WORK/reply")"
    grep -q '^status=OK ' "$WORK/reply" || fail "publish vol-$i: $(cat "$WORK/reply")"
done
v1="$pods/uid-1/volumes/model" v2="$pods/uid-2/volumes/model"
# The pods do not see the node's model file.
mv "$models/ocr.onnx" "$models/ocr.hidden"

# ---- tetris-function ----
fn_start f1 --model-view "$v1"
fn_start f2 --model-view "$v2"
jq -e '.mode == "view" and .name == "ocr" and .shared_bytes > 0' "$WORK/f1.ready" >/dev/null ||
    fail "the ready line: $(cat "$WORK/f1.ready")"
for i in 1 2; do
    eval "url=\$FN_URL_f$i"
    [ "$(oip_infer "$url" ocr "$WORK/req.json" "" "$WORK/ans.$i")" = 200 ] ||
        fail "f$i: $(head -c 300 "$WORK/ans.$i")"
    [ "$($OIP_TOOL hash "$WORK/ans.$i")" = "$(cat "$WORK/want")" ] || fail "f$i: not the private run's outputs"
done
# What it maps of the store: the tensor files /proc/PID/maps lists, each
# named by the view with its length; their sum is what it reports.
pid=$FN_PID_f1
grep -o "$v1/tensors/[^ ]*" "/proc/$pid/maps" | sed "s|^$v1/||" | sort -u >"$WORK/mapped"
[ -s "$WORK/mapped" ] || fail "f1 maps no file of its volume"
want=$(jq -r --rawfile m "$WORK/mapped" '($m | split("\n") | map(select(. != ""))) as $f |
    [.tensors[] | select(.shared and (.file as $x | $f | index($x) != null)) | .length] | add' "$v1/tensors.json")
[ "$(jq .shared_bytes "$WORK/f1.ready")" = "$want" ] ||
    fail "f1 reports $(jq .shared_bytes "$WORK/f1.ready") shared bytes, maps $want"
[ "$(metric_at "$FN_URL_f1" tetris_function_shared_tensor_bytes)" = "$want" ] || fail "/metrics disagrees"
grep -q 'event=model-view-mapped' "$WORK/f1.log" || fail "no event=model-view-mapped line"
# The two volumes show the same files: one copy in the store.
for i in 1 2; do
    eval "p=\$FN_PID_f$i"
    eval "view=\$v$i"
    grep -o "$view/tensors/[^ ]*" "/proc/$p/maps" | sed "s|^$view/||" | sort -u |
        while read -r f; do stat -L -c %i "$view/$f"; done | sort -u >"$WORK/inodes.$i"
done
cmp -s "$WORK/inodes.1" "$WORK/inodes.2" || fail "the two functions map different files"
echo "ok tetris-function on two volumes: the private run's outputs, $(wc -l <"$WORK/mapped") store files ($want bytes) mapped by both"

# ---- tetris-agent exec on a given view ----
# shellcheck disable=SC2016 # the child's own $$ and $TETRIS_MODEL_VIEW
TETRIS_MODEL_VIEW="$v1" "$BIN/tetris-agent" exec -- sh -c 'echo "$$ $TETRIS_MODEL_VIEW" >"$0"; exit 7' \
    "$WORK/child" 2>"$WORK/exec.log" &
exec_pid=$!
rc=0
wait $exec_pid || rc=$?
[ $rc = 7 ] || fail "exec on a given view: status $rc, want CMD's 7: $(cat "$WORK/exec.log")"
[ "$(cat "$WORK/child")" = "$exec_pid $v1" ] || fail "CMD did not replace exec: $(cat "$WORK/child"), exec was $exec_pid"
[ "$(grep -c 'event=exec-given-view' "$WORK/exec.log")" = 1 ] || fail "no exec-given-view line: $(cat "$WORK/exec.log")"
! grep -q 'event=load\|event=fallback' "$WORK/exec.log" || fail "exec loaded a model: $(cat "$WORK/exec.log")"
rc=0
TETRIS_MODEL_VIEW="$v1" "$BIN/tetris-agent" exec -- "$WORK/no-such-command" 2>"$WORK/exec2.log" || rc=$?
[ $rc = 127 ] || fail "a missing CMD: status $rc, want 127"
echo "ok tetris-agent exec on a given view: CMD in its place (same pid, the view unchanged), its status; 127"

# ---- a view not to trust ----
cp -r "$v1" "$WORK/copy"
chmod 0777 "$WORK/copy"
rc=0
TETRIS_MODEL_VIEW="$WORK/copy" "$BIN/tetris-agent" exec -- touch "$WORK/ran" 2>"$WORK/exec3.log" || rc=$?
[ $rc = 3 ] && [ ! -e "$WORK/ran" ] && grep -q 'event=view-invalid' "$WORK/exec3.log" ||
    fail "exec on a writable view: status $rc, CMD ran: $([ -e "$WORK/ran" ] && echo yes || echo no): $(cat "$WORK/exec3.log")"
rc=0
"$BIN/tetris-function" --model-view "$WORK/copy" --listen 127.0.0.1:0 >/dev/null 2>"$WORK/f3.log" || rc=$?
[ $rc != 0 ] && grep -q 'writable by group or others' "$WORK/f3.log" ||
    fail "tetris-function on a writable view: status $rc: $(tail -n 2 "$WORK/f3.log")"
echo "ok a view writable by others: exec exits 3 before CMD runs, tetris-function refuses it"
