/* daemon_run.c - the run loop of a daemon (see daemon_run.h). */
#include "common/daemon_run.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

#include "common/clock.h"
#include "common/log.h"

static int default_start_failed(void *ctx, int r, const tetris_error *err)
{
    (void)ctx;
    (void)r;
    log_error("event=start-failed msg=%s", LOG_Q(err->msg));
    return 1;
}

/* Waits for a signal of set, up to wait_s seconds when timed. Returns the
 * signal, 0 when the time passed, -1 when the wait itself failed (which the
 * loop takes as a stop: spinning on it would be worse). */
static int wait_signal(const sigset_t *set, bool timed, double wait_s)
{
    int sig;
    if (!timed)
        return sigwait(set, &sig) == 0 ? sig : -1;
    struct timespec ts = clock_timespec(fmax(wait_s, 0) * 1e3);
    for (;;) {
        sig = sigtimedwait(set, NULL, &ts);
        if (sig >= 0)
            return sig;
        if (errno == EAGAIN)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

/* The loop between start and stop: returns the exit status. */
static int run_loop(const struct daemon_run *d, const sigset_t *set)
{
    for (;;) {
        double wait_s = d->tick != NULL ? d->tick_wait_s(d->ctx) : 0;
        int sig = wait_signal(set, d->tick != NULL, wait_s);
        if (sig == SIGHUP) {
            d->reload(d->ctx);
        } else if (sig != 0) {
            log_info("event=%s signal=%d", d->stop_event != NULL ? d->stop_event : "stopping",
                     sig > 0 ? sig : 0);
            return 0;
        } else {
            int status = d->tick(d->ctx);
            if (status != DAEMON_RUN_CONTINUE) {
                assert(status >= 0);
                return status;
            }
        }
    }
}

int daemon_run(const struct daemon_run *d)
{
    tetris_error err = {0};
    sigset_t set;
    int r, status;

    assert(d->start != NULL && d->stop != NULL);
    assert(d->tick == NULL || d->tick_wait_s != NULL);
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (d->reload != NULL)
        sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    r = d->start(d->ctx, &err);
    if (r < 0)
        status = (d->start_failed != NULL ? d->start_failed : default_start_failed)(d->ctx, r,
                                                                                    &err);
    else if (r == DAEMON_RUN_DONE)
        status = 0;
    else
        status = run_loop(d, &set);
    d->stop(d->ctx);
    if (status == 0)
        log_info("event=stopped");
    return status;
}

bool daemon_run_stop_pending(void)
{
    sigset_t pending;
    if (sigpending(&pending) < 0)
        return false;
    return sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1;
}
