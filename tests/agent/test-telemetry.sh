#!/bin/sh
# ONNX Runtime's telemetry stays off in tetris's programs: ONNX Runtime
# 1.29 keeps a device id and its events in a SQLite database under
# $HOME/.cache/Microsoft/DeveloperTools/.onnxruntime at every start (and
# may upload them); tetris-onnx-run, in store and private mode, and
# tetris-function serving a request leave no such directory, while the same
# tetris-onnx-run with ORT_DISABLE_TELEMETRY=0 (the user's explicit choice,
# kept) writes it: ONNX Runtime's default, so the check can fail.
# ONNX Runtime also keeps quiet when a CI system's variable is set (CI,
# GITHUB_ACTIONS, ...): the test unsets them, so both halves run as on a
# node, not as in a pipeline.
set -eu
. "$(dirname "$0")/../lib/function.sh"
HOME="$WORK/home"
export HOME
mkdir -p "$HOME"
unset ORT_DISABLE_TELEMETRY ORT_RUNNING_UNIT_TESTS CI TF_BUILD GITHUB_ACTIONS \
    GITLAB_CI CIRCLECI TRAVIS JENKINS_URL CODEBUILD_BUILD_ID BUILDKITE \
    TEAMCITY_VERSION APPVEYOR BITBUCKET_BUILD_NUMBER \
    SYSTEM_TEAMFOUNDATIONCOLLECTIONURI
written="$HOME/.cache/Microsoft/DeveloperTools/.onnxruntime"
model="$MODELS/ch_ppocr_mobile_v2.0_cls_infer.onnx"
store="$WORK/store"
mkdir -p "$store"
reclaimer_start "$store" "$WORK/daemon.log" --listen "" --interval 3600

"$BIN/tetris-onnx-run" "$model" --store "$store" >"$WORK/store.json" 2>"$WORK/store.log" ||
    fail "tetris-onnx-run (store): $(tail -n 3 "$WORK/store.log")"
jq -e '.mode == "store" and .shared_bytes > 0' "$WORK/store.json" >/dev/null ||
    fail "tetris-onnx-run did not run from the store: $(cat "$WORK/store.json")"
"$BIN/tetris-onnx-run" "$model" --private >/dev/null 2>"$WORK/private.log" ||
    fail "tetris-onnx-run (private): $(tail -n 3 "$WORK/private.log")"
fn_start fn --model "$model" --store "$store"
got=$(fn_post "$FN_URL_fn" '{"seed":1}')
[ "${got%% *}" = 200 ] || fail "tetris-function: $got"
kill -TERM "$FN_PID_fn"
wait "$FN_PID_fn" || fail "tetris-function exited $? on SIGTERM"
[ ! -e "$HOME/.cache/Microsoft" ] ||
    fail "ONNX Runtime's telemetry wrote $(find "$HOME/.cache/Microsoft" -type f | tr '\n' ' ')"
note "tetris-onnx-run (store, private) and tetris-function: no telemetry database"

ORT_DISABLE_TELEMETRY=0 "$BIN/tetris-onnx-run" "$model" --private >/dev/null 2>&1 ||
    fail "tetris-onnx-run with ORT_DISABLE_TELEMETRY=0 failed"
[ -e "$written/onnxruntime.db" ] ||
    fail "ONNX Runtime with its telemetry on wrote no $written/onnxruntime.db: is it still there?"
note "ORT_DISABLE_TELEMETRY=0 kept: ONNX Runtime writes $written/onnxruntime.db"
echo "ok $PROG"
