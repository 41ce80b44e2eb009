#!/bin/sh
# tetris-agent is one file that runs in a foreign image: ldd names only
# glibc's libraries (and, in a sanitizer build, the sanitizer runtime), and
# `tetris-agent exec` works in a root that holds nothing but the binary,
# those libraries, the model and a store: its command (tetris-agent again,
# checking $TETRIS_MODEL_VIEW) sees a shared view.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
[ "$(id -u)" = 0 ] || skip "chroot needs root"
command -v unshare >/dev/null && unshare -m true 2>/dev/null || skip "no mount namespace (unshare -m)"
agent="$BIN/tetris-agent"

# The libraries ldd names; anything but glibc's (or the sanitizer
# runtime's, in a sanitizer build) fails the test.
ldd "$agent" >"$WORK/ldd.log" 2>&1 || fail "ldd $agent failed"
glibc='^(linux-vdso|libc|libm|libpthread|libdl|librt|ld-linux-x86-64|ld-linux-aarch64|ld-linux)\.so'
sanitizer='^(libasan|libubsan|libstdc\+\+|libgcc_s)\.so'
others=$(awk '{ print $1 }' "$WORK/ldd.log" | sed 's|.*/||' | grep -Ev "$glibc" || true)
if grep -q libasan "$WORK/ldd.log"; then
    others=$(printf '%s\n' "$others" | grep -Ev "$sanitizer" || true)
fi
[ -z "$others" ] || fail "tetris-agent needs more than glibc: $(printf '%s ' $others)"

root="$WORK/root"
mkdir -p "$root/store" "$root/tmp" "$root/proc"
cp "$agent" "$root/tetris-agent"
cp "$MODELS/silero_vad_v5.onnx" "$root/model.onnx"
# Each library at the path the dynamic loader looks it up by.
for lib in $(awk '/=>/ { print $3 } !/=>/ && $1 ~ /^\// { print $1 }' "$WORK/ldd.log"); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
files=$(find "$root" -type f | wc -l)
[ "$files" -le 12 ] || fail "the root holds more than expected: $(find "$root" -type f)"

# The command is tetris-agent itself: it finds the view in its environment.
unshare -m sh -c "mount -t proc proc '$root/proc' && exec chroot '$root' /tetris-agent exec --direct \
    --store /store --model /model.onnx -- /tetris-agent check-view" >"$WORK/out" 2>"$WORK/err.log" ||
    fail "exec in the root failed ($?)"
jq -e '.shared == true and .fallback == null and .shared_files > 0' "$WORK/out" >/dev/null ||
    fail "the command saw no shared view: $(cat "$WORK/out")"
[ -z "$(ls -A "$root/tmp")" ] || fail "the view was left in the root's /tmp: $(ls -A "$root/tmp")"
[ -n "$(ls -A "$root/store/public/tensors")" ] || fail "nothing was stored in the root's store"
echo "ok exec in a root of $files files (tetris-agent, its $(($files - 2)) libraries, the model): $(cat "$WORK/out")"
