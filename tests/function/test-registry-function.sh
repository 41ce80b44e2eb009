#!/bin/sh
# tetris-function with its model named by a registry reference, against a
# real registry (docker-registry on loopback) and a real daemon: the daemon
# pulls the model into the store and the function serves what a private run
# of the file computes, from the store's pages, named by the repository
# (--model-ref, or TETRIS_MODEL=oci://..., as an image without weights is
# configured). When the pull fails the TETRIS_MODEL file serves instead,
# with one event=fallback line; without a file the function exits non-zero
# with the reason (3: the registry has no such model, 1: a registry the
# node may not reach), as when the file is not there. A reference without
# a store to pull into needs a file (usage error otherwise); two
# references, or a malformed one, are a usage error.
set -eu
. "$(dirname "$0")/../lib/function.sh"
. "$(dirname "$0")/../lib/registry.sh"
registry_start
host="127.0.0.1:$REGISTRY_PORT"
model="$MODELS/hello_deepa.onnx"
ref="oci://$host/models/hello-deepa:v1"
"$BIN/tetris-registry" push "$model" "$ref" >"$WORK/push.out" 2>"$WORK/push.log" ||
    fail "push: $(cat "$WORK/push.log")"
store="$WORK/store"
mkdir -p "$store"
reclaimer_start "$store" "$WORK/daemon.log" --listen 127.0.0.1:0 --interval 3600 --registries "$host"
daemon="http://127.0.0.1:$RECLAIMER_PORT"
want=$(want_sha "$model" 7)

# served NAME WANT_MODEL: the function answers seed 7 as the private run,
# its ready line names WANT_MODEL and the model "hello-deepa".
served() {
    ready="$WORK/$1.ready"
    jq -e --arg m "$2" '.model == $m and .name == "hello-deepa"' "$ready" >/dev/null ||
        fail "$1: ready line $(cat "$ready")"
    got=$(fn_post "$(eval echo "\$FN_URL_$1")" '{"seed":7}')
    [ "${got%% *}" = 200 ] || fail "$1: $got"
    [ "$(printf '%s' "${got#* }" | jq -r .sha256)" = "$want" ] ||
        fail "$1: outputs differ from a private run: $got"
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$(eval echo "\$FN_URL_$1")/v2/models/hello-deepa/ready")" = 200 ] ||
        fail "$1: /v2/models/hello-deepa/ready is not 200"
}

# ---- pulled ----
fn_start pulled --store "$store" --model-ref "$ref"
served pulled "$ref"
jq -e '.fell_back == false and .shared_bytes > 0 and .mode == "store"' "$WORK/pulled.ready" >/dev/null ||
    fail "pulled: not served from the store: $(cat "$WORK/pulled.ready")"
[ "$(metric_at "$daemon" tetris_pull_tensors_total)" -gt 0 ] || fail "the daemon pulled nothing"
grep -q "event=pulled" "$WORK/pulled.log" || fail "pulled: no event=pulled line"
! grep -q "event=fallback" "$WORK/pulled.log" || fail "pulled: a pull that worked fell back"
kill -TERM "$FN_PID_pulled"
wait "$FN_PID_pulled" || fail "pulled: did not drain to 0"
# The environment an image without weights carries (its TETRIS_MODEL_REF),
# and a deployment's TETRIS_MODEL naming the same reference.
TETRIS_STORE="$store" TETRIS_MODEL="$ref" TETRIS_MODEL_REF="$ref" fn_start env
served env "$ref"
kill -TERM "$FN_PID_env"
wait "$FN_PID_env" || true
echo "ok the function pulls $ref (--model-ref and TETRIS_MODEL) and serves the private run's outputs"

# ---- the pull fails: the file serves, one line says why ----
missing="oci://$host/models/hello-deepa:nothing"
TETRIS_STORE="$store" TETRIS_MODEL="$model" TETRIS_MODEL_REF="$missing" fn_start fb
# The name stays the reference's, whichever serves.
jq -e --arg m "$model" '.model == $m and .name == "hello-deepa"' "$WORK/fb.ready" >/dev/null ||
    fail "fallback: ready line $(cat "$WORK/fb.ready")"
got=$(fn_post "$FN_URL_fb" '{"seed":7}')
[ "$(printf '%s' "${got#* }" | jq -r .sha256)" = "$want" ] || fail "fallback: $got"
[ "$(grep -c 'event=fallback' "$WORK/fb.log")" = 1 ] ||
    fail "fallback: want one event=fallback line: $(grep event=fallback "$WORK/fb.log")"
grep "event=fallback" "$WORK/fb.log" | grep -q "reason=pull-failed.*code=notfound" ||
    fail "fallback line: $(grep event=fallback "$WORK/fb.log")"
kill -TERM "$FN_PID_fb"
wait "$FN_PID_fb" || true
# No store to pull into, a file: private, with the same one line.
fn_start nostore --private --model-ref "$ref" --model "$model"
jq -e '.mode == "private"' "$WORK/nostore.ready" >/dev/null || fail "nostore: $(cat "$WORK/nostore.ready")"
[ "$(grep -c 'event=fallback reason=pull-failed' "$WORK/nostore.log")" = 1 ] ||
    fail "nostore: no fallback line: $(cat "$WORK/nostore.log")"
kill -TERM "$FN_PID_nostore"
wait "$FN_PID_nostore" || true
echo "ok a failed pull serves the TETRIS_MODEL file, one event=fallback line"

# ---- no file: a clear error, a non-zero exit ----
fn() { "$BIN/tetris-function" --listen 127.0.0.1:0 "$@"; }
[ "$(status fn --store "$store" --model-ref "$missing")" = 3 ] ||
    fail "a model the registry lacks: not exit 3: $(cat "$WORK/status.err")"
grep -q "event=error.*hello-deepa:nothing.*no such manifest" "$WORK/status.err" ||
    fail "a model the registry lacks: message: $(cat "$WORK/status.err")"
[ "$(status fn --store "$store" --model-ref "oci://127.0.0.1:9/models/hello-deepa:v1")" = 1 ] ||
    fail "an unlisted registry: not exit 1: $(cat "$WORK/status.err")"
grep -q "not one this node may reach" "$WORK/status.err" ||
    fail "an unlisted registry: message: $(cat "$WORK/status.err")"
[ "$(status fn --model-ref "$ref")" = 2 ] || fail "a reference without a store or a file: not usage"
grep -q "needs TETRIS_STORE" "$WORK/status.err" || fail "no store: message: $(cat "$WORK/status.err")"
[ "$(status fn --store "$store" --model "$ref" --model-ref "oci://$host/models/other:v1")" = 2 ] ||
    fail "two references: not usage"
# A fallback file that is not there (the webhook's TETRIS_MODEL in an
# image without weights): the pull's reason stands.
[ "$(status fn --store "$store" --model-ref "$missing" --model "$WORK/no-such.onnx")" = 3 ] ||
    fail "a missing fallback file: not exit 3: $(cat "$WORK/status.err")"
grep -q "no such manifest" "$WORK/status.err" && grep -q "event=no-fallback" "$WORK/status.err" ||
    fail "a missing fallback file: message: $(cat "$WORK/status.err")"
[ "$(status fn --store "$store" --model-ref "oci://$host/Models/x")" = 2 ] ||
    fail "a malformed reference: not usage"
kill -0 "$RECLAIMER_PID" || fail "the daemon died"
echo "ok without a file: exit 3 (not in the registry), 1 (registry not allowed), 2 (usage)"
reclaimer_stop
echo "PASS $PROG"
