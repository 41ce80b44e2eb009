#!/bin/sh
# device-bundle.sh - packs what tests/gpu/run-on-device.sh needs on a GPU
# machine that has a CUDA driver but none of this build's Debian packages:
# the programs (bin/), every shared library they load except glibc's own
# (lib/: the programs' RUNPATH names $ORIGIN/../lib, so they find them
# without LD_LIBRARY_PATH), curl and jq behind wrappers that point their
# loader at lib/ (tools/), and one real model (models/).
#
# usage: tests/gpu/device-bundle.sh DIR
# Run after `make`. Exit status: 0 packed, 1 something missing, 2 usage.
set -eu
[ $# = 1 ] || { echo "usage: tests/gpu/device-bundle.sh DIR" >&2; exit 2; }
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${TETRIS_BIN:-$ROOT/bin}"
MODELS="${TETRIS_MODELS:-$ROOT/.deps/models}"
out=$1
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/tools" "$out/models"

# libs_of FILE: the shared libraries FILE loads, glibc's own left out
# (the device's glibc is newer, and a second one cannot be mixed in).
libs_of() {
    ldd "$1" | awk '$3 ~ /^\// {print $3}' |
        grep -v -e '/libc\.so' -e '/libm\.so' -e '/libpthread\.so' -e '/libdl\.so' \
            -e '/librt\.so' -e '/ld-linux' || true
}

for p in tetris-gpu-check tetris-bench-gpu tetris-reclaimer tetris-test-gpu-importer \
    tetris-ingest-probe; do
    [ -x "$BIN/$p" ] || { echo "device-bundle: $BIN/$p missing (run make)" >&2; exit 1; }
    cp "$BIN/$p" "$out/bin/"
    for l in $(libs_of "$BIN/$p"); do cp -L "$l" "$out/lib/"; done
done
for t in curl jq; do
    path=$(command -v $t) || { echo "device-bundle: $t missing" >&2; exit 1; }
    cp "$path" "$out/tools/$t.bin"
    for l in $(libs_of "$path"); do cp -L "$l" "$out/lib/"; done
    printf '#!/bin/sh\nd=$(cd "$(dirname "$0")" && pwd)\nLD_LIBRARY_PATH="$d/../lib" exec "$d/%s.bin" "$@"\n' \
        "$t" >"$out/tools/$t"
    chmod +x "$out/tools/$t"
done
for m in ch_PP-OCRv4_rec_infer.onnx silero_vad_v5.onnx; do
    [ -f "$MODELS/$m" ] || { echo "device-bundle: $MODELS/$m missing (scripts/deps.sh)" >&2; exit 1; }
    cp "$MODELS/$m" "$out/models/"
done
echo "event=bundled dir=$out bytes=$(du -sb "$out" | cut -f1)" >&2
