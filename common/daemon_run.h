/* daemon_run.h - the run loop of a threaded daemon, once for every program
 * that serves until it is told to stop (tetris-function, tetris-webhook,
 * tetris-scheduler-ext).
 *
 * The order matters and used to be copied by hand: SIGTERM and SIGINT are
 * blocked before the program's start step creates its first thread (every
 * thread inherits the mask, so only the main thread's sigwait() sees them),
 * SIGPIPE is ignored (a peer that hangs up is an error on the write, not a
 * death), then start, then the wait, then stop. stop runs after a failed
 * start too, and releases whatever start got. The log says why it ended:
 *   event=stopping signal=15   (the program's stop_event, e.g. "draining")
 *   event=stopped
 * or, when start failed, what start_failed logs (by default
 * event=start-failed msg=...).
 *
 * tetris-reclaimer keeps a loop of its own: between signals it runs
 * reclaim passes on a timer, SIGHUP reloads its settings, and --once,
 * --mount-only and a refused store end it before any thread starts. */
#ifndef TETRIS_DAEMON_RUN_H
#define TETRIS_DAEMON_RUN_H

#include "common/error.h"

struct daemon_run {
    void *ctx; /* the program's state, passed to every step */
    /* Starts the threads and says the daemon is ready (its "listening"
     * line); 0 or a negative tetris error code with err set. */
    int (*start)(void *ctx, tetris_error *err);
    /* Stops the threads and frees what start made, whether start
     * succeeded or not. */
    void (*stop)(void *ctx);
    /* Reports start's failure r and returns the exit status; NULL: logs
     * event=start-failed msg=... and returns 1. */
    int (*start_failed)(void *ctx, int r, const tetris_error *err);
    /* The event logged when a signal arrives; NULL: "stopping". */
    const char *stop_event;
};

/* Runs d: block the stop signals, start, wait for SIGTERM or SIGINT, stop.
 * Returns the exit status: 0 after a signal, else start_failed's. */
int daemon_run(const struct daemon_run *d);

#endif
