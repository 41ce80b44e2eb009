/* daemon_run.c - the run loop of a threaded daemon (see daemon_run.h). */
#include "common/daemon_run.h"

#include <assert.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

#include "common/log.h"

static int default_start_failed(void *ctx, int r, const tetris_error *err)
{
    (void)ctx;
    (void)r;
    log_error("event=start-failed msg=%s", LOG_Q(err->msg));
    return 1;
}

int daemon_run(const struct daemon_run *d)
{
    tetris_error err = {0};
    sigset_t stop_signals;
    int r, sig = 0, status = 0;

    assert(d->start != NULL && d->stop != NULL);
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    if ((r = d->start(d->ctx, &err)) < 0) {
        status = (d->start_failed != NULL ? d->start_failed : default_start_failed)(d->ctx, r,
                                                                                    &err);
    } else {
        /* sigwait fails only for an invalid set: this one is valid. */
        if (sigwait(&stop_signals, &sig) != 0)
            sig = 0;
        log_info("event=%s signal=%d", d->stop_event != NULL ? d->stop_event : "stopping", sig);
    }
    d->stop(d->ctx);
    if (status == 0)
        log_info("event=stopped");
    return status;
}
