#!/bin/sh
# test-bad-models.sh - every malformed model file of the bad-input corpus
# (truncated files, header lengths past EOF, overlapping or out-of-range
# offsets, absurd shapes, dtype/length mismatches, garbage protobuf, ...)
# makes `tetris-agent index` and `tetris-agent load` fail with exit status 3
# and a message saying what is wrong, never a signal, writes no manifest,
# and leaves an existing store exactly as it was. The valid synthetic files
# index and load.
set -eu
. "$(dirname "$0")/../lib/common.sh"

# Every path, size, mode and content hash under the store.
store_listing() {
    (cd "$WORK/store" && find . -printf '%p %s %m\n' | sort &&
        find . -type f -exec sha256sum {} + | sort)
}

corpus="$WORK/corpus"
"$BIN/tetris-gen-model-corpus" --valid "$corpus" >"$WORK/cases"
mkdir "$WORK/store"
"$BIN/tetris-agent" load --direct --store "$WORK/store" "$corpus/valid-features.safetensors" \
    >"$WORK/load.json" 2>"$WORK/load.err" || fail "valid safetensors load: $(cat "$WORK/load.err")"
[ "$(jq -r .ingested_bytes "$WORK/load.json")" -gt 0 ] || fail "nothing ingested into the store"
store_listing >"$WORK/before"

n=0
while IFS="$(printf '\t')" read -r name expect; do
    file="$corpus/$name"
    if [ "$expect" = "-" ]; then
        "$BIN/tetris-agent" index "$file" -o "$WORK/$name.json" 2>"$WORK/err" ||
            fail "$name: valid file did not index: $(cat "$WORK/err")"
        jq -e '.tensors | length > 0' "$WORK/$name.json" >/dev/null ||
            fail "$name: manifest lists no tensors"
        continue
    fi
    rc=0
    "$BIN/tetris-agent" index "$file" -o "$WORK/out.json" >/dev/null 2>"$WORK/err" || rc=$?
    [ $rc -lt 128 ] || fail "$name: index killed by signal $((rc - 128))"
    [ $rc -eq 3 ] || fail "$name: index exit $rc, want 3 (bad model): $(cat "$WORK/err")"
    grep -qF -- "$expect" "$WORK/err" || fail "$name: index error lacks \"$expect\": $(cat "$WORK/err")"
    grep -qF -- "$name" "$WORK/err" || fail "$name: index error does not name the file"
    [ ! -e "$WORK/out.json" ] || fail "$name: index wrote a manifest"
    if ls "$WORK" | grep -q '^out\.json'; then fail "$name: index left a temporary manifest"; fi

    rc=0
    "$BIN/tetris-agent" load --direct --store "$WORK/store" "$file" >"$WORK/out" 2>"$WORK/err" || rc=$?
    [ $rc -lt 128 ] || fail "$name: load killed by signal $((rc - 128))"
    [ $rc -eq 3 ] || fail "$name: load exit $rc, want 3 (bad model): $(cat "$WORK/err")"
    grep -qF -- "$expect" "$WORK/err" || fail "$name: load error lacks \"$expect\": $(cat "$WORK/err")"
    n=$((n + 1))
done <"$WORK/cases"

[ $n -ge 30 ] || fail "only $n malformed files in the corpus"
store_listing | diff "$WORK/before" - || fail "malformed models changed the store"
echo "ok: $n malformed model files rejected with exit 3, store unchanged"
