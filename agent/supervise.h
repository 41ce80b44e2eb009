/* supervise.h - run a command as our child for as long as we hold
 * something on its behalf (`tetris-agent exec`: the model view's
 * references): signals sent to us reach it, it never outlives us, and its
 * exit status becomes ours. Like an init for containers (tini), we also
 * reap orphaned zombies when we are PID 1. */
#ifndef TETRIS_SUPERVISE_H
#define TETRIS_SUPERVISE_H

#include "common/error.h"

/* Exit statuses for a command that never ran, as POSIX shells give them. */
#define SUPERVISE_EXIT_NOT_FOUND 127
#define SUPERVISE_EXIT_CANNOT_RUN 126
/* A command killed by signal N: 128 + N. */
#define SUPERVISE_EXIT_SIGNAL_BASE 128

/* Blocks the forwarded signals (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1,
 * SIGUSR2) and SIGCHLD. Call it before any thread starts, so that no
 * thread takes them (a thread with the default action would end the whole
 * process without releasing anything); they wait, pending, until
 * supervise_run forwards them. */
void supervise_block_signals(void);

/* A termination signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT) that arrived
 * since supervise_block_signals, consumed; 0 if none. A caller checks it
 * before starting the command, which is then not to start. */
int supervise_take_termination(void);

/* Runs argv[0] (found on PATH, execvp) with the original signal mask and
 * PR_SET_PDEATHSIG(SIGKILL), forwards the blocked signals to it until it
 * exits, and returns its status: its exit code, SUPERVISE_EXIT_SIGNAL_BASE
 * + N when signal N killed it, SUPERVISE_EXIT_NOT_FOUND or
 * SUPERVISE_EXIT_CANNOT_RUN (logged, with err's message) when it could not
 * be executed. -1 (err filled) when it could not even be forked. */
int supervise_run(char *const argv[], tetris_error *err);

#endif
