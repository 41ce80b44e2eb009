#!/bin/sh
# test-eval.sh - tetris-eval on a short trace: tensor sharing never costs
# memory (tetris <= tetris-ro on every application and trace), every policy
# covers a stable trace without SLO violations when the headroom is ample,
# the same seed gives the same results, and bad usage exits 2 with a message.
set -eu
. "$(dirname "$0")/../lib/common.sh"
EVAL="$BIN/tetris-eval"
PROFILES="$ROOT/deploy/profiles"

"$EVAL" --profiles "$PROFILES" --duration 300 --out "$WORK/a" >"$WORK/a.txt" 2>"$WORK/a.log" ||
    fail "evaluation failed: $(tail -1 "$WORK/a.log")"
[ "$(tail -n +2 "$WORK/a/results.tsv" | wc -l)" -eq 48 ] || fail "want 4 apps x 3 traces x 4 policies rows"
[ "$(find "$WORK/a" -name 'series-*.tsv' | wc -l)" -eq 48 ] || fail "want 48 series files"
# tetris (sharing) against tetris-ro (no sharing): mean, median and peak.
awk -F'\t' 'NR > 1 { k = $1 "/" $2; if ($3 == "tetris") { m[k] = $4; d[k] = $5; p[k] = $6 }
                     if ($3 == "tetris-ro") { rm[k] = $4; rd[k] = $5; rp[k] = $6 } }
    END { for (k in m) if (m[k] > rm[k] || d[k] > rd[k] || p[k] > rp[k] || m[k] <= 0) {
              print "sharing costs memory: " k; bad = 1 }
          exit bad }' "$WORK/a/results.tsv" || fail "tetris uses more memory than tetris-ro"
# Nothing failed to fit on the testbed.
awk -F'\t' 'NR > 1 && $11 != 0 { exit 1 }' "$WORK/a/results.tsv" || fail "instances left unplaced"

# Ample headroom on the stable trace: no violations for any policy.
"$EVAL" --profiles "$PROFILES" --duration 300 --traces stable --headroom 2 --out "$WORK/b" \
    >/dev/null 2>"$WORK/b.log" || fail "stable run failed: $(tail -1 "$WORK/b.log")"
awk -F'\t' 'NR > 1 && $7 != 0 { print; bad = 1 } END { exit bad }' "$WORK/b/results.tsv" ||
    fail "violations on the stable trace with ample headroom"

# Deterministic: the same seed, the same table.
"$EVAL" --profiles "$PROFILES" --duration 300 >"$WORK/c.txt" 2>/dev/null
cmp -s "$WORK/a.txt" "$WORK/c.txt" || fail "two runs with one seed differ"

# Usage.
"$EVAL" --help | grep -q '^Usage:' || fail "--help prints no usage"
"$EVAL" --version | grep -q '^tetris-eval ' || fail "--version"
for args in "--apps nope" "--traces" "--duration 0" "--mode fast" "--scale -1" "extra"; do
    set +e
    # shellcheck disable=SC2086
    "$EVAL" --profiles "$PROFILES" $args >/dev/null 2>"$WORK/err"
    rc=$?
    set -e
    [ $rc -eq 2 ] || fail "'$args': exit $rc, want 2"
    [ -s "$WORK/err" ] || fail "'$args': no message"
done
set +e
"$EVAL" --profiles "$WORK/none" --duration 5 >/dev/null 2>"$WORK/err"; rc=$?
set -e
[ $rc -eq 1 ] || fail "missing profiles: exit $rc, want 1"
grep -q 'level=error' "$WORK/err" || fail "missing profiles: no error line"
echo "ok eval"
