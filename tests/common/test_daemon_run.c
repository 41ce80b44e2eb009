/* test_daemon_run.c - the daemons' run loop (common/daemon_run.h) with
 * steps that count what ran: ticks until one ends the run, a reload for a
 * SIGHUP and a stop for a SIGTERM that arrive while a step runs (pending,
 * taken by the next wait), start's early end and its failure, and stop
 * after every start. Signals are raised at the process itself. */
#include "common/daemon_run.h"

#include <signal.h>
#include <stdbool.h>

#include "tests/lib/unit.h"

struct counts {
    int start_result; /* what start returns */
    int starts, stops, ticks, reloads;
    int end_after;        /* the tick that ends the run with status 7; 0: none */
    int hup_at, term_at;  /* the tick that raises SIGHUP / SIGTERM; 0: none */
    bool pending_in_tick; /* daemon_run_stop_pending() inside the tick after term_at */
};

static int start(void *ctx, tetris_error *err)
{
    struct counts *c = ctx;
    c->starts++;
    if (c->start_result < 0)
        return tetris_fail(err, TETRIS_E_IO, 0, "refused");
    return c->start_result;
}

static void stop(void *ctx)
{
    ((struct counts *)ctx)->stops++;
}

static int tick(void *ctx)
{
    struct counts *c = ctx;
    c->ticks++;
    if (c->ticks == c->hup_at)
        raise(SIGHUP);
    if (c->ticks == c->term_at) {
        raise(SIGTERM);
        c->pending_in_tick = daemon_run_stop_pending();
    }
    return c->ticks == c->end_after ? 7 : DAEMON_RUN_CONTINUE;
}

static double tick_wait_s(void *ctx)
{
    (void)ctx;
    return 0.001;
}

static void reload(void *ctx)
{
    ((struct counts *)ctx)->reloads++;
}

static int run(struct counts *c)
{
    return daemon_run(&(struct daemon_run){.ctx = c,
                                           .start = start,
                                           .stop = stop,
                                           .tick = tick,
                                           .tick_wait_s = tick_wait_s,
                                           .reload = reload});
}

START_TEST(a_tick_ends_the_run_with_its_status)
{
    struct counts c = {.end_after = 3};
    ck_assert_int_eq(run(&c), 7);
    ck_assert_int_eq(c.ticks, 3);
    ck_assert_int_eq(c.starts, 1);
    ck_assert_int_eq(c.stops, 1);
}
END_TEST

START_TEST(sighup_reloads_and_the_ticks_go_on)
{
    struct counts c = {.hup_at = 2, .end_after = 5};
    ck_assert_int_eq(run(&c), 7);
    ck_assert_int_eq(c.reloads, 1);
    ck_assert_int_eq(c.ticks, 5);
}
END_TEST

START_TEST(sigterm_in_a_step_stops_at_the_next_wait)
{
    struct counts c = {.term_at = 2, .end_after = 100};
    ck_assert(!daemon_run_stop_pending());
    ck_assert_int_eq(run(&c), 0);
    ck_assert(c.pending_in_tick);
    ck_assert_int_eq(c.ticks, 2);
    ck_assert_int_eq(c.stops, 1);
    ck_assert(!daemon_run_stop_pending());
}
END_TEST

START_TEST(start_done_ends_without_a_tick)
{
    struct counts c = {.start_result = DAEMON_RUN_DONE, .end_after = 1};
    ck_assert_int_eq(run(&c), 0);
    ck_assert_int_eq(c.ticks, 0);
    ck_assert_int_eq(c.stops, 1);
}
END_TEST

START_TEST(a_failed_start_exits_1_and_still_stops)
{
    struct counts c = {.start_result = -1, .end_after = 1};
    ck_assert_int_eq(run(&c), 1);
    ck_assert_int_eq(c.ticks, 0);
    ck_assert_int_eq(c.stops, 1);
}
END_TEST

static void unit_tests(Suite *s)
{
    /* Each test blocks signals for good: Check's child per test keeps
     * that from the others. */
    TCase *tc = unit_tcase(s, "loop", 10);
    tcase_add_test(tc, a_tick_ends_the_run_with_its_status);
    tcase_add_test(tc, sighup_reloads_and_the_ticks_go_on);
    tcase_add_test(tc, sigterm_in_a_step_stops_at_the_next_wait);
    tcase_add_test(tc, start_done_ends_without_a_tick);
    tcase_add_test(tc, a_failed_start_exits_1_and_still_stops);
}
UNIT_MAIN("daemon_run")
