#!/bin/sh
# Model views degrade, they don't fail: no store directory, a store without
# its daemon, a full store (daemon --capacity) and a private load each give
# a view whose graph is the original model, "shared": false and the
# fallback's reason, exit 0, and `exec` still runs its command with
# TETRIS_MODEL_VIEW, whose output is the model's. Bad inputs are refused
# with a message: a bad model (3), a view directory that is not empty or
# not ours (1), no command or no model (2).
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
# Views made without a directory (and one a SIGKILLed exec leaves) go here.
export TMPDIR="$WORK"
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"
model="$MODELS/silero_vad_v5.onnx"
abs=$(realpath "$model")
want=$("$BIN/tetris-onnx-run" "$model" --private 2>/dev/null | jq -r .sha256)

# check NAME REASON [LOAD OPTIONS]: view and exec both fall back.
check() {
    name=$1 reason=$2
    shift 2
    rm -rf "$WORK/view"
    out=$("$BIN/tetris-agent" view "$@" "$model" "$WORK/view" 2>"$WORK/err") ||
        fail "$name: view exited $?: $(cat "$WORK/err")"
    printf '%s\n' "$out" | jq -e --arg r "$reason" '.shared == false and .fallback == $r' \
        >/dev/null || fail "$name: $out"
    jq -e --arg g "$abs" --arg r "$reason" --arg d "$(dirname "$abs")" '.graph == $g and
        .shared == false and .fallback == $r and .store == null and
        .session_options["session.model_external_initializers_file_folder_path"] == $d and
        all(.tensors[]; .shared == false and (.file == null or .file == $g))' \
        "$WORK/view/tensors.json" >/dev/null ||
        fail "$name: index: $(jq -c 'del(.tensors)' "$WORK/view/tensors.json")"
    [ ! -e "$WORK/view/model.onnx" ] || fail "$name: a model.onnx without anything shared"
    fallbacks=$(grep -c "event=fallback" "$WORK/err" || true)
    if [ "$reason" = private ]; then
        [ "$fallbacks" = 0 ] || fail "$name: $fallbacks fallback lines for a private load"
    else
        [ "$fallbacks" = 1 ] || fail "$name: $fallbacks fallback lines, want 1: $(cat "$WORK/err")"
    fi
    got=$("$BIN/tetris-agent" exec "$@" --model "$model" -- "$BIN/tetris-test-view-run" \
        2>"$WORK/err" | jq -r .sha256) || fail "$name: exec: $(cat "$WORK/err")"
    [ "$got" = "$want" ] || fail "$name: the command computed $got, the model $want: $(cat "$WORK/err")"
    echo "ok $name: graph is the original model, fallback $reason, the command still serves"
}

check "no store directory" store-unavailable --store "$WORK/missing"
check "no store directory, direct" store-unavailable --store "$WORK/missing" --direct
check "private" private --private
mkdir -p "$WORK/nodaemon"
"$BIN/tetris-agent" load --direct --store "$WORK/nodaemon" "$MODELS/hello_deepa.onnx" >/dev/null 2>&1 ||
    fail "cannot lay a store out"
check "no daemon" daemon-unavailable --store "$WORK/nodaemon"
mkdir -p "$WORK/small"
reclaimer_start "$WORK/small" "$WORK/daemon.log" --listen "" --capacity 4096 --interval 3600
check "full store" store-full --store "$WORK/small"

# A model with external data whose store is too small for all of it keeps
# the original graph: external data the store lacks resolves only there.
mkdir -p "$WORK/ext"
"$BIN/tetris-test-externalize" "$MODELS/ch_PP-OCRv4_rec_infer.onnx" "$WORK/ext/rec.onnx" >/dev/null ||
    fail "cannot externalize"
reclaimer_stop
mkdir -p "$WORK/half"
reclaimer_start "$WORK/half" "$WORK/daemon.log" --listen "" --capacity 1048576 --interval 3600
out=$("$BIN/tetris-agent" view --store "$WORK/half" "$WORK/ext/rec.onnx" "$WORK/view-ext" 2>"$WORK/err") ||
    fail "partly stored external data: $(cat "$WORK/err")"
jq -e --arg g "$WORK/ext/rec.onnx" '.graph == $g and .shared == false and .fallback == "store-full"' \
    "$WORK/view-ext/tensors.json" >/dev/null ||
    fail "partly stored external data: $(jq -c 'del(.tensors)' "$WORK/view-ext/tensors.json")"
want_ext=$("$BIN/tetris-onnx-run" "$WORK/ext/rec.onnx" --private 2>/dev/null | jq -r .sha256)
got=$("$BIN/tetris-test-view-run" "$WORK/view-ext" 2>"$WORK/err" | jq -r .sha256) ||
    fail "partly stored external data: view-run: $(cat "$WORK/err")"
[ "$got" = "$want_ext" ] || fail "partly stored external data: output differs"
"$BIN/tetris-agent" check-view "$WORK/view-ext" >/dev/null 2>"$WORK/err" ||
    fail "partly stored external data: check-view: $(cat "$WORK/err")"
echo "ok partly stored external data: the original graph, $(jq '[.tensors[] | select(.shared)] | length' "$WORK/view-ext/tensors.json") tensors listed in the store"

# ---- bad inputs ----
printf 'not a model' >"$WORK/bad.onnx"
[ "$(status "$BIN/tetris-agent" exec --private --model "$WORK/bad.onnx" -- true)" = 3 ] ||
    fail "a bad model: exit $(cat "$WORK/status.err")"
grep -q "event=error" "$WORK/status.err" || fail "a bad model: no message"
[ "$(status "$BIN/tetris-agent" view --private "$WORK/bad.onnx" "$WORK/bad-view")" = 3 ] ||
    fail "view of a bad model: not 3"
[ ! -e "$WORK/bad-view" ] || fail "a bad model left a view directory"
echo "ok a bad model: exit 3 with a message, no view"

mkdir -p "$WORK/full-dir"
echo x >"$WORK/full-dir/mine"
[ "$(status "$BIN/tetris-agent" exec --private --model "$model" --view-dir "$WORK/full-dir" -- true)" = 1 ] ||
    fail "a view directory that is not empty: accepted"
grep -q "not empty" "$WORK/status.err" || fail "not empty: no message: $(cat "$WORK/status.err")"
[ "$(cat "$WORK/full-dir/mine")" = x ] && [ "$(ls "$WORK/full-dir")" = mine ] ||
    fail "a refused view directory was changed"
mkdir -p "$WORK/other"
chown nobody "$WORK/other" 2>/dev/null || skip "cannot chown (not root)"
[ "$(status "$BIN/tetris-agent" exec --private --model "$model" --view-dir "$WORK/other" -- true)" = 1 ] ||
    fail "a view directory of another uid: accepted"
grep -q "belongs to uid" "$WORK/status.err" || fail "not ours: no message: $(cat "$WORK/status.err")"
ln -s "$WORK/empty-target" "$WORK/link"
mkdir -p "$WORK/empty-target"
[ "$(status "$BIN/tetris-agent" exec --private --model "$model" --view-dir "$WORK/link" -- true)" = 1 ] ||
    fail "a view directory that is a link: accepted"
[ -z "$(ls -A "$WORK/empty-target")" ] || fail "a link's target was written"
mkdir -p "$WORK/empty"
[ "$(status "$BIN/tetris-agent" exec --private --model "$model" --view-dir "$WORK/empty" -- \
    "$BIN/tetris-agent" check-view)" = 0 ] || fail "an empty view directory of ours: $(cat "$WORK/status.err")"
[ -d "$WORK/empty" ] && [ -z "$(ls -A "$WORK/empty")" ] || fail "a given directory was not left empty"
echo "ok view directories: not empty, another uid's, a link refused (exit 1); an empty one of ours used and left"

[ "$(status "$BIN/tetris-agent" exec --private --model "$model" --)" = 2 ] || fail "no CMD: not 2"
[ "$(status "$BIN/tetris-agent" exec --private --model "$model")" = 2 ] || fail "no --: not 2"
[ "$(status env -u TETRIS_MODEL "$BIN/tetris-agent" exec --private -- true)" = 2 ] || fail "no model: not 2"
grep -q TETRIS_MODEL "$WORK/status.err" || fail "no model: the message does not name TETRIS_MODEL"
[ "$(status "$BIN/tetris-agent" view --private "$model")" = 2 ] || fail "view without DIR: not 2"
echo "ok usage errors: no CMD, no --, no model, no DIR (exit 2)"
