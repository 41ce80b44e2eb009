#!/bin/sh
# test-eval-decisions.sh - tetris-eval's decision log and prediction mode:
#  - --decisions writes one line per function, config and change, whose
#    placements and releases add up to the instances wanted;
#  - --function/--rate-trace/--node predict what tetris-autoscaler and the
#    scheduler with the extender do: an instance goes to the node whose
#    store holds its model (the extender's θ), one that no longer fits there
#    to the least allocated node (not the one busy with the other model), a
#    tie to the first node name; a scale-in removes pods as the ReplicaSet
#    controller does (the node with most pods of the Deployment first, ranked
#    once);
#  - a node's store keeps a model for the daemon's keep-alive after its last
#    instance there went, and the extender's θ sees it;
#  - bad prediction options exit 2 with a message.
set -eu
. "$(dirname "$0")/../lib/common.sh"
EVAL="$BIN/tetris-eval"

# 1. The paper's testbed: the log adds up.
"$EVAL" --profiles "$ROOT/deploy/profiles" --duration 300 --apps qa-text,svt \
    --decisions "$WORK/dec.tsv" >/dev/null 2>"$WORK/a.log" || fail "eval: $(tail -1 "$WORK/a.log")"
[ "$(head -1 "$WORK/dec.tsv")" = "$(printf 'time_s\tapp\ttrace\tpolicy\tfunction\tc\tb\tp\tfrom\tto\tplaced\treleased\tunplaced')" ] ||
    fail "header: $(head -1 "$WORK/dec.tsv")"
[ "$(wc -l <"$WORK/dec.tsv")" -gt 24 ] || fail "too few decisions: $(wc -l <"$WORK/dec.tsv")"
awk -F'\t' 'NR > 1 {
        k = $2 "/" $3 "/" $4 "/" $5 "/" $6 "/" $7 "/" $8
        if (($9 != have[k] + 0)) { print "from " $9 " but had " have[k] + 0 ": " $0; bad = 1 }
        np = $11 == "-" ? 0 : split($11, p, ","); nr = $12 == "-" ? 0 : split($12, r, ",")
        for (i = 1; i <= np; i++) if (p[i] !~ /^node-[1-8]$/) { print "node " p[i]; bad = 1 }
        if ($9 + np - nr + $13 != $10) { print "does not add up: " $0; bad = 1 }
        have[k] = $9 + np - nr
    } END { exit bad }' "$WORK/dec.tsv" || fail "the decision log does not add up"

# 2. Prediction: two functions of two models on three nodes of 8 CPUs.
cat >"$WORK/a.profile.yaml" <<YAML
tetris_profile: 1
model: vad
measured: false
configs:
- {c: 3, m_mib: 64, b: 1, p: 1, latency_ms: {mean: 10, p95: 10, p99: 10}, private_bytes: 33554432, shared_bytes: 2097152}
YAML
sed 's/model: vad/model: ocr/' "$WORK/a.profile.yaml" >"$WORK/b.profile.yaml"
printf '0 50\n10 250\n80 50\n150 50\n' >"$WORK/a.trace"
printf '0 50\n150 50\n' >"$WORK/b.trace"
predict() {
    "$EVAL" --function fa="$WORK/a.profile.yaml" --rate-trace fa="$WORK/a.trace" \
        --function fb="$WORK/b.profile.yaml" --rate-trace fb="$WORK/b.trace" \
        --slo-ms 50 --mode paper --interval 10 --decisions - "$@" 2>"$WORK/p.log" |
        cut -f1,5,9-12 | tail -n +2 | tr '\t' ' '
}
got=$(predict --node n1=8,32768,vad --node n2=8,32768,ocr --node n3=8,32768)
want="0 fa 0 1 n1 -
0 fb 0 1 n2 -
10 fa 1 3 n1,n3 -
130 fa 3 1 - n1,n1"
[ "$got" = "$want" ] || fail "prediction:
$got
want:
$want"
# No store holds anything at the start: equal scores and allocations go by
# node name, and a node holds a model once it runs an instance of it.
got=$(predict --node n2=8,32768 --node n3=8,32768 --node n1=8,32768)
want="0 fa 0 1 n1 -
0 fb 0 1 n2 -
10 fa 1 3 n1,n3 -
130 fa 3 1 - n1,n1"
[ "$got" = "$want" ] || fail "prediction without stores:
$got
want:
$want"

# 2b. The node daemon's keep-alive: after the scale-in at 130 node n1's store
# keeps fa's tensors (default 300 s), so the scale-out at 200 goes there
# first (θ = 1, least allocated); with --keep-alive 0 the reclaim pass has
# freed them and only n2 holds them.
printf '0 50\n10 250\n80 50\n200 250\n210 250\n' >"$WORK/k.trace"
keep() {
    "$EVAL" --function fa="$WORK/a.profile.yaml" --rate-trace fa="$WORK/k.trace" --slo-ms 50 \
        --mode paper --interval 10 --decisions - --node n1=8,32768 --node n2=8,32768 \
        --node n3=8,32768 "$@" 2>"$WORK/k.log" | awk -F'\t' '$1 == 200 { print $11 }'
}
[ "$(keep)" = "n1,n1" ] || fail "keep-alive: scale-out placed on $(keep), want n1,n1"
[ "$(keep --keep-alive 0)" = "n2,n1" ] ||
    fail "no keep-alive: scale-out placed on $(keep --keep-alive 0), want n2,n1"

# 3. Usage.
for args in "--node n1=8,1024" "--slo-ms 5" "--function x" "--function fa=$WORK/a.profile.yaml" \
    "--function fa=$WORK/a.profile.yaml --slo-ms 5 --node n1=8,1024 --decisions -" \
    "--rate-trace fa=$WORK/a.trace" "--node n1=8" "--node n1=x,1024" "--nodes 10 --decisions -"; do
    set +e
    # shellcheck disable=SC2086
    "$EVAL" $args >/dev/null 2>"$WORK/err"
    rc=$?
    set -e
    [ $rc -eq 2 ] || fail "'$args': exit $rc, want 2"
    [ -s "$WORK/err" ] || fail "'$args': no message"
done
predict --node n1=8,32768,bert >/dev/null || true
grep -q "model bert is no --function" "$WORK/p.log" || fail "unknown store model: $(cat "$WORK/p.log")"
echo "ok eval decisions" >&2
