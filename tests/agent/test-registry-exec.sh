#!/bin/sh
# `tetris-agent exec` and `view` on a model named by a registry reference,
# against a real registry (docker-registry on loopback) and a real daemon:
# the view is the pulled graph with every tensor the store's, "ref" names
# the reference, and a runtime that knows only the view (ONNX Runtime in
# tetris-test-view-run; the Python package for a safetensors model)
# computes what a private run of the file computes. When the pull fails
# (a repository the registry lacks), the --model file is used instead with
# one event=fallback line; without a file exec fails before its command
# starts, with the registry's or the daemon's reason (so it does when the
# file is not there). Two references, or a malformed one, are a usage
# error.
set -eu
. "$(dirname "$0")/../lib/reclaimer.sh"
. "$(dirname "$0")/../lib/registry.sh"
need_models
export TMPDIR="$WORK"
registry_start
host="127.0.0.1:$REGISTRY_PORT"
model="$MODELS/hello_deepa.onnx"
ref="oci://$host/models/hello:v1"
"$BIN/tetris-registry" push "$model" "$ref" >"$WORK/push.out" 2>"$WORK/push.log" ||
    fail "push: $(cat "$WORK/push.log")"
synth "$WORK/mlp.safetensors" 6 4096 3
sref="oci://$host/models/mlp:v1"
"$BIN/tetris-registry" push "$WORK/mlp.safetensors" "$sref" >>"$WORK/push.out" 2>>"$WORK/push.log" ||
    fail "push safetensors: $(cat "$WORK/push.log")"
start_daemon --registries "$host"
agent() { "$BIN/tetris-agent" "$@"; }
want=$("$BIN/tetris-onnx-run" "$model" --private --seed 7 2>/dev/null | jq -r .sha256)

# In the command: the view checked as its reader must, its index kept,
# then run by a runtime that knows only the view.
cat >"$WORK/cmd.sh" <<'CMD'
#!/bin/sh
set -eu
"$BIN/tetris-agent" check-view >"$OUT.check"
cp "$TETRIS_MODEL_VIEW/tensors.json" "$OUT.index"
exec "$BIN/tetris-test-view-run" --seed 7
CMD
chmod +x "$WORK/cmd.sh"
export BIN

# ---- pulled: the view is the registry's graph on the store's pages ----
got=$(OUT="$WORK/pulled" agent exec --store "$STORE" --model-ref "$ref" -- "$WORK/cmd.sh" \
      2>"$WORK/pulled.log" | jq -r .sha256) || fail "exec on $ref: $(tail -3 "$WORK/pulled.log")"
[ "$got" = "$want" ] || fail "pulled view: outputs $got, a private run gives $want"
jq -e --arg ref "$ref" '.ref == $ref and (.model | endswith("/model.onnx")) and
    .graph == "model.onnx" and .shared == true and .fallback == null and
    ([.tensors[] | select(.file != null) | .shared] | all) and
    ([.tensors[] | select(.file != null)] | length) > 0' "$WORK/pulled.index" >/dev/null ||
    fail "pulled view's index: $(jq -c '{model, ref, graph, shared, fallback}' "$WORK/pulled.index")"
jq -e '.files > 0 and .shared_files == .files and .shared == true' "$WORK/pulled.check" >/dev/null ||
    fail "check-view of the pulled view: $(cat "$WORK/pulled.check")"
grep -q "event=pulled" "$WORK/pulled.log" || fail "no event=pulled line"
! grep -q "event=fallback" "$WORK/pulled.log" || fail "a pull that worked fell back"
[ "$(metric tetris_pull_tensors_total)" -gt 0 ] || fail "the daemon pulled nothing"
# The same through TETRIS_MODEL (a reference; TETRIS_MODEL_REF naming the
# same one too, as an image's and a deployment's environment may), and no
# view is left behind.
got=$(OUT="$WORK/env" TETRIS_MODEL="$ref" TETRIS_MODEL_REF="$ref" agent exec --store "$STORE" -- "$WORK/cmd.sh" \
      2>"$WORK/env.log" | jq -r .sha256) || fail "exec with TETRIS_MODEL=$ref: $(tail -3 "$WORK/env.log")"
[ "$got" = "$want" ] || fail "TETRIS_MODEL=$ref: outputs $got, want $want"
[ -z "$(find "$WORK" -maxdepth 1 -name 'tetris-view.*')" ] || fail "a view was left behind"
echo "ok exec pulls $ref: the view is the pulled graph, every tensor the store's, outputs as private"

# ---- the pull fails: the file instead, with one line ----
missing="oci://$host/models/nothing:v1"
got=$(OUT="$WORK/fb" agent exec --store "$STORE" --model-ref "$missing" --model "$model" \
      -- "$WORK/cmd.sh" 2>"$WORK/fb.log" | jq -r .sha256) ||
    fail "exec falling back to the file: $(tail -3 "$WORK/fb.log")"
[ "$got" = "$want" ] || fail "fallback: outputs $got, want $want"
[ "$(grep -c 'event=fallback' "$WORK/fb.log")" = 1 ] ||
    fail "fallback: want one event=fallback line: $(grep event=fallback "$WORK/fb.log")"
grep "event=fallback" "$WORK/fb.log" | grep -q "reason=pull-failed.*fallback=.*hello_deepa.onnx" ||
    fail "fallback line: $(grep event=fallback "$WORK/fb.log")"
jq -e --arg m "$(realpath "$model")" '.model == $m and .ref == null and .shared == true' \
    "$WORK/fb.index" >/dev/null || fail "fallback view: $(jq -c '{model, ref, shared}' "$WORK/fb.index")"
echo "ok a failed pull falls back to the --model file, one event=fallback line"

# ---- no file to fall back to: exec fails, its command never starts ----
for case in "$missing:3:no such" "oci://127.0.0.1:9/models/hello:v1:1:not one this node may reach"; do
    r=${case%%:[0-9]:*} rest=${case#"$r":} code=${rest%%:*} msg=${rest#*:}
    rc=$(OUT="$WORK/none" status agent exec --store "$STORE" --model-ref "$r" -- "$WORK/cmd.sh")
    [ "$rc" = "$code" ] || fail "$r without a file: exec exited $rc, want $code: $(cat "$WORK/status.err")"
    [ ! -e "$WORK/none.check" ] || fail "$r without a file: the command ran"
    grep -q "$msg" "$WORK/status.err" || fail "$r: message: $(cat "$WORK/status.err")"
done
# A file that is not there is no fallback: the pull's reason stands.
rc=$(OUT="$WORK/none" status agent exec --store "$STORE" --model-ref "$missing" \
     --model "$WORK/no-such.onnx" -- "$WORK/cmd.sh")
[ "$rc" = 3 ] && grep -q "no such" "$WORK/status.err" && grep -q "event=no-fallback" "$WORK/status.err" ||
    fail "a missing fallback file: exit $rc: $(cat "$WORK/status.err")"
daemon_alive || fail "the daemon died"
echo "ok without a file a failed pull fails exec before its command (exit 3 not found, 1 denied)"

# ---- usage ----
[ "$(status agent exec --model "$ref" --model-ref "oci://$host/models/other:v1" -- true)" = 2 ] ||
    fail "two references: not a usage error"
[ "$(status agent exec --model-ref "oci://$host/Bad/Repo" -- true)" = 2 ] ||
    fail "a malformed reference: not a usage error"
grep -q "oci://" "$WORK/status.err" || fail "malformed reference: message: $(cat "$WORK/status.err")"
echo "ok two references, or a malformed one, are a usage error"

# ---- safetensors: `view` of a reference, read by the Python package ----
agent view --store "$STORE" "$sref" "$WORK/sview" >"$WORK/sview.out" 2>"$WORK/sview.log" ||
    fail "view of $sref: $(tail -3 "$WORK/sview.log")"
jq -e --arg ref "$sref" '.ref == $ref and .graph == null and
    (.model | endswith("/model.safetensors-header")) and
    ([.tensors[] | .shared] | all)' "$WORK/sview/tensors.json" >/dev/null ||
    fail "safetensors view: $(jq -c '{model, ref, graph, shared}' "$WORK/sview/tensors.json")"
# probe MODE OUT [ENV...]: view_probe.py's one line (it then waits for SIGTERM).
probe() {
    _mode=$1 _out=$2
    shift 2
    env "$@" /usr/bin/python3 "$ROOT/tests/langs/view_probe.py" "$_mode" >"$_out" 2>"$_out.err" &
    _pid=$!
    KILL_ON_EXIT="$KILL_ON_EXIT $_pid"
    wait_output $_pid "$_out" "view_probe.py $_mode" "$_out.err"
    kill -TERM $_pid
    wait $_pid 2>/dev/null || true
}
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    probe view "$WORK/py-view" TETRIS_MODEL_VIEW="$WORK/sview"
    probe private "$WORK/py-private" TETRIS_MODEL="$WORK/mlp.safetensors"
    [ "$(jq -r .sha256 "$WORK/py-view")" = "$(jq -r .sha256 "$WORK/py-private")" ] ||
        fail "the Python package reads other bytes from the pulled view"
    echo "ok a pulled safetensors model's view: the Python package reads the file's tensors"
else
    note "no numpy for /usr/bin/python3: the Python reader is not run"
fi
stop_daemon
echo "PASS $PROG"
