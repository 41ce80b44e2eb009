/* test_dts.c - DTS (Algorithm 1 of the Tetris paper) on hand-computed cases:
 * the order by b*p/(l*m), the SLO and SLO/2 rules, covering the residual
 * rate exactly, the m + alpha*c variant, and sharing-aware marginal memory;
 * and the refined mode (the cheapest cover, measured throughput, equal
 * shares).
 *
 * In these profiles mean = p95 = p99, so l is the same for every statistic;
 * capacity is b*p*1000/l requests per second. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler-ext/autoscaler/dts.h"
#include "tests/lib/unit.h"

#define MIB (1024ull * 1024ull)

static profile_config cfg(double c, double m_mib, int b, int p, double l_ms)
{
    return (profile_config){.c = c, .m_mib = m_mib, .b = b, .p = p,
                            .latency_ms = {l_ms, l_ms, l_ms}};
}

/*   config  c  m    b p  l   capacity  b*p/(l*m)
 *   0       1  100  1 1  10  100       1.000
 *   1       1  200  4 1  30  133.3     0.667
 *   2       4  150  2 2  20  200       1.333
 *   3       1  50   1 1  60  16.7      0.333 */
static profile_config basic_configs[4];
static profile basic = {.model = "basic", .configs = basic_configs, .n_configs = 4};

static void setup_basic(void)
{
    basic_configs[0] = cfg(1, 100, 1, 1, 10);
    basic_configs[1] = cfg(1, 200, 4, 1, 30);
    basic_configs[2] = cfg(4, 150, 2, 2, 20);
    basic_configs[3] = cfg(1, 50, 1, 1, 60);
}

static plan_options slo(double ms)
{
    return (plan_options){.slo_ms = ms, .latency = PROFILE_STAT_P95};
}

static void plan_ok(const profile *p, double rps, const plan_options *o, plan *out)
{
    tetris_error err = {0};
    int rc = dts_plan(p, rps, o, out, &err);
    ck_assert_msg(rc == 0, "dts_plan: %s", err.msg);
}

static unsigned count_of(const plan *pl, size_t config)
{
    for (size_t i = 0; i < pl->n_entries; i++)
        if (pl->entries[i].config == config)
            return pl->entries[i].count;
    return 0;
}

START_TEST(capacity_and_slo_rules)
{
    setup_basic();
    ck_assert_double_eq_tol(plan_capacity_rps(&basic_configs[2], PROFILE_STAT_P95), 200, 1e-9);
    plan_options o = slo(40);
    ck_assert(plan_meets_slo(&basic_configs[0], &o));  /* b=1: 10 <= 40 */
    ck_assert(plan_meets_slo(&basic_configs[2], &o));  /* b>1: 20 <= 40/2, the boundary */
    ck_assert(!plan_meets_slo(&basic_configs[1], &o)); /* b>1: 30 > 20 */
    ck_assert(!plan_meets_slo(&basic_configs[3], &o)); /* b=1: 60 > 40 */
    o = slo(39.9);
    ck_assert(!plan_meets_slo(&basic_configs[2], &o)); /* b>1: 20 > 19.95 */
}
END_TEST

START_TEST(highest_normalised_throughput_first)
{
    setup_basic();
    plan_options o = slo(50); /* feasible: 0 (b=1, 10<=50) and 2 (b>1, 20<=25) */
    plan pl;
    plan_ok(&basic, 500, &o, &pl);
    /* Config 2 ranks first (1.333); it is taken until 500 rps are covered:
     * ceil(500/200) = 3 instances, 450 MiB, 600 rps. */
    ck_assert_uint_eq(pl.n_entries, 1);
    ck_assert_uint_eq(count_of(&pl, 2), 3);
    ck_assert_uint_eq(pl.instances, 3);
    ck_assert_double_eq_tol(pl.memory_mib, 450, 1e-9);
    ck_assert_double_eq_tol(pl.covered_rps, 600, 1e-9);
    ck_assert_double_eq_tol(pl.cpus, 12, 1e-9);
    plan_clear(&pl);
}
END_TEST

START_TEST(slo_half_rule_excludes_batched_configs)
{
    setup_basic();
    plan_options o = slo(30); /* config 2 needs 20 <= 15: out; only config 0 is left */
    plan pl;
    plan_ok(&basic, 500, &o, &pl);
    ck_assert_uint_eq(pl.n_entries, 1);
    ck_assert_uint_eq(count_of(&pl, 0), 5);
    ck_assert_double_eq_tol(pl.memory_mib, 500, 1e-9);
    plan_clear(&pl);

    /* A loose SLO admits the batched config 1 (30 <= 35) but it ranks below 2. */
    o = slo(70);
    plan_ok(&basic, 100, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 2), 1);
    ck_assert_uint_eq(pl.n_entries, 1);
    plan_clear(&pl);
}
END_TEST

START_TEST(residual_is_covered_exactly)
{
    setup_basic();
    plan_options o = slo(50);
    plan pl;
    plan_ok(&basic, 200, &o, &pl); /* exactly one instance's capacity */
    ck_assert_uint_eq(pl.instances, 1);
    plan_clear(&pl);
    plan_ok(&basic, 200.001, &o, &pl); /* a little more needs a second one */
    ck_assert_uint_eq(pl.instances, 2);
    ck_assert(pl.covered_rps >= 200.001);
    plan_clear(&pl);
    plan_ok(&basic, 0.5, &o, &pl);
    ck_assert_uint_eq(pl.instances, 1);
    plan_clear(&pl);
    plan_ok(&basic, 0, &o, &pl); /* nothing to serve, nothing to start */
    ck_assert_uint_eq(pl.instances, 0);
    ck_assert_uint_eq(pl.n_entries, 0);
    ck_assert_double_eq(pl.memory_mib, 0);
    plan_clear(&pl);
}
END_TEST

START_TEST(alpha_weighs_cpus)
{
    setup_basic();
    plan_options o = slo(50);
    o.alpha = 50; /* MiB per CPU: config 0 costs 150 -> 0.667, config 2 350 -> 0.571 */
    plan pl;
    plan_ok(&basic, 500, &o, &pl);
    ck_assert_uint_eq(pl.n_entries, 1);
    ck_assert_uint_eq(count_of(&pl, 0), 5);
    ck_assert_double_eq_tol(pl.memory_mib, 500, 1e-9); /* memory alone, not the alpha term */
    ck_assert_double_eq_tol(pl.cpus, 5, 1e-9);
    plan_clear(&pl);
    o.alpha = 10; /* config 0: 110 -> 0.909; config 2: 190 -> 1.053 */
    plan_ok(&basic, 500, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 2), 3);
    plan_clear(&pl);
}
END_TEST

START_TEST(infeasible_slo_is_a_clear_error)
{
    setup_basic();
    plan_options o = slo(8);
    plan pl;
    tetris_error err = {0};
    ck_assert_int_eq(dts_plan(&basic, 100, &o, &pl, &err), -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "no config meets the SLO of 8 ms"));
    ck_assert_ptr_nonnull(strstr(err.msg, "fastest b=1 config takes 10 ms"));
    ck_assert_ptr_nonnull(strstr(err.msg, "fastest b>1 config takes 20 ms (needs <= 4)"));
    ck_assert_ptr_null(pl.entries);
    o = slo(-1);
    ck_assert_int_eq(dts_plan(&basic, 100, &o, &pl, &err), -TETRIS_E_INVAL);
}
END_TEST

START_TEST(latency_statistic_changes_the_choice)
{
    setup_basic();
    basic_configs[2].latency_ms.p99 = 30; /* its tail misses SLO/2 = 25 */
    plan_options o = slo(50);
    plan pl;
    plan_ok(&basic, 500, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 2), 3);
    plan_clear(&pl);
    o.latency = PROFILE_STAT_P99;
    plan_ok(&basic, 500, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 0), 5);
    ck_assert_uint_eq(pl.n_entries, 1);
    plan_clear(&pl);
}
END_TEST

/* Sharing: the model's tensors are 300 MiB.
 *   config  b p  l   capacity  private  m_mib (= private + tensors)
 *   X       1 4  40  100       100      400
 *   Y       1 1  20  50        20       320
 * Without sharing X ranks first (100/400 > 50/320): 200 rps -> 2 X = 800 MiB.
 * Sharing-aware, the first instance also pays the tensors: X 100/400 vs
 * Y 50/320, X first; after it the tensors are resident and Y ranks first
 * (50/20 > 100/100): 1 X + 2 Y = 100 + 2*20 + 300 = 440 MiB. If the tensors
 * are already resident, Y from the start: 4 Y = 80 MiB. */
static profile_config shared_configs[2];
static profile shared = {.model = "shared", .configs = shared_configs, .n_configs = 2};

static void setup_shared(void)
{
    shared_configs[0] = cfg(1, 400, 1, 4, 40);
    shared_configs[0].private_bytes = 100 * MIB;
    shared_configs[0].shared_bytes = 300 * MIB;
    shared_configs[1] = cfg(1, 320, 1, 1, 20);
    shared_configs[1].private_bytes = 20 * MIB;
    shared_configs[1].shared_bytes = 300 * MIB;
}

START_TEST(sharing_makes_memory_marginal)
{
    setup_shared();
    plan_options o = slo(100);
    plan pl;
    plan_ok(&shared, 200, &o, &pl);
    ck_assert_uint_eq(pl.n_entries, 1);
    ck_assert_uint_eq(count_of(&pl, 0), 2);
    ck_assert_double_eq_tol(pl.memory_mib, 800, 1e-9);
    plan_clear(&pl);

    o.sharing = true;
    plan_ok(&shared, 200, &o, &pl);
    ck_assert_uint_eq(pl.n_entries, 2);
    ck_assert_uint_eq(pl.entries[0].config, 0); /* chosen first, pays the tensors */
    ck_assert_uint_eq(pl.entries[0].count, 1);
    ck_assert_uint_eq(pl.entries[1].config, 1);
    ck_assert_uint_eq(pl.entries[1].count, 2);
    ck_assert_double_eq_tol(pl.shared_mib, 300, 1e-9);
    ck_assert_double_eq_tol(pl.memory_mib, 440, 1e-9);
    ck_assert_double_eq_tol(pl.covered_rps, 200, 1e-9);
    plan_clear(&pl);

    o.resident = true;
    plan_ok(&shared, 200, &o, &pl);
    ck_assert_uint_eq(pl.n_entries, 1);
    ck_assert_uint_eq(count_of(&pl, 1), 4);
    ck_assert_double_eq_tol(pl.shared_mib, 0, 1e-9);
    ck_assert_double_eq_tol(pl.memory_mib, 80, 1e-9);
    plan_clear(&pl);
}
END_TEST

START_TEST(sharing_needs_private_bytes)
{
    setup_basic();
    plan_options o = slo(50);
    o.sharing = true;
    plan pl;
    tetris_error err = {0};
    ck_assert_int_eq(dts_plan(&basic, 10, &o, &pl, &err), -TETRIS_E_INVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "has no private_bytes"));
}
END_TEST

/* Restricted config spaces, the baselines' choices (all 100 MiB):
 *   P b=1 p=1 l=10 (100 rps)  Q b=4 p=1 l=20 (200)  R b=1 p=4 l=25 (160)
 *   S b=4 p=4 l=40 (400)
 * 400 rps under 100 ms: all -> 1 S; batching (p=1) -> 2 Q; concurrency
 * (b=1) -> 3 R. */
START_TEST(restricted_spaces)
{
    profile_config c[4] = {cfg(1, 100, 1, 1, 10), cfg(1, 100, 4, 1, 20), cfg(1, 100, 1, 4, 25),
                           cfg(1, 100, 4, 4, 40)};
    profile p = {.model = "spaces", .configs = c, .n_configs = 4};
    plan_options o = slo(100);
    plan pl;
    plan_ok(&p, 400, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 3), 1);
    ck_assert_uint_eq(pl.instances, 1);
    plan_clear(&pl);
    o.space = PLAN_SPACE_BATCHING;
    plan_ok(&p, 400, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 1), 2);
    ck_assert_uint_eq(pl.instances, 2);
    plan_clear(&pl);
    o.space = PLAN_SPACE_CONCURRENCY;
    plan_ok(&p, 400, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 2), 3);
    ck_assert_uint_eq(pl.instances, 3);
    plan_clear(&pl);

    tetris_error err = {0};
    o = slo(8);
    o.space = PLAN_SPACE_BATCHING;
    ck_assert_int_eq(dts_plan(&p, 400, &o, &pl, &err), -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "no config with p=1 meets the SLO of 8 ms"));
    ck_assert_ptr_nonnull(strstr(err.msg, "fastest b>1 config takes 20 ms"));

    enum plan_space space;
    ck_assert_int_eq(plan_space_parse("concurrency", &space, &err), 0);
    ck_assert_int_eq(space, PLAN_SPACE_CONCURRENCY);
    ck_assert_int_eq(plan_space_parse("both", &space, &err), -TETRIS_E_INVAL);
}
END_TEST

/* ---- PLAN_MODE_REFINED ---- */

static plan_options refined(double ms)
{
    plan_options o = slo(ms);
    o.mode = PLAN_MODE_REFINED;
    return o;
}

/* 50 rps: Algorithm 1 takes config 2 (the best b*p/(l*m), 150 MiB) for a
 * rate config 0 alone covers for 100 MiB. */
START_TEST(refined_fills_the_tail_with_the_cheapest_cover)
{
    setup_basic();
    plan_options po = slo(1000), o = refined(1000);
    plan paper, pl;
    plan_ok(&basic, 50, &po, &paper);
    plan_ok(&basic, 50, &o, &pl);
    ck_assert_uint_eq(count_of(&paper, 2), 1);
    ck_assert_double_eq_tol(paper.memory_mib, 150, 1e-9);
    ck_assert_uint_eq(pl.n_entries, 1);
    ck_assert_uint_eq(count_of(&pl, 0), 1);
    ck_assert_double_eq_tol(pl.memory_mib, 100, 1e-9);
    ck_assert(pl.covered_rps >= 50);
    plan_clear(&paper);
    plan_clear(&pl);
    /* 250 rps as config 2 + config 0 covers b*p/l, but at equal shares
     * config 0 gets 125 rps, over its 100: not a plan for CE routing. Two
     * of config 2 take 125 each. */
    plan_entry mix[] = {{.config = 2, .count = 1}, {.config = 0, .count = 1}};
    plan mixed = {.entries = mix, .n_entries = 2};
    plan_total(&mixed, &basic, &o);
    ck_assert(mixed.covered_rps >= 250);
    ck_assert(!plan_equal_share_ok(&mixed, &basic, 250, &o));
    plan_ok(&basic, 250, &o, &pl);
    ck_assert(plan_equal_share_ok(&pl, &basic, 250, &o));
    ck_assert_uint_eq(count_of(&pl, 2), 2);
    ck_assert_double_eq_tol(pl.memory_mib, 300, 1e-9);
    plan_clear(&pl);
}
END_TEST

/* A measured saturation throughput below b*p/l is what an instance takes. */
START_TEST(refined_uses_measured_throughput)
{
    setup_basic();
    basic_configs[0].throughput_rps = 40; /* b*p/l says 100 */
    plan_options o = refined(1000), po = slo(1000);
    ck_assert_double_eq_tol(plan_config_capacity(&basic_configs[0], &o), 40, 1e-9);
    ck_assert_double_eq_tol(plan_config_capacity(&basic_configs[0], &po), 100, 1e-9);
    plan pl;
    plan_ok(&basic, 50, &o, &pl);
    /* Config 0 would need two instances (200 MiB): one of config 2 is cheaper. */
    ck_assert_uint_eq(count_of(&pl, 0), 0);
    ck_assert_uint_eq(count_of(&pl, 2), 1);
    ck_assert_double_eq_tol(pl.covered_rps, 200, 1e-9);
    plan_clear(&pl);
    plan_ok(&basic, 40, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 0), 1);
    ck_assert_double_eq_tol(pl.covered_rps, 40, 1e-9);
    plan_clear(&pl);
}
END_TEST

START_TEST(refined_keeps_the_rules)
{
    setup_basic();
    plan_options o = refined(25); /* SLO/2 = 12.5 ms: only config 0 (b=1, 10 ms) */
    plan pl;
    plan_ok(&basic, 250, &o, &pl);
    ck_assert_uint_eq(count_of(&pl, 0), 3);
    ck_assert_uint_eq(pl.instances, 3);
    plan_clear(&pl);
    plan_ok(&basic, 0, &o, &pl);
    ck_assert_uint_eq(pl.instances, 0);
    plan_clear(&pl);
    tetris_error err = {0};
    o = refined(5);
    ck_assert_int_eq(dts_plan(&basic, 10, &o, &pl, &err), -TETRIS_E_NOTFOUND);
    enum plan_mode m;
    ck_assert_int_eq(plan_mode_parse("refined", &m, &err), 0);
    ck_assert_int_eq(m, PLAN_MODE_REFINED);
    ck_assert_int_eq(plan_mode_parse("paper", &m, &err), 0);
    ck_assert_int_eq(m, PLAN_MODE_PAPER);
    ck_assert_int_eq(plan_mode_parse("best", &m, &err), -TETRIS_E_INVAL);
    ck_assert_str_eq(plan_mode_name(PLAN_MODE_REFINED), "refined");
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "core", 0);
    tcase_add_test(tc, capacity_and_slo_rules);
    tcase_add_test(tc, highest_normalised_throughput_first);
    tcase_add_test(tc, slo_half_rule_excludes_batched_configs);
    tcase_add_test(tc, residual_is_covered_exactly);
    tcase_add_test(tc, alpha_weighs_cpus);
    tcase_add_test(tc, infeasible_slo_is_a_clear_error);
    tcase_add_test(tc, latency_statistic_changes_the_choice);
    tcase_add_test(tc, sharing_makes_memory_marginal);
    tcase_add_test(tc, sharing_needs_private_bytes);
    tcase_add_test(tc, restricted_spaces);
    tcase_add_test(tc, refined_fills_the_tail_with_the_cheapest_cover);
    tcase_add_test(tc, refined_uses_measured_throughput);
    tcase_add_test(tc, refined_keeps_the_rules);
}

UNIT_MAIN("dts")
