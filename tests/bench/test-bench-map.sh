#!/bin/sh
# test-bench-map.sh - tetris-bench-map maps every tensor of a manifest from a
# store, touches every page and reports sizes that match the manifest; a
# tensor missing from the store or bad usage gives a clear error and a
# non-zero exit. Uses a synthetic bert-tiny model (~17 MB) in a temp store.
set -eu
. "$(dirname "$0")/../lib/common.sh"

model="$WORK/tiny.safetensors"
"$BIN/tetris-synth-model" --seed 3 -o "$model" bert-tiny >/dev/null 2>"$WORK/log"
"$BIN/tetris-agent" index "$model" -o "$WORK/tiny.json" 2>>"$WORK/log"
mkdir "$WORK/store"
"$BIN/tetris-agent" load --direct --store "$WORK/store" --manifest "$WORK/tiny.json" "$model" \
    >"$WORK/load.json" 2>>"$WORK/log"
[ "$(jq -r .fell_back "$WORK/load.json")" = false ] || fail "direct load fell back: $(cat "$WORK/load.json")"

"$BIN/tetris-bench-map" --store "$WORK/store" --manifest "$WORK/tiny.json" >"$WORK/map.json" 2>>"$WORK/log" ||
    fail "tetris-bench-map failed: $(tail -1 "$WORK/log")"
jq -e --slurpfile m "$WORK/tiny.json" '
    .tensors == ($m[0].tensors | length) and .bytes == $m[0].tensor_bytes and
    .map_ms >= 0 and .touch_ms >= 0 and .vm_pte_kb > 0 and
    .anon_huge_kb == 0 and (.shmem_pmd_kb | type) == "number" and (.file_pmd_kb | type) == "number"
' "$WORK/map.json" >/dev/null || fail "report does not match the manifest: $(cat "$WORK/map.json")"

# A model whose tensors are not in the store: exit 1 with an error line.
"$BIN/tetris-synth-model" --seed 4 -o "$WORK/other.safetensors" bert-tiny >/dev/null 2>>"$WORK/log"
"$BIN/tetris-agent" index "$WORK/other.safetensors" -o "$WORK/other.json" 2>>"$WORK/log"
set +e
"$BIN/tetris-bench-map" --store "$WORK/store" --manifest "$WORK/other.json" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "missing tensors: exit $rc, want 1"
grep -q 'level=error' "$WORK/err" || fail "missing tensors: no error line"
[ ! -s "$WORK/out" ] || fail "missing tensors: a report was printed"

# Bad usage and bad input.
set +e
"$BIN/tetris-bench-map" --store "$WORK/store" >/dev/null 2>&1; rc_usage=$?
"$BIN/tetris-bench-map" --store "$WORK/nostore" --manifest "$WORK/tiny.json" >/dev/null 2>&1; rc_nostore=$?
printf '{"tensors": [' >"$WORK/bad.json"
"$BIN/tetris-bench-map" --store "$WORK/store" --manifest "$WORK/bad.json" >/dev/null 2>&1; rc_bad=$?
set -e
[ $rc_usage -eq 2 ] || fail "no --manifest: exit $rc_usage, want 2"
[ $rc_nostore -eq 1 ] || fail "no store: exit $rc_nostore, want 1"
[ $rc_bad -eq 1 ] || fail "truncated manifest: exit $rc_bad, want 1"
echo "ok bench-map"
