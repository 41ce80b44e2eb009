#!/bin/sh
# test-node-view.sh - the Node.js example function (function/node/, stock
# onnxruntime-node) shares a real model's weights through model views:
# N instances, each under `tetris-agent exec` with the real node daemon,
# answer OIP requests with exactly the outputs of `tetris-onnx-run
# --private` (SHA-256 of the output bytes) and of N private instances of
# the same function, map the store's files shared (each instance's PSS of
# them is its 1/N share of their RSS) and take clearly less memory than the
# private instances: at least half of the (N-1) copies of the weights that
# sharing saves. Without a store the view falls back to the model file and
# the function serves the same outputs. Binary outputs, the model metadata
# and bad requests (4xx with an error) are checked on a view instance.
# Untrusted or broken views make it exit 3 with a message naming the
# problem, and leave the store as it was.
set -eu
. "$(dirname "$0")/lib.sh"
need_models
need_node
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"

N=3
MODEL="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
NAME=ch_PP-OCRv4_rec_infer
FN="$ROOT/function/node/index.js"
STORE="$WORK/store"
mkdir "$STORE"
W=$(stat -c %s "$MODEL") # the weights are nearly all of the file

"$ROOT/function/node/index.js" --version | grep -q '^tetris-node-function ' || fail "--version"
"$ROOT/function/node/index.js" --help | grep -q 'TETRIS_MODEL_VIEW' || fail "--help"

i=1
while [ $i -le $N ]; do
    "$BIN/tetris-onnx-run" "$MODEL" --private --seed $i --oip-request "$WORK/req.$i.json" \
        >"$WORK/want.$i.json" 2>>"$WORK/onnx-run.log" || fail "tetris-onnx-run --seed $i"
    i=$((i + 1))
done

# check_outputs PHASE PORT I: instance I's answer to seed I is tetris-onnx-run's
check_outputs() {
    got=$(oip_sha "http://127.0.0.1:$2" "$NAME" "$WORK/req.$3.json" "$WORK/$1.$3.resp")
    want="$(jq -r .sha256 "$WORK/want.$3.json") $(jq -r .output_bytes "$WORK/want.$3.json")"
    [ "$got" = "$want" ] || fail "$1 instance $3: outputs $got, tetris-onnx-run --private gives $want"
}

# ---- N private instances: the baseline ----
private_kb=0
pids=""
i=1
while [ $i -le $N ]; do
    inst_start "private$i" env TETRIS_MODEL="$MODEL" port=0 node "$FN"
    grep -q 'mode=private' "$WORK/private$i.log" || fail "private instance $i: not mode=private"
    check_outputs private "$INST_PORT" $i
    pids="$pids $INST_PID"
    i=$((i + 1))
done
for p in $pids; do private_kb=$((private_kb + $(pss_kb "$p"))); done
for p in $pids; do kill -TERM "$p"; done
for p in $pids; do wait "$p" || fail "private instance $p: exit status $? on SIGTERM"; done
note "$N private instances: outputs equal tetris-onnx-run's, PSS $private_kb kB"

# ---- no store: the view names the original model, the function serves ----
inst_start fallback env port=0 "$BIN/tetris-agent" exec --store "$WORK/no-store" --model "$MODEL" -- node "$FN"
grep -q 'prog=tetris-node-function event=view-fallback reason=store-unavailable' "$WORK/fallback.log" ||
    fail "no store: no view-fallback line: $(cat "$WORK/fallback.log")"
check_outputs fallback "$INST_PORT" 1
kill -TERM "$INST_LAUNCHER"
wait "$INST_LAUNCHER" || fail "fallback instance: exec exited $? after SIGTERM"
note "without a store the view names the model file and the outputs are the same"

# ---- N instances on views, under tetris-agent exec, through the daemon ----
reclaimer_start "$STORE" "$WORK/daemon.log" --listen "" --interval 3600
inst_pids="" launchers=""
i=1
while [ $i -le $N ]; do
    inst_start "view$i" env port=0 TETRIS_MAX_BODY_BYTES=8388608 "$BIN/tetris-agent" exec --store "$STORE" --model "$MODEL" -- node "$FN"
    grep 'prog=tetris-node-function' "$WORK/view$i.log" | grep -q 'event=serving.* mode=view' ||
        fail "instance $i: not serving a view: $(grep event=serving "$WORK/view$i.log")"
    grep -q 'prog=tetris-agent event=view .*shared=true fallback=none' "$WORK/view$i.log" ||
        fail "instance $i: the view is not the store's: $(grep 'event=view' "$WORK/view$i.log")"
    check_outputs view "$INST_PORT" $i
    inst_pids="$inst_pids $INST_PID"
    launchers="$launchers $INST_LAUNCHER"
    i=$((i + 1))
done
note "$N view instances: outputs byte-identical to tetris-onnx-run --private"

# Memory, as scripts/demo.sh counts it: every instance's PSS without its
# share of the store, the store's pages once, in full, and the daemon; here
# also the exec supervisors that hold the references.
view_kb=0 store_pss=0
for p in $inst_pids; do
    s=$(pss_kb "$p" "$STORE/")
    r=$(rss_kb "$p" "$STORE/")
    # ONNX Runtime maps the external data of all but the smallest tensors
    [ "$r" -ge $((W / 1024 / 2)) ] || fail "instance $p maps only $r kB of the store's files (weights: $((W / 1024)) kB)"
    # shared by all N: each one's PSS is about its 1/N share of the RSS
    [ $((s * N)) -le $((r + r / 10)) ] ||
        fail "instance $p: store PSS $s kB of RSS $r kB: the pages are not shared by the $N instances"
    shmem=$(rollup_kb "$p" Pss_Shmem)
    [ "$shmem" -ge "$s" ] || fail "instance $p: Pss_Shmem $shmem kB < its store PSS $s kB: the store is not tmpfs pages?"
    view_kb=$((view_kb + $(pss_kb "$p") - s))
    store_pss=$((store_pss + s))
done
sup_kb=0
for p in $launchers; do sup_kb=$((sup_kb + $(pss_kb "$p"))); done
daemon_kb=$(pss_kb "$RECLAIMER_PID")
skb=$(store_kb "$STORE")
total_kb=$((view_kb + skb + daemon_kb + sup_kb))
saved_kb=$((private_kb - total_kb))
note "$N view instances: PSS without the store $view_kb kB + store $skb kB + daemon $daemon_kb kB + exec $sup_kb kB = $total_kb kB (private: $private_kb kB, saved $saved_kb kB; weights $((W / 1024)) kB; store PSS summed over instances $store_pss kB)"
# The instances and the store alone save at least half of the N-1 copies
# of the weights that one shared copy avoids; with the daemon (one per
# node, whatever it serves) and the exec supervisors they still take less.
inst_saved=$((private_kb - view_kb - skb))
[ $inst_saved -ge $(((N - 1) * W / 1024 / 2)) ] ||
    fail "$N view instances and the store save $inst_saved kB over $N private instances: less than half of $((N - 1)) copies of the $((W / 1024)) kB weights"
[ $SANITIZED = 1 ] || [ $saved_kb -gt 0 ] || fail "$N view instances with the daemon and their supervisors take $total_kb kB, private ones $private_kb kB"

# The same outputs as binary data; the model's metadata; bad requests.
url="http://127.0.0.1:$INST_PORT"
jq '.parameters.binary_data_output = true' "$WORK/req.$N.json" >"$WORK/req.bin.json"
curl -s -D "$WORK/bin.headers" -o "$WORK/bin.resp" --data-binary "@$WORK/req.bin.json" \
    "$url/v2/models/$NAME/infer" || fail "binary request: curl failed"
hlen=$(tr -d '\r' <"$WORK/bin.headers" | sed -n 's/^[Ii]nference-[Hh]eader-[Cc]ontent-[Ll]ength: //p')
[ -n "$hlen" ] || fail "binary answer without Inference-Header-Content-Length: $(cat "$WORK/bin.headers")"
[ "$(node "$ROOT/scripts/lib/oip-sha256.js" "$WORK/bin.resp" "$hlen")" = \
    "$(jq -r '"\(.sha256) \(.output_bytes)"' "$WORK/want.$N.json")" ] || fail "binary outputs differ"
[ "$(http_status GET "$url/v2/models/$NAME")" = 200 ] || fail "model metadata: HTTP $(cat "$WORK/http.body")"
jq -e '.inputs == [{"name": "x", "datatype": "FP32", "shape": [-1, 3, 48, -1]}] and .outputs[0].datatype == "FP32"' \
    "$WORK/http.body" >/dev/null || fail "model metadata: $(cat "$WORK/http.body")"
bad_requests "$url" "$NAME" "$WORK/req.1.json"
check_outputs view "$INST_PORT" $N
note "binary outputs equal, metadata right, bad requests answered 4xx with an error, still serving"

# ---- views that must not be trusted ----
view=$(sed -n 's/.*prog=tetris-agent event=view dir="\{0,1\}\([^" ]*\).*/\1/p' "$WORK/view1.log" | head -n 1)
[ -f "$view/tensors.json" ] || fail "no view directory in the exec log ($view)"
bad_views "$view" "$STORE" "$WORK/bad"
store_listing "$STORE" >"$WORK/store.before"
while IFS="$(printf '\t')" read -r case want; do
    rc=0
    env TETRIS_MODEL_VIEW="$WORK/bad/$case" port=0 node "$FN" >/dev/null 2>"$WORK/bad.$case.err" || rc=$?
    [ $rc -eq 3 ] || fail "bad view $case: exit $rc, want 3: $(cat "$WORK/bad.$case.err")"
    grep -q 'event=untrusted-view' "$WORK/bad.$case.err" || fail "bad view $case: no event=untrusted-view: $(cat "$WORK/bad.$case.err")"
    grep -qF -- "$want" "$WORK/bad.$case.err" || fail "bad view $case: message lacks \"$want\": $(cat "$WORK/bad.$case.err")"
    # the agent's own reader agrees on the trust rules
    rc=0
    "$BIN/tetris-agent" check-view "$WORK/bad/$case" >/dev/null 2>&1 || rc=$?
    [ $rc -eq 3 ] || fail "bad view $case: tetris-agent check-view exit $rc, want 3"
done <"$WORK/bad/cases"
store_listing "$STORE" >"$WORK/store.after"
cmp -s "$WORK/store.before" "$WORK/store.after" || fail "the store changed while bad views were read: $(diff "$WORK/store.before" "$WORK/store.after" | head -n 5)"
note "$(wc -l <"$WORK/bad/cases") untrusted views refused with exit 3, store unchanged"

# Session options onnxruntime-node cannot honour: a level it lacks is a bad
# view (exit 3); an option it has no equivalent for is one warn line.
opts_view() { # NAME JQ: a copy of the view with tensors.json edited by JQ
    cp -a "$view" "$WORK/$1"
    jq "$2" "$view/tensors.json" >"$WORK/$1/tensors.json"
}
opts_view level '.session_options.graph_optimization_level = "fastest"'
rc=0
env TETRIS_MODEL_VIEW="$WORK/level" port=0 node "$FN" >/dev/null 2>"$WORK/level.err" || rc=$?
[ $rc -eq 3 ] && grep -q 'event=bad-view .*graph_optimization_level \\"fastest\\" is not one of' "$WORK/level.err" ||
    fail "a view at level fastest: exit $rc: $(cat "$WORK/level.err")"
opts_view unknown '.session_options.frobnicate = "1"'
inst_start unknown env TETRIS_MODEL_VIEW="$WORK/unknown" port=0 node "$FN"
[ "$(grep -c 'event=view-option-ignored option=frobnicate value=1' "$WORK/unknown.log")" = 1 ] ||
    fail "an option without an equivalent: $(grep event= "$WORK/unknown.log")"
check_outputs unknown "$INST_PORT" 1
kill -TERM "$INST_LAUNCHER"
wait "$INST_LAUNCHER" || fail "the function on a view with an unknown option: exit $? after SIGTERM"
note "a level onnxruntime-node lacks: exit 3; an option without an equivalent: one warn line, still serving"

# ---- stop: exec passes SIGTERM on, the function exits 0, the view goes ----
for p in $launchers; do kill -TERM "$p"; done
for p in $launchers; do wait "$p" || fail "tetris-agent exec $p: exit status $? after SIGTERM"; done
[ ! -e "$view" ] || fail "the view $view outlived its exec"
reclaimer_stop
echo "ok Node.js: $N instances share $skb kB of weights: $total_kb kB against $private_kb kB private"
