/* daemon_run.h - the run loop of a daemon, once for every program that
 * serves or works until it is told to stop (tetris-function,
 * tetris-webhook, tetris-scheduler-ext, tetris-reclaimer, tetris-node-pins,
 * tetris-autoscaler run).
 *
 * The order matters and used to be copied by hand: the signals the loop
 * takes (SIGTERM and SIGINT, and SIGHUP where the program reloads) are
 * blocked before the program's start step creates its first thread (every
 * thread inherits the mask, so only the main thread's wait sees them),
 * SIGPIPE is ignored (a peer that hangs up is an error on the write, not a
 * death), then start, then the loop, then stop. The loop waits for a
 * signal, or until the next tick is due:
 *   - SIGTERM or SIGINT ends it;
 *   - SIGHUP runs the reload step (without one, SIGHUP keeps its default
 *     action and ends the process);
 *   - when tick_wait_s has passed without a signal, the tick step runs (a
 *     reclaim pass, a pin file refresh, an autoscaling round); it may end
 *     the run with an exit status (a --once refresh done, a trace played
 *     out).
 * A signal that arrives while a step runs stays pending and the next wait
 * takes it: none is lost and no step is cut in the middle by a handler; a
 * long step may ask daemon_run_stop_pending() and return early.
 *
 * start may end the run before anything serves: DAEMON_RUN_DONE when its
 * work is all there is (tetris-reclaimer --once, --mount-only), or a
 * failure, whose exit status start_failed chooses (a refused store exits
 * 3). stop runs after every start, failed or not, and releases whatever
 * start got. The log says why it ended:
 *   event=stopping signal=15   (the program's stop_event, e.g. "draining")
 *   event=stopped              (whenever the exit status is 0)
 * or, when start failed, what start_failed logs (by default
 * event=start-failed msg=...). */
#ifndef TETRIS_DAEMON_RUN_H
#define TETRIS_DAEMON_RUN_H

#include <stdbool.h>

#include "common/error.h"

/* start's answer when the program's work ended within it: no loop, exit 0. */
#define DAEMON_RUN_DONE 1
/* tick's answer when the run goes on. */
#define DAEMON_RUN_CONTINUE (-1)

struct daemon_run {
    void *ctx; /* the program's state, passed to every step */
    /* Starts the threads and says the daemon is ready (its "listening"
     * line); 0, DAEMON_RUN_DONE, or a negative tetris error code with err
     * set. */
    int (*start)(void *ctx, tetris_error *err);
    /* Stops the threads and frees what start made, whether start
     * succeeded or not. */
    void (*stop)(void *ctx);
    /* Reports start's failure r and returns the exit status; NULL: logs
     * event=start-failed msg=... and returns 1. */
    int (*start_failed)(void *ctx, int r, const tetris_error *err);
    /* The event logged when a stop signal arrives; NULL: "stopping". */
    const char *stop_event;
    /* The periodic step, run when tick_wait_s seconds passed without a
     * signal: DAEMON_RUN_CONTINUE, or the exit status (>= 0) that ends the
     * run. NULL: the loop only waits for signals. */
    int (*tick)(void *ctx);
    /* Seconds to wait before the next tick, asked before every wait (a
     * reload may change it); 0 ticks at once, after any pending signal.
     * Required with tick. */
    double (*tick_wait_s)(void *ctx);
    /* SIGHUP: re-read the settings; NULL: SIGHUP is not taken. */
    void (*reload)(void *ctx);
};

/* Runs d: block the signals, start, loop until a stop signal or the tick
 * ends it, stop. Returns the exit status: 0 after a signal or
 * DAEMON_RUN_DONE, the tick's, or start_failed's. */
int daemon_run(const struct daemon_run *d);

/* Whether SIGTERM or SIGINT waits to be taken by the loop: for a step that
 * may run long (it returns early; the loop then stops). Main thread, inside
 * a step of daemon_run. */
bool daemon_run_stop_pending(void);

#endif
