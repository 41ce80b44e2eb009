#!/bin/sh
# verify re-hashes every stored tensor: a clean store passes (exit 0); one
# flipped byte in a tensor file is reported with exit 1.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
store="$WORK/store"
mkdir -p "$store"
"$BIN/tetris-agent" load --direct --store "$store" "$MODELS/hello_deepa.onnx" >/dev/null 2>&1 ||
    fail "direct load failed"
"$BIN/tetris-agent" verify --store "$store" >"$WORK/out" 2>/dev/null || fail "clean store: exit $?"
grep -q " 0 corrupt" "$WORK/out" || fail "clean store: $(cat "$WORK/out")"

victim=$(find "$store/public/tensors" -type f -size +4k | head -1)
[ -n "$victim" ] || fail "no tensor file to corrupt"
chmod u+w "$victim"
byte=$(od -An -tu1 -j100 -N1 "$victim" | tr -d ' ')
printf "\\$(printf '%03o' $(((byte + 1) % 256)))" | dd of="$victim" bs=1 seek=100 conv=notrunc 2>/dev/null
chmod 0444 "$victim"
rc=0
"$BIN/tetris-agent" verify --store "$store" >"$WORK/out" 2>"$WORK/err" || rc=$?
[ $rc -eq 1 ] || fail "corrupted store: exit $rc, want 1"
grep -q "^corrupt sha256:$(basename "$victim")" "$WORK/out" || fail "corrupt tensor not named: $(cat "$WORK/out")"
grep -q " 1 corrupt" "$WORK/out" || fail "expected exactly one corrupt tensor"
echo "ok verify names the corrupted tensor and exits 1"
