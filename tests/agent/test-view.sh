#!/bin/sh
# Model views of every real model, through the real node daemon and with
# --direct: tensors.json is the contract (every shared tensor a link to its
# store file, offset 0, length = its bytes), check-view trusts the view, a
# runtime that knows only the view (tetris-test-view-run: ONNX Runtime on
# the graph's bytes with the view's session_options) computes what the
# original model computes privately, and while it holds its session the
# store's tensor files are what it maps. `view --hold` holds the
# references until released, then removes the view.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
[ -x "$BIN/tetris-reclaimer" ] || fail "tetris-reclaimer not built in $BIN"
daemon_store="$WORK/daemon-store"
direct_store="$WORK/direct-store"
mkdir -p "$daemon_store" "$direct_store"
reclaimer_start "$daemon_store" "$WORK/daemon.log" --listen "" --interval 3600

# check_index VIEW STORE_PUBLIC WHAT: the index against the files.
check_index() {
    ix="$1/tensors.json"
    jq -e '.format == "tetris-model-view/1" and .shared == true and .fallback == null and
        .graph == "model.onnx" and .model_format == "onnx" and (.tensors | length) > 0' \
        "$ix" >/dev/null || fail "$3: index header: $(jq -c 'del(.tensors)' "$ix")"
    [ "$(jq -r .store "$ix")" = "$2" ] || fail "$3: store is $(jq -r .store "$ix"), want $2"
    [ "$(jq -r '.session_options["session.model_external_initializers_file_folder_path"]' "$ix")" = "$2" ] ||
        fail "$3: external data folder is not the store"
    [ "$(stat -c %a "$1")" = 700 ] || fail "$3: view directory mode $(stat -c %a "$1")"
    [ "$(stat -c %a "$ix")" = 444 ] || fail "$3: tensors.json mode $(stat -c %a "$ix")"
    [ "$(stat -c %a "$1/model.onnx")" = 444 ] || fail "$3: model.onnx mode $(stat -c %a "$1/model.onnx")"
    # Every shared tensor: named by its digest, offset 0, length its size.
    jq -e '{"float32":4,"float16":2,"bfloat16":2,"float64":8,"int8":1,"uint8":1,"int16":2,
            "uint16":2,"int32":4,"uint32":4,"int64":8,"uint64":8,"bool":1} as $size |
        [.tensors[] | select(.shared)] | length > 0 and all(
            (.digest | ltrimstr("sha256:")) as $hex |
            .file == "tensors/\($hex[0:2])/\($hex)" and .offset == 0 and
            .length == reduce .shape[] as $d ($size[.dtype]; . * $d))' "$ix" >/dev/null ||
        fail "$3: a shared tensor's file, offset or length is wrong"
    # ... and its file a link to the store's file of that name, long enough.
    jq -r --arg store "$2" '.tensors[] | select(.shared) | "\(.file) \($store)/\(.file)"' "$ix" |
        sort -u >"$WORK/want-links"
    (cd "$1" && find tensors -type l -printf '%p %l\n') | sort >"$WORK/links"
    cmp -s "$WORK/want-links" "$WORK/links" ||
        fail "$3: the view's links are not the shared tensors': $(diff "$WORK/want-links" "$WORK/links" | head -5)"
    (cd "$1" && find -L tensors -type f -printf '%p %s\n') | sort >"$WORK/sizes"
    jq -r '.tensors[] | select(.shared) | "\(.file) \(.length)"' "$ix" | sort -u |
        join - "$WORK/sizes" | awk '$3 < $2 { bad++ } END { exit bad > 0 }' ||
        fail "$3: a store file is shorter than its tensor"
    "$BIN/tetris-agent" check-view "$1" >"$WORK/check.out" 2>"$WORK/check.err" ||
        fail "$3: check-view refused it: $(cat "$WORK/check.err")"
}

mkfifo "$WORK/hold.in"
for path in "$MODELS"/*.onnx; do
    m=$(basename "$path" .onnx)
    want=$("$BIN/tetris-onnx-run" "$path" --private --seed 7 2>"$WORK/err" | jq -r .sha256)
    [ -n "$want" ] || fail "$m: tetris-onnx-run --private: $(cat "$WORK/err")"
    for mode in daemon direct; do
        if [ $mode = daemon ]; then
            store=$daemon_store opt=""
        else
            store=$direct_store opt=--direct
        fi
        view="$WORK/view-$m-$mode"
        # shellcheck disable=SC2086
        out=$("$BIN/tetris-agent" view $opt --store "$store" "$path" "$view" 2>"$WORK/err") ||
            fail "$m $mode: view: $(cat "$WORK/err")"
        printf '%s\n' "$out" | jq -e '.shared == true and .fallback == null and .shared_bytes > 0' \
            >/dev/null || fail "$m $mode: $out"
        check_index "$view" "$store/public" "$m $mode"
        got=$("$BIN/tetris-test-view-run" --seed 7 "$view" 2>"$WORK/err" | jq -r .sha256) ||
            fail "$m $mode: view-run: $(cat "$WORK/err")"
        [ "$got" = "$want" ] || fail "$m $mode: the view computes $got, the model $want"
        # A session held on the view maps the store's files, and reads
        # them without writing: none of those pages became its own copy
        # (anonymous, copied on write: ONNX Runtime maps them MAP_PRIVATE).
        rm -f "$WORK/run.out"
        "$BIN/tetris-test-view-run" --seed 7 --hold "$view" <"$WORK/hold.in" >"$WORK/run.out" 2>"$WORK/run.err" &
        run=$!
        KILL_ON_EXIT="$KILL_ON_EXIT $run"
        exec 3>"$WORK/hold.in"
        wait_output $run "$WORK/run.out" "view-run --hold" "$WORK/run.err"
        maps=$(grep -c " $store/public/tensors/" "/proc/$run/maps" || true)
        dirty=$(awk -v p=" $store/public/tensors/" 'index($0, p) { f = 1; next }
            /^[0-9a-f]+-/ { f = 0 } f && /^Anonymous:/ { s += $2 } END { print s + 0 }' "/proc/$run/smaps")
        exec 3>&-
        wait $run || fail "$m $mode: view-run --hold exited non-zero"
        [ "$maps" -gt 0 ] || fail "$m $mode: the session maps none of the store's tensor files"
        [ "$dirty" = 0 ] || fail "$m $mode: $dirty kB of the store's pages copied into the session"
        echo "ok $m $mode: $(json_get "$out" shared_tensors) tensors shared, output $want, $maps store files mapped"
        rm -rf "$view"
    done
done

# External data: shared tensors point at the store, and the view computes
# the same; the external data file is the model's, not the view's.
mkdir -p "$WORK/ext"
src="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
"$BIN/tetris-test-externalize" "$src" "$WORK/ext/rec.onnx" >/dev/null || fail "cannot externalize $src"
want=$("$BIN/tetris-onnx-run" "$src" --private 2>/dev/null | jq -r .sha256)
"$BIN/tetris-agent" view --direct --store "$direct_store" "$WORK/ext/rec.onnx" "$WORK/view-ext" \
    >/dev/null 2>"$WORK/err" || fail "external data: view: $(cat "$WORK/err")"
check_index "$WORK/view-ext" "$direct_store/public" "external data"
got=$("$BIN/tetris-test-view-run" "$WORK/view-ext" 2>"$WORK/err" | jq -r .sha256) ||
    fail "external data: view-run: $(cat "$WORK/err")"
[ "$got" = "$want" ] || fail "external data: the view computes $got, the model $want"
echo "ok external data: every external tensor points at the store, output unchanged"

# --hold: a live holder (the daemon's, for our connection) exactly while
# held; the view goes when released.
live() { "$BIN/tetris-agent" inspect --store "$daemon_store" 2>/dev/null | grep -c " live " || true; }
[ "$(live)" = 0 ] || fail "$(live) live holders before --hold"
"$BIN/tetris-agent" view --store "$daemon_store" --hold "$MODELS/silero_vad_v6.onnx" "$WORK/held" \
    <"$WORK/hold.in" >"$WORK/held.out" 2>"$WORK/held.err" &
held=$!
KILL_ON_EXIT="$KILL_ON_EXIT $held"
exec 3>"$WORK/hold.in"
wait_output $held "$WORK/held.out" "view --hold" "$WORK/held.err"
[ -f "$WORK/held/tensors.json" ] || fail "view --hold: no view while held"
[ "$(live)" = 1 ] || fail "view --hold: $(live) live holders while held, want 1"
rss=$(awk '/^Rss:/ { print $2 }' "/proc/$held/smaps_rollup")
exec 3>&-
wait $held || fail "view --hold exited non-zero: $(cat "$WORK/held.err")"
[ ! -e "$WORK/held" ] || fail "view --hold: the view outlived the hold: $(ls -la "$WORK/held")"
wait_until 10 '[ "$(live)" = 0 ]' || fail "view --hold: the reference outlived the hold"
echo "ok view --hold: one live holder while held (rss ${rss} kB), view and reference gone after"
