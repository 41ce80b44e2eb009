#!/bin/sh
# test-derived-pages.sh - a derived form's files sit on 4 KiB pages even in
# a store on a tmpfs of 2 MiB pages (the chart's, --store-tmpfs huge;
# store.h STORE_PUBLISH_SMALL_PAGES): an instance on the form maps its data
# with no 2 MiB entry (ShmemPmdMapped 0 in its smaps), while a plain
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

# smaps_kb PID FILE FIELD: FIELD summed over PID's mappings of FILE (kB).
smaps_kb() {
    awk -v f="$2" -v k="$3:" '/^[0-9a-f]+-[0-9a-f]+ / { on = ($6 == f) }
        on && $1 == k { n += $2 } END { print n + 0 }' "/proc/$1/smaps"
}

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
held_end derived
[ "$rss" -ge 4096 ] || fail "the instance maps ${rss} kB of the form's data, want it mapped (>= 4 MiB)"
[ "$pmd" = 0 ] || fail "the form's data is on 2 MiB pages: ShmemPmdMapped ${pmd} kB of ${rss} kB mapped"
note "the form's data: ${rss} kB mapped, ShmemPmdMapped 0; plain tensors ${plain_pmd} kB"
stop_daemon
echo "derived form on 4 KiB pages: ok" >&2
