#!/bin/sh
# test-derived-pages.sh - a derived form's files sit on 4 KiB pages even in
# a store on a tmpfs of 2 MiB pages (the chart's, --store-tmpfs huge;
# store.h STORE_PUBLISH_SMALL_PAGES): an instance on the form maps its data
# with no 2 MiB entry (ShmemPmdMapped 0 in its smaps) and through no
# mapping khugepaged could collapse it through (THPeligible 0), nor when
# tetris-function opens it through a model view, nor its ORT-format part
# (PP-OCRv4 det's, mapped by the agent), while a plain
# tensor of the same store is mapped with 2 MiB ones (the store can, so
# the 0 says something); the form's answers are still stock ONNX
# Runtime's; a form larger than the daemon's bound on unverified bytes is
# made (the daemon hashes its own form: it is no pod's claim). The plain
# weights' model is synthetic; the form is PP-OCRv4 rec's (its data is
# over 10 MB: five 2 MiB ranges). Needs root (mount).
set -u
. "$(dirname "$0")/../lib/reclaimer.sh"
need_models
[ "$(id -u)" = 0 ] || skip "needs root to mount a tmpfs"
[ -r /sys/kernel/mm/transparent_hugepage/enabled ] || skip "no transparent huge pages here"
# The derivation child (uid 65534) reads the store's public directory by
# its name, as on a node, where the store's parents are 0755.
chmod 0711 "$WORK"
unmount_store() { umount "$STORE" 2>/dev/null || umount -l "$STORE" 2>/dev/null || true; }
at_exit unmount_store
mkdir -p "$STORE"
# A bound on unverified bytes far below the form's data (10 MB): the
# daemon's own form is no claim, so it is made all the same.
start_daemon --store-tmpfs huge --max-unverified-bytes 1048576
grep -q 'event=store-tmpfs state=mounted .*huge=within_size' "$DAEMON_LOG" ||
    skip "no 2 MiB tmpfs pages here: $(grep event=store-tmpfs "$DAEMON_LOG")"
pub="$STORE/public"

# --- the store maps plain tensors with 2 MiB entries -------------------------
synth "$WORK/m.safetensors" 2 4194304 9
held_start plain "$BIN/tetris-agent" load --store "$STORE" --direct --hold "$WORK/m.safetensors"
# Its only shared-memory mappings are the store's tensors.
plain_pmd=$(awk '/^ShmemPmdMapped:/ { print $2 }' "/proc/$HELD_PID/smaps_rollup")
held_end plain
[ "$plain_pmd" -ge 2048 ] ||
    skip "this kernel maps no 2 MiB store page with a 2 MiB entry (ShmemPmdMapped $plain_pmd kB)"
note "plain 4 MiB tensors: ShmemPmdMapped $plain_pmd kB"

# --- the form's data: 4 KiB pages ---------------------------------------------
m="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
stock=$("$BIN/tetris-onnx-run" "$m" --private --graph-opt all --prepack 2>/dev/null | jq -r .sha256)
"$BIN/tetris-onnx-run" "$m" --store "$STORE" --derived make >/dev/null 2>"$WORK/make.err" ||
    fail "make: $(tail -n 3 "$WORK/make.err")"
grep -q 'event=derive-requested .*result=made' "$WORK/make.err" ||
    fail "no form made: $(grep derive "$WORK/make.err")"
data_hex=$(jq -r '.data.digest' "$pub"/derived/* | sed 's/^sha256://')
data=$(realpath "$pub/tensors/$(echo "$data_hex" | cut -c1-2)/$data_hex")
[ -f "$data" ] || fail "the form's data file is not in the store: $data"
held_start derived "$BIN/tetris-onnx-run" "$m" --store "$STORE" --derived use --hold
[ "$(jq -r .derived "$WORK/derived.out")" = true ] || fail "the form was not used: $(cat "$WORK/derived.err")"
[ "$(jq -r .sha256 "$WORK/derived.out")" = "$stock" ] || fail "derived output differs from stock's"
rss=$(smaps_kb $HELD_PID "$data" Rss)
pmd=$(smaps_kb $HELD_PID "$data" ShmemPmdMapped)
eligible=$(smaps_kb $HELD_PID "$data" THPeligible)
held_end derived
[ "$rss" -ge 4096 ] || fail "the instance maps ${rss} kB of the form's data, want it mapped (>= 4 MiB)"
[ "$pmd" = 0 ] || fail "the form's data is on 2 MiB pages: ShmemPmdMapped ${pmd} kB of ${rss} kB mapped"
# ONNX Runtime maps the data itself; a mapping the kernel may back with
# 2 MiB pages would let khugepaged collapse the file onto them later.
[ "$eligible" = 0 ] ||
    fail "$eligible of the instance's mappings of the form's data are eligible for 2 MiB pages (THPeligible)"
note "the form's data: ${rss} kB mapped, ShmemPmdMapped 0, no mapping THPeligible; plain tensors ${plain_pmd} kB"

# --- a form's ORT-format part (PP-OCRv4 det's), which the agent maps ---------
m="$MODELS/ch_PP-OCRv4_det_infer.onnx"
"$BIN/tetris-onnx-run" "$m" --store "$STORE" --derived make >/dev/null 2>"$WORK/make-det.err" ||
    fail "make det: $(tail -n 3 "$WORK/make-det.err")"
ort_hex=$(jq -r 'select(.ort != null) | .ort.digest' "$pub"/derived/* | sed 's/^sha256://')
[ "$(echo "$ort_hex" | wc -w)" = 1 ] || fail "expected one form with an ORT-format part: $ort_hex"
ort=$(realpath "$pub/tensors/$(echo "$ort_hex" | cut -c1-2)/$ort_hex")
held_start det "$BIN/tetris-onnx-run" "$m" --store "$STORE" --derived use --hold
[ "$(jq -r .derived_ort "$WORK/det.out")" = true ] || fail "det's ORT-format part was not used: $(cat "$WORK/det.err")"
rss=$(smaps_kb $HELD_PID "$ort" Rss)
eligible=$(smaps_kb $HELD_PID "$ort" THPeligible)
held_end det
[ "$rss" -ge 2048 ] || fail "the instance maps ${rss} kB of det's ORT-format part, want it mapped (>= 2 MiB)"
[ "$eligible" = 0 ] || fail "the ORT-format part's mapping is eligible for 2 MiB pages (THPeligible)"
note "det's ORT-format part: ${rss} kB mapped, not THPeligible"

# --- a form through a model view, which tetris-function opens ---------------
# The agent's view links the store's files: the function opens them as the
# store's (ONNX Runtime 1.24 and later refuse links out of the folder), and
# no mapping of the form's data is eligible for 2 MiB pages either. Again
# without the bound on unverified bytes, so that the agent's whole model is
# shared and the view's form is the whole graph's (made here, `make`).
stop_daemon
start_daemon --store-tmpfs huge
m="$MODELS/ch_PP-OCRv4_rec_infer.onnx"
runtime=$(sed -n 's/.*event=derive-requested .*runtime="\([^"]*\)".*/\1/p' "$WORK/make.err" | head -n 1)
[ -n "$runtime" ] || fail "no runtime in $(cat "$WORK/make.err")"
# The view goes into the scratch directory, whatever becomes of exec.
TMPDIR="$WORK" "$BIN/tetris-agent" exec --store "$STORE" --derived make --runtime "$runtime" \
    --model "$m" --view-dir "$WORK/view" -- "$BIN/tetris-function" --listen 127.0.0.1:0 \
    >"$WORK/view.out" 2>"$WORK/view.err" &
exec_pid=$!
KILL_ON_EXIT="$KILL_ON_EXIT $exec_pid"
wait_output $exec_pid "$WORK/view.out" "exec tetris-function" "$WORK/view.err"
jq -e '.mode == "view" and .derived == true and .shared_bytes > 0' "$WORK/view.out" >/dev/null ||
    fail "the view's form was not used: $(cat "$WORK/view.out") $(tail -n 3 "$WORK/view.err")"
view_data=$(realpath "$WORK/view/$(jq -r .derived.data.file "$WORK/view/tensors.json")")
fn_pid=$(pgrep -P $exec_pid -x tetris-function) || fail "no tetris-function under exec"
size=$(smaps_kb "$fn_pid" "$view_data" Size)
eligible=$(smaps_kb "$fn_pid" "$view_data" THPeligible)
kill -TERM "$fn_pid"
wait "$exec_pid" || fail "exec tetris-function exited $? after SIGTERM: $(tail -n 3 "$WORK/view.err")"
[ "$size" -ge 4096 ] || fail "the view's function maps ${size} kB of the form's data, want it mapped (>= 4 MiB)"
[ "$eligible" = 0 ] ||
    fail "$eligible of the view's function's mappings of the form's data are eligible for 2 MiB pages"
note "through a model view: tetris-function on the form, $(jq .shared_bytes "$WORK/view.out") bytes shared, ${size} kB of the form's data mapped, not THPeligible"
stop_daemon
echo "derived form on 4 KiB pages: ok" >&2
