#!/bin/sh
# test-bench-map.sh - tetris-bench-map maps every tensor of a manifest from a
# store, touches every page and reports sizes that match the manifest; a
# tensor missing from the store or bad usage gives a clear error and a
# non-zero exit. Uses a synthetic bert-tiny model (~17 MB) in a temp store.
set -eu

BIN="${TETRIS_BIN:?TETRIS_BIN must name the directory of the programs under test}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

model="$TMP/tiny.safetensors"
"$BIN/tetris-synth-model" --seed 3 -o "$model" bert-tiny >/dev/null 2>"$TMP/log"
"$BIN/tetris-agent" index "$model" -o "$TMP/tiny.json" 2>>"$TMP/log"
mkdir "$TMP/store"
"$BIN/tetris-agent" load --direct --store "$TMP/store" --manifest "$TMP/tiny.json" "$model" \
    >"$TMP/load.json" 2>>"$TMP/log"
[ "$(jq -r .fell_back "$TMP/load.json")" = false ] || fail "direct load fell back: $(cat "$TMP/load.json")"

"$BIN/tetris-bench-map" --store "$TMP/store" --manifest "$TMP/tiny.json" >"$TMP/map.json" 2>>"$TMP/log" ||
    fail "tetris-bench-map failed: $(tail -1 "$TMP/log")"
jq -e --slurpfile m "$TMP/tiny.json" '
    .tensors == ($m[0].tensors | length) and .bytes == $m[0].tensor_bytes and
    .map_ms >= 0 and .touch_ms >= 0 and .vm_pte_kb > 0 and
    .anon_huge_kb == 0 and (.shmem_pmd_kb | type) == "number" and (.file_pmd_kb | type) == "number"
' "$TMP/map.json" >/dev/null || fail "report does not match the manifest: $(cat "$TMP/map.json")"

# A model whose tensors are not in the store: exit 1 with an error line.
"$BIN/tetris-synth-model" --seed 4 -o "$TMP/other.safetensors" bert-tiny >/dev/null 2>>"$TMP/log"
"$BIN/tetris-agent" index "$TMP/other.safetensors" -o "$TMP/other.json" 2>>"$TMP/log"
set +e
"$BIN/tetris-bench-map" --store "$TMP/store" --manifest "$TMP/other.json" >"$TMP/out" 2>"$TMP/err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "missing tensors: exit $rc, want 1"
grep -q 'level=error' "$TMP/err" || fail "missing tensors: no error line"
[ ! -s "$TMP/out" ] || fail "missing tensors: a report was printed"

# Bad usage and bad input.
set +e
"$BIN/tetris-bench-map" --store "$TMP/store" >/dev/null 2>&1; rc_usage=$?
"$BIN/tetris-bench-map" --store "$TMP/nostore" --manifest "$TMP/tiny.json" >/dev/null 2>&1; rc_nostore=$?
printf '{"tensors": [' >"$TMP/bad.json"
"$BIN/tetris-bench-map" --store "$TMP/store" --manifest "$TMP/bad.json" >/dev/null 2>&1; rc_bad=$?
set -e
[ $rc_usage -eq 2 ] || fail "no --manifest: exit $rc_usage, want 2"
[ $rc_nostore -eq 1 ] || fail "no store: exit $rc_nostore, want 1"
[ $rc_bad -eq 1 ] || fail "truncated manifest: exit $rc_bad, want 1"
echo "ok bench-map"
