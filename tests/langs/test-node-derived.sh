#!/bin/sh
# test-node-derived.sh - a model view carries the derived form made by the
# runtime it is for (docs/PROTOCOLS.md, "Model view" and "Derived forms"),
# with real onnxruntime-node and the real node daemon: the daemon derives
# with onnxruntime-node's own library (--derive-runtimes), never one a pod
# names; the Node.js function (function/node/) under `tetris-agent exec
# --derived --runtime` opens the form and answers byte for byte what stock
# onnxruntime-node answers at its defaults (optimisation `all`,
# pre-packing on) on the original model; two instances map the form's data
# file once (the PSS of their mappings adds up to one RSS) and, on a store
# of 2 MiB pages (as root: the daemon mounts one, as the chart's does),
# through no mapping khugepaged could move it onto them (THPeligible 0: exec
# starts the function with such mappings kept off 2 MiB pages, on a kernel
# that can; tetris-agent.c keep_form_small_pages); a form missing
# for the runtime, a runtime the daemon does not derive with, and a form
# made by another runtime than the reader's (the daemon's own 1.29 read by
# onnxruntime-node 1.22) each leave the function on the plain graph with
# one log line and its plain answers; a view whose form's data is not the
# store's is refused. Only the daemon's flag names the libraries: a
# settings file that does is refused, and so is a library others could
# have written.
set -eu
. "$(dirname "$0")/lib.sh"
need_models
need_node
[ -x "$BIN/tetris-derive" ] || fail "tetris-derive not built in $BIN"

MODEL="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
NAME=ch_PP-OCRv4_rec_infer
FN="$ROOT/function/node/index.js"
STORE="$WORK/store"
mkdir "$STORE"
TMPFS=""
if [ "$(id -u)" = 0 ]; then
    TMPFS="--store-tmpfs huge"
    at_exit "umount '$STORE' 2>/dev/null || umount -l '$STORE' 2>/dev/null || true"
fi
# The derivation child (uid 65534) reads the store's public directory by
# its name, as on a node, where the store's parents are 0755.
chmod 0711 "$WORK"
# onnxruntime-node's own library, where a daemon's image would carry it:
# a directory root alone may write (the daemon refuses any other).
lib=$(find "$NODE_PATH/onnxruntime-node/bin" -path '*/linux/x64/libonnxruntime.so.1' | head -n 1)
[ -f "$lib" ] || fail "no linux x64 libonnxruntime.so.1 in $NODE_PATH/onnxruntime-node"
mkdir -m 0755 "$WORK/runtimes"
cp "$lib" "$WORK/runtimes/"
RUNTIME="onnxruntime $(node -e "process.stdout.write(require('onnxruntime-node').env.versions.node)")"
OWN=$("$BIN/tetris-derive" --runtime | jq -r .runtime)
[ "$RUNTIME" != "$OWN" ] || skip "onnxruntime-node runs $RUNTIME, the daemon's own runtime: no mismatch to test"

"$BIN/tetris-onnx-run" "$MODEL" --private --seed 1 --oip-request "$WORK/req.json" \
    >"$WORK/plain.json" 2>"$WORK/onnx-run.log" || fail "tetris-onnx-run: $(cat "$WORK/onnx-run.log")"
PLAIN="$(jq -r .sha256 "$WORK/plain.json") $(jq -r .output_bytes "$WORK/plain.json")"
STOCK=$(node "$ROOT/tests/langs/node_stock.js" "$MODEL" "$WORK/req.json") || fail "stock onnxruntime-node failed"
[ "$STOCK" != "$PLAIN" ] || note "stock at all and the plain graph answer alike for this input"

# ---- who may name a runtime library ----
printf 'derive_runtimes: %s\n' "$WORK/runtimes/libonnxruntime.so.1" >"$WORK/settings.yaml"
st=$(status "$BIN/tetris-reclaimer" --config "$WORK/settings.yaml" --store "$STORE" --once --listen "")
[ "$st" = 2 ] && grep -q 'is refused in a settings file' "$WORK/status.err" ||
    fail "a settings file naming derive_runtimes: exit $st: $(cat "$WORK/status.err")"
mkdir -m 0777 "$WORK/open"
cp "$lib" "$WORK/open/"
# shellcheck disable=SC2086 # TMPFS is zero or two words
reclaimer_start "$STORE" "$WORK/daemon0.log" --listen "" --interval 3600 $TMPFS \
    --derive-runtimes "$WORK/open/libonnxruntime.so.1"
"$BIN/tetris-agent" view --store "$STORE" --derived make --runtime "$RUNTIME" "$MODEL" "$WORK/v0" \
    >"$WORK/v0.json" 2>"$WORK/v0.err" || fail "view: $(cat "$WORK/v0.err")"
[ "$(jq -r .derived "$WORK/v0.json")" = null ] || fail "a library in an open directory was used"
grep -q "event=derive-runtime-refused .*is writable by group or others" "$WORK/daemon0.log" ||
    fail "an untrusted library: $(grep event=derive "$WORK/daemon0.log")"
reclaimer_stop
rm -rf "$WORK/v0" "$STORE"/public/derived
note "derive runtimes: refused in a settings file (exit 2), and from a directory others may write"

# shellcheck disable=SC2086 # TMPFS is zero or two words
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600 $TMPFS \
    --derive-runtimes "$WORK/runtimes/libonnxruntime.so.1"

# serve NAME DERIVED RUNTIME: the function under exec; answers seed 1 as WANT
serve() {
    inst_start "$1" env port=0 TETRIS_DERIVED="$2" TETRIS_VIEW_RUNTIME="$3" \
        "$BIN/tetris-agent" exec --store "$STORE" --model "$MODEL" -- node "$FN"
}
# answer NAME WANT WHAT: the instance's answer to the request is WANT
answer() {
    got=$(oip_sha "http://127.0.0.1:$INST_PORT" "$NAME" "$WORK/req.json" "$WORK/$1.resp")
    [ "$got" = "$2" ] || fail "$1: answers $got, want $3 ($2)"
}
# serving NAME: the function's derived=true|false
serving() { sed -n 's/.*prog=tetris-node-function event=serving .* derived=\([a-z]*\) .*/\1/p' "$WORK/$1.log"; }
stop() {
    kill -TERM "$INST_LAUNCHER"
    wait "$INST_LAUNCHER" || fail "$1: exec exited $? after SIGTERM"
}

# ---- no form yet (use never asks): the plain graph, one log line ----
serve none use "$RUNTIME"
[ "$(serving none)" = false ] || fail "none: $(grep event=serving "$WORK/none.log")"
[ "$(grep -c 'event=derived-none' "$WORK/none.log")" = 1 ] || fail "none: $(grep event=derived "$WORK/none.log")"
answer none "$PLAIN" "the plain graph's"
stop none
! grep -q 'event=derive' "$WORK/daemon.log" || fail "--derived use asked the daemon: $(grep event=derive "$WORK/daemon.log")"
note "no form for $RUNTIME: the plain graph, one event=derived-none line, the plain answers"

# ---- a runtime the daemon does not derive with: refused, plain graph ----
serve unknown make "onnxruntime 1.23.0"
[ "$(serving unknown)" = false ] || fail "unknown runtime: a form was carried"
[ "$(grep -c 'event=derive-request-failed.*no runtime' "$WORK/unknown.log")" = 1 ] ||
    fail "unknown runtime: $(grep event=derive "$WORK/unknown.log")"
answer unknown "$PLAIN" "the plain graph's"
stop unknown
! grep -q 'event=derived ' "$WORK/daemon.log" || fail "a form was made for a runtime the daemon lacks"
note "a runtime the daemon lacks: $(sed -n 's/.*event=derive-request-failed.* msg=//p' "$WORK/unknown.log" | cut -c1-120)"

# ---- the form of onnxruntime-node's runtime: made by its library, stock answers ----
serve made make "$RUNTIME"
[ "$(serving made)" = true ] || fail "make: no form: $(grep -e event=derive -e event=serving "$WORK/made.log")"
grep -q "event=derived .*runtime=\"$RUNTIME\"" "$WORK/daemon.log" ||
    fail "the daemon made no $RUNTIME form: $(grep event=derive "$WORK/daemon.log")"
grep -q "event=derive-runtime runtime=\"$RUNTIME\" lib=\"$WORK/runtimes/libonnxruntime.so.1\"" "$WORK/daemon.log" ||
    fail "the form was not made with onnxruntime-node's library: $(grep event=derive-runtime "$WORK/daemon.log")"
answer made "$STOCK" "stock onnxruntime-node's at all with pre-packing"
made_pid=$INST_PID made_launcher=$INST_LAUNCHER
view=$(sed -n 's/.*prog=tetris-agent event=view dir="\{0,1\}\([^" ]*\).*/\1/p' "$WORK/made.log" | head -n 1)
[ "$(jq -r .derived.runtime "$view/tensors.json")" = "$RUNTIME" ] || fail "the view's form: $(jq -c .derived "$view/tensors.json")"
"$BIN/tetris-agent" check-view "$view" >"$WORK/check.json" 2>"$WORK/check.err" || fail "check-view: $(cat "$WORK/check.err")"
[ "$(jq -r .derived "$WORK/check.json")" = "$RUNTIME" ] || fail "check-view: $(cat "$WORK/check.json")"
note "$RUNTIME's form, made with onnxruntime-node's library: answers = stock onnxruntime-node at all + pre-packing ($STOCK)"

# A second instance uses the form the first one got made: one copy mapped.
serve second use "$RUNTIME"
[ "$(serving second)" = true ] || fail "second: no form: $(grep event=derive "$WORK/second.log")"
answer second "$STOCK" "stock onnxruntime-node's"
second_pid=$INST_PID second_launcher=$INST_LAUNCHER
[ "$(grep -c "event=derived .*runtime=\"$RUNTIME\"" "$WORK/daemon.log")" = 1 ] || fail "the form was made twice"
data="$STORE/public/$(jq -r .derived.data.file "$view/tensors.json")"
data=$(realpath "$data")
rss=0 pss=0
for p in $made_pid $INST_PID; do
    r=$(rss_kb "$p" "$data")
    [ "$r" -gt 0 ] || fail "instance $p maps nothing of the form's data file $data"
    rss=$((rss + r))
    pss=$((pss + $(pss_kb "$p" "$data")))
done
[ $((pss * 2)) -le $((rss + 2 * 8)) ] || fail "the form's data is not shared: PSS ${pss} kB for RSS ${rss} kB summed"
note "2 instances map the form's data once: PSS $pss kB for RSS $rss kB summed (Pss_Shmem $(rollup_kb "$made_pid" Pss_Shmem) and $(rollup_kb "$INST_PID" Pss_Shmem) kB, anonymous $(rollup_kb "$made_pid" Anonymous) kB per instance)"
# A third on the first one's view as given (a tetris-csi volume's is run
# so): exec becomes the function.
inst_start given env port=0 TETRIS_MODEL_VIEW="$view" "$BIN/tetris-agent" exec -- node "$FN"
[ "$(serving given)" = true ] || fail "given view: no form: $(grep -e event=view -e event=serving "$WORK/given.log")"
answer given "$STOCK" "stock onnxruntime-node's"
# onnxruntime-node maps the form's data itself, one mapping per
# initializer; on a store of 2 MiB pages an eligible one would let
# khugepaged move the form onto them.
if ! grep -q 'event=store-tmpfs state=mounted .*huge=within_size' "$WORK/daemon0.log"; then
    note "the store is not on 2 MiB pages here: the form's pages not checked"
elif grep -q 'event=form-pages-not-kept' "$WORK/made.log"; then
    note "not checked: $(sed -n 's/.*event=form-pages-not-kept .*msg=//p' "$WORK/made.log" | head -n 1)"
else
    for p in $made_pid $second_pid $INST_PID; do
        eligible=$(smaps_kb "$p" "$data" THPeligible)
        [ "$eligible" = 0 ] ||
            fail "instance $p: $eligible of its mappings of the form's data are eligible for 2 MiB pages (THPeligible)"
    done
    note "the store on 2 MiB pages: no mapping of the form's data THPeligible in any of the three instances"
fi
stop given

# A form whose data is not the store's is refused (the view's copy, re-linked).
cp -a "$view" "$WORK/bad-view"
rel=$(jq -r .derived.data.file "$view/tensors.json")
cp "$data" "$WORK/outside"
ln -sfn "$WORK/outside" "$WORK/bad-view/$rel"
rc=0
env TETRIS_MODEL_VIEW="$WORK/bad-view" port=0 node "$FN" >/dev/null 2>"$WORK/bad.err" || rc=$?
[ $rc -eq 3 ] && grep -q 'event=untrusted-view.*outside the store' "$WORK/bad.err" ||
    fail "a form's data outside the store: exit $rc: $(cat "$WORK/bad.err")"
rc=0
"$BIN/tetris-agent" check-view "$WORK/bad-view" >/dev/null 2>"$WORK/bad-check.err" || rc=$?
[ $rc -eq 3 ] || fail "check-view of a form outside the store: exit $rc: $(cat "$WORK/bad-check.err")"
note "a form whose data is not the store's is refused (exit 3) by the function and by check-view"
INST_LAUNCHER=$second_launcher
stop second
INST_LAUNCHER=$made_launcher
stop made
[ ! -e "$view" ] || fail "the view $view outlived its exec"

# ---- a form made by another runtime than the reader's: plain graph ----
serve other make "$OWN"
grep -q "prog=tetris-agent event=view .*derived=\"$OWN\"" "$WORK/other.log" ||
    fail "the view carries no $OWN form: $(grep -e event=view -e event=derive "$WORK/other.log")"
[ "$(serving other)" = false ] || fail "onnxruntime-node opened a form made by $OWN"
[ "$(grep -c 'event=view-derived-mismatch' "$WORK/other.log")" = 1 ] ||
    fail "mismatch: $(grep event=view "$WORK/other.log")"
answer other "$PLAIN" "the plain graph's"
stop other
note "a view with $OWN's form, read by $RUNTIME: the plain graph, one event=view-derived-mismatch line"
reclaimer_stop
echo "ok Node.js on a view with $RUNTIME's derived form: stock answers, one shared copy; missing, unknown and other runtimes fall back"
