#!/bin/sh
# tetris-profiler profile writes a valid profile for a small grid on a real
# model: one entry per config with latency, throughput and memory filled in,
# weights counted as shared when mapped from the store and private without
# it; the autoscaler accepts the file. Durations are tiny and no assertion
# looks at a time.
set -eu
. "$(dirname "$0")/../lib/common.sh"
need_models
model="$MODELS/silero_vad_v5.onnx"
store="$WORK/store"
mkdir -p "$store" "$WORK/logs"

"$BIN/tetris-profiler" profile "$model" c=1 b=1,2 p=1,2 --duration 0.3 --warmup 0.1 \
    --store "$store" --direct --name silero-vad --log-dir "$WORK/logs" \
    -o "$WORK/store.profile.yaml" 2>"$WORK/profile.log" || fail "profile (store) failed"
"$BIN/tetris-profiler" profile "$model" --grid "c=1 b=2 p=1" --duration 0.3 --warmup 0.1 \
    --private >"$WORK/private.profile.yaml" 2>"$WORK/private.log" || fail "profile (private) failed"

# Valid for the profile reader (tetris-autoscaler plan loads and checks it).
for f in store private; do
    "$BIN/tetris-autoscaler" plan --profile "$WORK/$f.profile.yaml" --rps 5 --slo-ms 60000 \
        >"$WORK/$f.plan.json" 2>"$WORK/plan.log" || fail "$f profile rejected: $(cat "$WORK/plan.log")"
    jq -e '.configs | length > 0' "$WORK/$f.plan.json" >/dev/null || fail "$f: empty plan"
done

y="$WORK/store.profile.yaml"
grep -q '^model: "silero-vad"$' "$y" || fail "model name not in profile"
grep -q '^model_file: "silero_vad_v5.onnx"$' "$y" || fail "model file not in profile"
grep -q '^measured: true$' "$y" || fail "not marked measured"
grep -q '^source: "tetris-profiler ' "$y" || fail "no source"
[ "$(grep -c '^- {c: ' "$y")" = 4 ] || fail "want 4 configs: $(cat "$y")"
for cfg in "b: 1, p: 1" "b: 1, p: 2" "b: 2, p: 1" "b: 2, p: 2"; do
    line=$(grep "$cfg," "$y") || fail "config $cfg missing"
    # Every measured quantity is there and positive.
    for key in "mean" "p95" "p99" "throughput_rps" "private_bytes" "shared_bytes" "m_mib"; do
        v=$(printf '%s\n' "$line" | sed -n "s/.*[{ ]$key: \([0-9.e+]*\).*/\1/p")
        [ -n "$v" ] || fail "$cfg: no $key in $line"
        awk -v v="$v" 'BEGIN { exit !(v > 0) }' || fail "$cfg: $key is $v"
    done
    p95=$(printf '%s\n' "$line" | sed -n 's/.*p95: \([0-9.]*\).*/\1/p')
    p99=$(printf '%s\n' "$line" | sed -n 's/.*p99: \([0-9.]*\).*/\1/p')
    awk -v a="$p95" -v b="$p99" 'BEGIN { exit !(a <= b) }' || fail "$cfg: p95 $p95 > p99 $p99"
done
# Mapped from the store: shared bytes are the weights, m covers both.
shared=$(sed -n 's/.*shared_bytes: \([0-9]*\).*/\1/p' "$y" | sort -u)
[ "$(printf '%s\n' "$shared" | wc -l)" = 1 ] || fail "shared bytes differ between configs"
[ "$shared" -gt 1000000 ] || fail "shared bytes $shared: weights not from the store"
grep -q 'shared_bytes: 0}' "$WORK/private.profile.yaml" || fail "private run reports shared bytes"
grep -q 'weights private' "$WORK/private.profile.yaml" || fail "private run not said in source"

# The function processes ran with the config in their environment.
grep -q 'batch=2 concurrency=2' "$WORK"/logs/function-*.log || fail "b=2 p=2 never started"
# Not a terminal: no progress bar; and no cgroup left behind.
if grep -q "$(printf '\r')" "$WORK/profile.log"; then fail "progress bar without a terminal"; fi
if grep -q 'CPU limited by cgroup quota' "$y"; then
    cgs=$(sed -n 's/.*event=cpu-limit cgroup=\([^ ]*\).*/\1/p' "$WORK/profile.log")
    [ "$(printf '%s\n' "$cgs" | wc -l)" = 4 ] || fail "want a cgroup per config: $cgs"
    for cg in $cgs; do
        [ ! -d "$cg" ] || fail "cgroup left behind: $cg"
    done
    echo "ok profile with a cgroup CPU quota"
else
    grep -q 'event=no-cpu-limit' "$WORK/profile.log" || fail "no CPU limit and no warning"
    echo "ok profile without a writable cpu cgroup (warned)"
fi
echo "ok profile: 4 configs, store and private, valid for tetris-autoscaler"
