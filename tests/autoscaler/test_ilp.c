/* test_ilp.c - the exact integer program (GLPK): optima known by hand or by
 * brute force, infeasible SLOs, sharing's constant term, and DTS never
 * beating the optimum over many random profiles. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler-ext/autoscaler/dts.h"
#include "scheduler-ext/autoscaler/ilp.h"
#include "tests/lib/unit.h"

#define MIB (1024ull * 1024ull)
#define TIME_LIMIT_MS 20000

static profile_config cfg(double c, double m_mib, int b, int p, double l_ms)
{
    return (profile_config){.c = c, .m_mib = m_mib, .b = b, .p = p,
                            .latency_ms = {l_ms, l_ms, l_ms}};
}

static void ilp_ok(const profile *p, double rps, const plan_options *o, plan *out)
{
    tetris_error err = {0};
    int rc = ilp_plan(p, rps, o, TIME_LIMIT_MS, out, &err);
    ck_assert_msg(rc == 0, "ilp_plan: %s", err.msg);
    ck_assert(out->optimal);
}

static unsigned count_of(const plan *pl, size_t config)
{
    for (size_t i = 0; i < pl->n_entries; i++)
        if (pl->entries[i].config == config)
            return pl->entries[i].count;
    return 0;
}

/* A: 100 MiB for 100 rps (ratio 1.0), B: 30 MiB for 20 rps (0.667).
 * 110 rps: DTS takes A twice (200 MiB); the optimum is A + B (130 MiB). */
START_TEST(optimum_beats_greedy_on_the_tail)
{
    profile_config c[2] = {cfg(1, 100, 1, 1, 10), cfg(1, 30, 1, 1, 50)};
    profile p = {.model = "tail", .configs = c, .n_configs = 2};
    plan_options o = {.slo_ms = 100, .latency = PROFILE_STAT_P95};
    plan exact, greedy;
    tetris_error err = {0};
    ilp_ok(&p, 110, &o, &exact);
    ck_assert_uint_eq(count_of(&exact, 0), 1);
    ck_assert_uint_eq(count_of(&exact, 1), 1);
    ck_assert_double_eq_tol(exact.memory_mib, 130, 1e-9);
    ck_assert(exact.covered_rps >= 110);
    ck_assert_int_eq(dts_plan(&p, 110, &o, &greedy, &err), 0);
    ck_assert_double_eq_tol(greedy.memory_mib, 200, 1e-9);
    plan_clear(&exact);
    plan_clear(&greedy);
}
END_TEST

START_TEST(constraints_two_and_three_exclude_slow_configs)
{
    /* The cheapest config per rps is batched with l = 30 ms: allowed for an
     * SLO of 60 (30 <= 30), excluded for 59. */
    profile_config c[2] = {cfg(1, 100, 4, 1, 30), cfg(1, 100, 1, 1, 10)};
    profile p = {.model = "half", .configs = c, .n_configs = 2};
    plan_options o = {.slo_ms = 60, .latency = PROFILE_STAT_P95};
    plan pl;
    ilp_ok(&p, 130, &o, &pl); /* 133 rps from one batched instance */
    ck_assert_uint_eq(count_of(&pl, 0), 1);
    ck_assert_uint_eq(pl.instances, 1);
    plan_clear(&pl);
    o.slo_ms = 59;
    ilp_ok(&p, 130, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 0), 0);
    ck_assert_uint_eq(count_of(&pl, 1), 2);
    plan_clear(&pl);

    /* At 60 ms the batched config wins, unless the space is concurrency only
     * (b=1). */
    o.slo_ms = 60;
    o.space = PLAN_SPACE_CONCURRENCY;
    ilp_ok(&p, 130, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 1), 2);
    ck_assert_uint_eq(pl.n_entries, 1);
    plan_clear(&pl);
    o.space = PLAN_SPACE_ALL;

    tetris_error err = {0};
    o.slo_ms = 5;
    ck_assert_int_eq(ilp_plan(&p, 130, &o, TIME_LIMIT_MS, &pl, &err), -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "no config meets the SLO of 5 ms"));
    o.slo_ms = 60;
    ck_assert_int_eq(ilp_plan(&p, 130, &o, 0, &pl, &err), -TETRIS_E_INVAL);
}
END_TEST

START_TEST(zero_rate_needs_nothing)
{
    profile_config c[1] = {cfg(1, 100, 1, 1, 10)};
    profile p = {.model = "zero", .configs = c, .n_configs = 1};
    plan_options o = {.slo_ms = 100, .latency = PROFILE_STAT_P95};
    plan pl;
    ilp_ok(&p, 0, &o, &pl);
    ck_assert_uint_eq(pl.instances, 0);
    ck_assert_double_eq(pl.memory_mib, 0);
    plan_clear(&pl);
}
END_TEST

/* The sharing profile of test_dts.c: 300 MiB of tensors; X serves 100 rps
 * with 100 MiB private, Y 50 rps with 20 MiB. 200 rps: the optimum is 4 Y
 * (80 MiB + the tensors once = 380), DTS's 1 X + 2 Y is 440. */
START_TEST(sharing_pays_tensors_once)
{
    profile_config c[2] = {cfg(1, 400, 1, 4, 40), cfg(1, 320, 1, 1, 20)};
    c[0].private_bytes = 100 * MIB;
    c[1].private_bytes = 20 * MIB;
    c[0].shared_bytes = c[1].shared_bytes = 300 * MIB;
    profile p = {.model = "shared", .configs = c, .n_configs = 2};
    plan_options o = {.slo_ms = 100, .latency = PROFILE_STAT_P95, .sharing = true};
    plan pl;
    ilp_ok(&p, 200, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 1), 4);
    ck_assert_double_eq_tol(pl.memory_mib, 380, 1e-6);
    ck_assert_double_eq_tol(pl.shared_mib, 300, 1e-6);
    plan_clear(&pl);
    o.resident = true;
    ilp_ok(&p, 200, &o, &pl);
    ck_assert_double_eq_tol(pl.memory_mib, 80, 1e-6);
    plan_clear(&pl);
    o.sharing = false;
    o.resident = false;
    ilp_ok(&p, 200, &o, &pl); /* without sharing: 2 X = 800 beats 4 Y = 1280 */
    ck_assert_uint_eq(count_of(&pl, 0), 2);
    ck_assert_double_eq_tol(pl.memory_mib, 800, 1e-6);
    plan_clear(&pl);
}
END_TEST

/* Random profiles on the paper's grid (c in {1,2}, b in {1,2,4},
 * p in {1..4}); memory and latency grow with b and p, with noise. */
static void random_profile(profile *p, profile_config *c, unsigned *seed)
{
    size_t n = 0;
    for (int cpu = 1; cpu <= 2; cpu++)
        for (int b = 1; b <= 4; b *= 2)
            for (int par = 1; par <= 4; par++) {
                double noise = 0.7 + 0.6 * rand_r(seed) / (double)RAND_MAX;
                double l = 8.0 * b * (1.0 + 0.5 * (par - 1) / cpu) / cpu * noise;
                double m = (150.0 + 40.0 * b * par) * (0.8 + 0.4 * rand_r(seed) / (double)RAND_MAX);
                c[n++] = cfg(cpu, round(m), b, par, l);
            }
    p->model = "random";
    p->configs = c;
    p->n_configs = n;
}

/* Smallest memory over all count vectors, by enumeration (feasible only). */
static double brute_force(const profile *p, double rps, const plan_options *o, size_t i)
{
    if (rps <= 1e-9)
        return 0;
    if (i == p->n_configs)
        return INFINITY;
    const profile_config *c = &p->configs[i];
    if (!plan_meets_slo(c, o))
        return brute_force(p, rps, o, i + 1);
    double cap = plan_capacity_rps(c, o->latency);
    double best = INFINITY;
    for (int k = 0; k <= (int)ceil(rps / cap); k++)
        best = fmin(best, k * c->m_mib + brute_force(p, rps - k * cap, o, i + 1));
    return best;
}

START_TEST(matches_brute_force_on_small_spaces)
{
    unsigned seed = 7;
    for (int round_no = 0; round_no < 20; round_no++) {
        profile_config all[24];
        profile big;
        random_profile(&big, all, &seed);
        /* Four random configs keep the enumeration small. */
        profile_config c[4];
        for (int i = 0; i < 4; i++)
            c[i] = all[rand_r(&seed) % 24];
        profile p = {.model = "small", .configs = c, .n_configs = 4};
        plan_options o = {.slo_ms = 200, .latency = PROFILE_STAT_P95};
        double rps = 50 + rand_r(&seed) % 400;
        plan pl;
        ilp_ok(&p, rps, &o, &pl);
        double want = brute_force(&p, rps, &o, 0);
        ck_assert_msg(fabs(pl.memory_mib - want) < 1e-6, "round %d: ilp %g, brute force %g",
                      round_no, pl.memory_mib, want);
        plan_clear(&pl);
    }
}
END_TEST

START_TEST(dts_is_never_below_the_optimum)
{
    unsigned seed = 42;
    for (int round_no = 0; round_no < 40; round_no++) {
        profile_config c[24];
        profile p;
        random_profile(&p, c, &seed);
        plan_options o = {.slo_ms = 40 + rand_r(&seed) % 100, .latency = PROFILE_STAT_P95,
                          .alpha = round_no % 2 ? 0 : 30};
        double rps = 1 + rand_r(&seed) % 2000;
        plan exact, greedy;
        tetris_error err = {0};
        ilp_ok(&p, rps, &o, &exact);
        ck_assert_int_eq(dts_plan(&p, rps, &o, &greedy, &err), 0);
        double exact_obj = exact.memory_mib + o.alpha * exact.cpus;
        double greedy_obj = greedy.memory_mib + o.alpha * greedy.cpus;
        ck_assert_msg(greedy_obj >= exact_obj - 1e-6, "round %d: dts %g < optimum %g", round_no,
                      greedy_obj, exact_obj);
        ck_assert(exact.covered_rps >= rps - 1e-6);
        ck_assert(greedy.covered_rps >= rps - 1e-6);
        plan_clear(&exact);
        plan_clear(&greedy);
    }
}
END_TEST

/* The refined mode against the equal-share integer program and the paper
 * mode: it is the optimum of its model, covers the rate with every
 * instance at or below its capacity at an equal share, and is never worse
 * than Algorithm 1's plan whenever that plan is itself feasible at equal
 * shares. Some configs carry a measured throughput below b*p/l. */
START_TEST(refined_is_the_equal_share_optimum)
{
    unsigned seed = 99;
    int paper_feasible = 0;
    for (int round_no = 0; round_no < 60; round_no++) {
        profile_config c[24];
        profile p;
        random_profile(&p, c, &seed);
        if (round_no % 3 == 0)
            for (size_t i = 0; i < p.n_configs; i += 2)
                c[i].throughput_rps = plan_capacity_rps(&c[i], PROFILE_STAT_P95) *
                                      (0.5 + 0.4 * rand_r(&seed) / (double)RAND_MAX);
        plan_options o = {.slo_ms = 40 + rand_r(&seed) % 100,
                          .latency = PROFILE_STAT_P95,
                          .alpha = round_no % 2 ? 0 : 30,
                          .mode = PLAN_MODE_REFINED};
        double rps = 1 + rand_r(&seed) % 2000;
        plan exact, refined, paper;
        tetris_error err = {0};
        ilp_ok(&p, rps, &o, &exact);
        ck_assert_int_eq(dts_plan(&p, rps, &o, &refined, &err), 0);
        double exact_obj = exact.memory_mib + o.alpha * exact.cpus;
        double refined_obj = refined.memory_mib + o.alpha * refined.cpus;
        ck_assert_msg(fabs(refined_obj - exact_obj) < 1e-6 * exact_obj,
                      "round %d: refined %g, equal-share optimum %g", round_no, refined_obj,
                      exact_obj);
        ck_assert(plan_equal_share_ok(&exact, &p, rps, &o));
        ck_assert(plan_equal_share_ok(&refined, &p, rps, &o));
        ck_assert(refined.covered_rps >= rps - 1e-6);
        /* Algorithm 1 under the same capacities. */
        plan_options po = o;
        po.mode = PLAN_MODE_PAPER;
        for (size_t i = 0; i < p.n_configs; i++)
            c[i].throughput_rps = 0;
        o.mode = PLAN_MODE_REFINED;
        plan_clear(&refined);
        ck_assert_int_eq(dts_plan(&p, rps, &o, &refined, &err), 0);
        ck_assert_int_eq(dts_plan(&p, rps, &po, &paper, &err), 0);
        if (plan_equal_share_ok(&paper, &p, rps, &po)) {
            paper_feasible++;
            ck_assert_msg(refined.memory_mib + o.alpha * refined.cpus <=
                              paper.memory_mib + o.alpha * paper.cpus + 1e-6,
                          "round %d: refined worse than the paper's feasible plan", round_no);
        }
        plan_clear(&exact);
        plan_clear(&refined);
        plan_clear(&paper);
    }
    ck_assert_int_gt(paper_feasible, 10); /* the comparison did happen */
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 120);
    tcase_add_test(tc, optimum_beats_greedy_on_the_tail);
    tcase_add_test(tc, constraints_two_and_three_exclude_slow_configs);
    tcase_add_test(tc, zero_rate_needs_nothing);
    tcase_add_test(tc, sharing_pays_tensors_once);
    tcase_add_test(tc, matches_brute_force_on_small_spaces);
    tcase_add_test(tc, dts_is_never_below_the_optimum);
    tcase_add_test(tc, refined_is_the_equal_share_optimum);
}

UNIT_MAIN("ilp")
