#!/bin/sh
# test-eval.sh - tetris-eval on a short trace: tensor sharing never costs
# memory (tetris <= tetris-ro on every application and trace), every policy
# covers a stable trace without SLO violations when the headroom is ample,
# the same seed gives the same results, fine-tuned variants pay their base's
# shared layers once (sharing.tsv), and bad usage exits 2 with a message.
# The scale mode on 20 nodes x 50 functions: sharing never costs memory
# (nor do shared bases of fine-tuned variants, --bases), one
# decision per function per interval for every policy, nothing unplaced,
# DTS never beats a proved optimum (and the refined mode is exact), the same
# sampled decisions in both plan modes, the same seed the same figures.
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

# Fine-tuned variants share their base's layers: QA-Text's three BERT-base
# variants cost more under tetris when sharing.tsv says they share nothing.
mkdir "$WORK/unshared"
cp "$PROFILES"/*.profile.yaml "$WORK/unshared/"
awk -F'\t' -v OFS='\t' '{ $3 = 0; print }' "$PROFILES/sharing.tsv" >"$WORK/unshared/sharing.tsv"
for d in "$PROFILES" "$WORK/unshared"; do
    "$EVAL" --profiles "$d" --duration 300 --apps qa-text --traces stable --out "$WORK/v" \
        >/dev/null 2>"$WORK/v.log" || fail "qa-text failed: $(tail -1 "$WORK/v.log")"
    awk -F'\t' '$3 == "tetris" { print $4 }' "$WORK/v/results.tsv" >>"$WORK/v.mib"
done
awk 'NR == 1 { a = $1 } NR == 2 { b = $1 } END { exit !(a < b) }' "$WORK/v.mib" ||
    fail "variants sharing their base cost no less memory: $(tr '\n' ' ' <"$WORK/v.mib")"
# A bad or missing sharing table: exit 1 with a message naming the line.
printf 'bert-base-ft1\tbert-base\tmany\t437627480\n' >"$WORK/unshared/sharing.tsv"
set +e
"$EVAL" --profiles "$WORK/unshared" --duration 5 --apps qa-text >/dev/null 2>"$WORK/err"; rc=$?
set -e
[ $rc -eq 1 ] || fail "bad sharing.tsv: exit $rc, want 1"
grep -q 'sharing.tsv:1: expected' "$WORK/err" || fail "bad sharing.tsv: $(cat "$WORK/err")"
rm "$WORK/unshared/sharing.tsv"
set +e
"$EVAL" --profiles "$WORK/unshared" --duration 5 --apps qa-text >/dev/null 2>"$WORK/err"; rc=$?
set -e
[ $rc -eq 1 ] || fail "missing sharing.tsv: exit $rc, want 1"
grep -q 'sharing.tsv' "$WORK/err" || fail "missing sharing.tsv: $(cat "$WORK/err")"
"$EVAL" --profiles "$WORK/unshared" --duration 5 --apps ss >/dev/null 2>"$WORK/err" ||
    fail "an application without variants needs no sharing.tsv: $(cat "$WORK/err")"

# Deterministic: the same seed, the same table.
"$EVAL" --profiles "$PROFILES" --duration 300 >"$WORK/c.txt" 2>/dev/null
cmp -s "$WORK/a.txt" "$WORK/c.txt" || fail "two runs with one seed differ"

# Scale mode, tiny: 20 nodes x 50 functions, 300 s, a decision every 10 s.
"$EVAL" --profiles "$PROFILES" --nodes 20 --functions 50 --duration 300 --gap-samples 20 \
    --out "$WORK/s" >"$WORK/s.txt" 2>"$WORK/s.log" || fail "scale mode failed: $(tail -1 "$WORK/s.log")"
[ "$(tail -n +2 "$WORK/s/scale.tsv" | wc -l)" -eq 4 ] || fail "want 4 policy rows in scale.tsv"
[ "$(tail -n +2 "$WORK/s/scale-gap.tsv" | wc -l)" -eq 8 ] || fail "want 2 modes x 4 policies in scale-gap.tsv"
awk -F'\t' 'NR > 1 { m[$1] = $4; p[$1] = $5
        if ($2 != 20 || $3 != 50 || $11 != 50 * 30 || $12 > $11 || $10 != 0 || $6 < 0 || $6 > 1 ||
            $9 < 50 || $4 <= 0) { print "bad row: " $0; bad = 1 } }
    END { if (m["tetris"] > m["tetris-ro"] || p["tetris"] > p["tetris-ro"]) { print "sharing costs memory"; bad = 1 }
          exit bad }' "$WORK/s/scale.tsv" || fail "scale.tsv invariants"
awk -F'\t' 'NR > 1 { if ($3 < 1 || $3 > 20 || $8 > $3) { print "bad counts: " $0; bad = 1 }
        if ($8 == $3 && ($7 < 1 - 1e-9 || $9 != 0)) { print "DTS below a proved optimum: " $0; bad = 1 }
        if ($1 == "refined" && $6 > 1 + 1e-6) { print "refined DTS not exact: " $0; bad = 1 }
        if ($1 == "paper") cases[$2] = $3; else if (cases[$2] != $3) { print "modes differ: " $0; bad = 1 } }
    END { exit bad }' "$WORK/s/scale-gap.tsv" || fail "scale-gap.tsv invariants"
grep -q '^DTS against the optimum' "$WORK/s.txt" || fail "no gap table printed"
"$EVAL" --profiles "$PROFILES" --nodes 20 --functions 50 --duration 300 --gap-samples 20 \
    --out "$WORK/s2" >/dev/null 2>&1 || fail "second scale run failed"
# Timing columns aside: scale.tsv's from cpu_s on, scale-gap.tsv's last two.
for x in scale.tsv:1-12 scale-gap.tsv:1-9; do
    cut -f"${x#*:}" "$WORK/s/${x%%:*}" >"$WORK/x1"
    cut -f"${x#*:}" "$WORK/s2/${x%%:*}" >"$WORK/x2"
    cmp -s "$WORK/x1" "$WORK/x2" || fail "two scale runs with one seed differ (${x%%:*})"
done
# Variants of shared bases (--bases): the same functions and rates, so the
# baselines (no store) are unchanged (timing columns aside), and tetris pays each base's layers
# once per node for all its variants there: less memory than when every
# function is its own model.
"$EVAL" --profiles "$PROFILES" --nodes 20 --functions 50 --duration 300 --gap-samples 0 \
    --out "$WORK/s0" >/dev/null 2>"$WORK/s0.log" || fail "scale, no bases: $(tail -1 "$WORK/s0.log")"
"$EVAL" --profiles "$PROFILES" --nodes 20 --functions 50 --duration 300 --gap-samples 0 \
    --bases 2 --out "$WORK/sb" >"$WORK/sb.txt" 2>"$WORK/sb.log" ||
    fail "scale, --bases 2: $(tail -1 "$WORK/sb.log")"
grep -q 'variants of 2 bases per model' "$WORK/sb.txt" || fail "--bases not in the heading"
awk -F'\t' 'FNR == 1 { file++; next }
    { m[file, $1] = $4; r = $1; for (i = 2; i <= 12; i++) r = r "\t" $i; row[file, $1] = r }
    END { for (p in row) { split(p, k, SUBSEP); if (k[1] != 1 || k[2] == "tetris") continue
              if (row[1, k[2]] != row[2, k[2]]) { print "baseline " k[2] " moved"; bad = 1 } }
          if (!(m[2, "tetris"] < m[1, "tetris"])) { print "bases cost no less memory"; bad = 1 }
          exit bad }' "$WORK/s0/scale.tsv" "$WORK/sb/scale.tsv" ||
    fail "--bases: $(cut -f1,4 "$WORK/s0/scale.tsv" "$WORK/sb/scale.tsv" | tr '\n' ' ')"

# A cluster too small for its functions: reported, not a crash.
"$EVAL" --profiles "$PROFILES" --nodes 1 --functions 200 --duration 20 --gap-samples 0 \
    --out "$WORK/u" >/dev/null 2>"$WORK/u.log" || fail "small cluster failed: $(tail -1 "$WORK/u.log")"
grep -q 'event=unplaced' "$WORK/u.log" || fail "unplaced instances not reported"
awk -F'\t' 'NR > 1 && $10 == 0 { exit 1 }' "$WORK/u/scale.tsv" || fail "unplaced not counted"

# Usage.
"$EVAL" --help | grep -qi '^usage:' || fail "--help prints no usage"
"$EVAL" --version | grep -q '^tetris-eval ' || fail "--version"
for args in "--apps nope" "--traces" "--duration 0" "--mode fast" "--scale -1" "extra" \
    "--nodes 0" "--functions x" "--gap-samples -1" "--keep-alive -1" "--keep-alive x" \
    "--bases 3" "--nodes 5 --bases x"; do
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
