#!/bin/sh
# test-plan.sh - `tetris-autoscaler plan`: DTS and --exact on hand-checked
# profiles, how sharing-aware DTS changes the choice, and clear errors with
# the documented exit codes for an infeasible SLO and bad input.
set -eu
. "$(dirname "$0")/../lib/common.sh"
here="$ROOT/tests/autoscaler"
bin="$BIN/tetris-autoscaler"

# plan ARGS... -> compact summary "b/p/count ..." plus total memory
summary() {
    "$bin" plan "$@" | jq -r '[(.configs[] | "\(.b)/\(.p)/\(.count)"), (.memory_mib * 1000 | round / 1000 | tostring)] | join(" ")'
}

# DTS takes A (100 rps / 100 MiB) until 450 rps are covered: 5 instances.
got=$(summary --profile "$here/two-configs.profile.yaml" --rps 450 --slo-ms 50)
[ "$got" = "1/1/5 500" ] || fail "dts 450 rps: $got"
out=$("$bin" plan --profile "$here/two-configs.profile.yaml" --rps 450 --slo-ms 50)
[ "$(echo "$out" | jq -r '.algorithm, .instances, .covered_rps, .configs[0].l, .configs[0].m, .configs[0].c')" = "dts
5
500
10
100
1" ] || fail "plan fields: $out"
echo "$out" | jq -e '.decision_time_ms >= 0' >/dev/null || fail "no decision time"

# An SLO of 39 ms rules out B (b=2 needs l <= 19.5), so nothing changes; an
# SLO of 15 ms leaves only A; 9 ms leaves nothing: exit 2 and the reason.
got=$(summary --profile "$here/two-configs.profile.yaml" --rps 450 --slo-ms 15)
[ "$got" = "1/1/5 500" ] || fail "slo 15: $got"
rc=0
"$bin" plan --profile "$here/two-configs.profile.yaml" --rps 450 --slo-ms 9 2>"$WORK/err" || rc=$?
[ $rc -eq 3 ] || fail "infeasible SLO: exit $rc"
grep -q "no config meets the SLO of 9 ms" "$WORK/err" || fail "infeasible message: $(cat "$WORK/err")"

# Sharing-aware DTS: 2 X (800 MiB) without sharing; with it, X pays the
# tensors first and then Y is cheaper: 1 X + 2 Y = 100 + 40 + 300 = 440 MiB.
got=$(summary --profile "$here/sharing.profile.yaml" --rps 200 --slo-ms 100)
[ "$got" = "1/4/2 800" ] || fail "no sharing: $got"
got=$(summary --profile "$here/sharing.profile.yaml" --rps 200 --slo-ms 100 --sharing)
[ "$got" = "1/4/1 1/1/2 440" ] || fail "sharing: $got"
got=$(summary --profile "$here/sharing.profile.yaml" --rps 200 --slo-ms 100 --sharing --resident)
[ "$got" = "1/1/4 80" ] || fail "sharing, resident: $got"
# The optimum with sharing is 4 Y (380 MiB); DTS is within 16% of it.
out=$("$bin" plan --profile "$here/sharing.profile.yaml" --rps 200 --slo-ms 100 --sharing --exact)
[ "$(echo "$out" | jq -r '.algorithm, .optimal, .memory_mib, .shared_mib')" = "ilp
true
380
300" ] || fail "exact with sharing: $out"

# The m + alpha*c variant: at 1000 MiB per CPU, A ranks 100/1100 and B
# 200/1300, so B wins: 3 B (900 MiB, 3 CPUs) instead of 5 A (500 MiB, 5 CPUs).
got=$(summary --profile "$here/two-configs.profile.yaml" --rps 450 --slo-ms 50 --alpha 1000)
[ "$got" = "2/2/3 900" ] || fail "alpha: $got"

# Restricted spaces, for the baselines: batching only (p=1) leaves A (b=1,
# p=1) and excludes B (p=2); concurrency only (b=1) likewise. With B out at
# 1000 MiB per CPU, A it is.
got=$(summary --profile "$here/two-configs.profile.yaml" --rps 450 --slo-ms 50 --alpha 1000 --space batching)
[ "$got" = "1/1/5 500" ] || fail "batching only: $got"
got=$(summary --profile "$here/two-configs.profile.yaml" --rps 450 --slo-ms 50 --alpha 1000 --space concurrency)
[ "$got" = "1/1/5 500" ] || fail "concurrency only: $got"
[ "$("$bin" plan --profile "$here/two-configs.profile.yaml" --rps 1 --slo-ms 50 --space batching | jq -r .space)" = batching ] ||
    fail "space not reported"

# The refined mode: capacity from measured throughput, one config for all
# instances (equal shares), never more memory than the paper's plan when
# that plan is itself feasible at equal shares; the ILP agrees with it.
cat >"$WORK/measured.yaml" <<YAML
tetris_profile: 1
model: m
measured: true
configs:
- {c: 1, m_mib: 100, b: 1, p: 1, latency_ms: {mean: 100, p95: 100, p99: 100}, throughput_rps: 8}
- {c: 1, m_mib: 150, b: 1, p: 2, latency_ms: {mean: 100, p95: 100, p99: 100}, throughput_rps: 18}
YAML
refined="$("$bin" plan --profile "$WORK/measured.yaml" --rps 30 --slo-ms 200 --mode refined)" ||
    fail "refined plan failed"
printf '%s' "$refined" | jq -e '.mode == "refined" and (.configs | length) == 1
    and .covered_rps >= 30 and all(.configs[]; .capacity_rps * .count >= 30)
    and (.configs[0].capacity_rps == 8 or .configs[0].capacity_rps == 18)' >/dev/null ||
    fail "refined plan: $refined"
exact="$("$bin" plan --profile "$WORK/measured.yaml" --rps 30 --slo-ms 200 --mode refined --exact)"
[ "$(printf '%s' "$exact" | jq .memory_mib)" = "$(printf '%s' "$refined" | jq .memory_mib)" ] ||
    fail "refined DTS $(printf '%s' "$refined" | jq .memory_mib) MiB, ILP $(printf '%s' "$exact" | jq .memory_mib)"
[ "$("$bin" plan --profile "$WORK/measured.yaml" --rps 30 --slo-ms 200 | jq -r .mode)" = paper ] ||
    fail "the paper's mode is not the default"

# Bad input: exit 1, bad usage: exit 2; both with a message naming the problem.
expect_exit() {
    want=$1; shift
    rc=0
    "$bin" "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
    [ $rc -eq "$want" ] || fail "$*: exit $rc, want $want"
    [ -s "$WORK/err" ] || fail "$*: no message"
}
expect_input() { expect_exit 1 "$@"; }
expect_usage() { expect_exit 2 "$@"; }
printf 'tetris_profile: 1\nmodel: x\nconfigs:\n  - {c: 1, m_mib: oops}\n' >"$WORK/bad.yaml"
expect_input plan --profile "$WORK/bad.yaml" --rps 1 --slo-ms 10
grep -q "bad.yaml:4: m_mib: 'oops' is not a number" "$WORK/err" || fail "bad yaml: $(cat "$WORK/err")"
printf 'model: [\n' >"$WORK/broken.yaml"
expect_input plan --profile "$WORK/broken.yaml" --rps 1 --slo-ms 10
grep -q "YAML" "$WORK/err" || fail "broken yaml: $(cat "$WORK/err")"
expect_input plan --profile "$WORK/missing.yaml" --rps 1 --slo-ms 10
expect_usage plan --profile "$here/two-configs.profile.yaml" --rps -3 --slo-ms 10
expect_usage plan --profile "$here/two-configs.profile.yaml" --rps 1
expect_usage plan --profile "$here/two-configs.profile.yaml" --rps 1 --slo-ms 10 --latency p50
expect_usage plan --profile "$here/two-configs.profile.yaml" --rps 1 --slo-ms 10 --resident
expect_usage plan --profile "$here/two-configs.profile.yaml" --rps 1 --slo-ms 10 --space both
expect_usage plan --profile "$here/two-configs.profile.yaml" --rps 1 --slo-ms 10 --mode best
grep -q "expected paper or refined" "$WORK/err" || fail "--mode best: $(cat "$WORK/err")"
expect_usage frobnicate
"$bin" --help | grep -q "exit status" || fail "--help"
"$bin" --version | grep -q "tetris-autoscaler" || fail "--version"
echo "ok: plan"
