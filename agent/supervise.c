/* supervise.c - run a command under us (see supervise.h).
 *
 * The signals stay blocked in every thread; the main thread takes them
 * with sigwaitinfo, so none is lost between two checks and none ends the
 * process behind our back. The child learns the parent's death from
 * PR_SET_PDEATHSIG; the parent may die before the child asked for it, so
 * the child checks getppid() afterwards (the race the man page names).
 * Whether exec worked comes back through a close-on-exec pipe: end of file
 * means the command runs, an errno means it never did. */
#include "agent/supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"

static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
static const int terminating[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

static sigset_t original_mask;

static void fill_set(sigset_t *set, const int *sigs, size_t n)
{
    sigemptyset(set);
    for (size_t i = 0; i < n; i++)
        sigaddset(set, sigs[i]);
}

void supervise_block_signals(void)
{
    sigset_t set;
    fill_set(&set, forwarded, sizeof(forwarded) / sizeof(forwarded[0]));
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, &original_mask);
}

int supervise_take_termination(void)
{
    sigset_t set;
    const struct timespec now = {0, 0};
    fill_set(&set, terminating, sizeof(terminating) / sizeof(terminating[0]));
    int sig = sigtimedwait(&set, NULL, &now);
    return sig > 0 ? sig : 0;
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void child(char *const argv[], pid_t parent, int report_fd)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
        sigaction(forwarded[i], &dfl, NULL);
    sigaction(SIGCHLD, &dfl, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
        kill(getpid(), SIGKILL); /* the parent is gone already: so are we */
    sigprocmask(SIG_SETMASK, &original_mask, NULL);
    execvp(argv[0], argv);
    int e = errno;
    ssize_t n = write(report_fd, &e, sizeof(e));
    (void)n; /* the exit status says it too */
    _exit(e == ENOENT || e == ENOTDIR ? SUPERVISE_EXIT_NOT_FOUND : SUPERVISE_EXIT_CANNOT_RUN);
}

static int exit_status(int st)
{
    if (WIFSIGNALED(st))
        return SUPERVISE_EXIT_SIGNAL_BASE + WTERMSIG(st);
    return WEXITSTATUS(st);
}

int supervise_run(char *const argv[], tetris_error *err)
{
    int report[2];
    sigset_t set;
    bool init = getpid() == 1;

    if (pipe2(report, O_CLOEXEC) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "pipe");
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(report[0]);
        close(report[1]);
        return tetris_fail(err, TETRIS_E_IO, e, "fork");
    }
    if (pid == 0) {
        close(report[0]);
        child(argv, parent, report[1]);
    }
    close(report[1]);
    int exec_errno = 0;
    ssize_t got;
    do
        got = read(report[0], &exec_errno, sizeof(exec_errno));
    while (got < 0 && errno == EINTR);
    close(report[0]);
    if (got == (ssize_t)sizeof(exec_errno))
        log_error("event=exec-failed cmd=%s errno=%d msg=%s", LOG_Q(argv[0]), exec_errno,
                  LOG_Q(strerror(exec_errno)));
    else
        log_info("event=exec cmd=%s pid=%d", LOG_Q(argv[0]), (int)pid);

    fill_set(&set, forwarded, sizeof(forwarded) / sizeof(forwarded[0]));
    sigaddset(&set, SIGCHLD);
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&set, &si);
        if (sig < 0) {
            if (errno == EINTR)
                continue;
            /* Cannot happen with a valid set; the child still must not
             * outlive us unnoticed. */
            int e = errno;
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return tetris_fail(err, TETRIS_E_IO, e, "sigwaitinfo");
        }
        if (sig != SIGCHLD) {
            log_debug("event=signal-forwarded sig=%d pid=%d", sig, (int)pid);
            if (kill(pid, sig) < 0 && errno != ESRCH)
                log_warn("event=signal-forward-failed sig=%d pid=%d msg=%s", sig, (int)pid,
                         LOG_Q(strerror(errno)));
            continue;
        }
        /* SIGCHLDs coalesce: collect every child that is done. As PID 1,
         * orphans reparented to us are ours to reap too. */
        for (;;) {
            int st;
            pid_t done = waitpid(init ? -1 : pid, &st, WNOHANG);
            if (done < 0 && errno == EINTR)
                continue;
            if (done <= 0)
                break;
            if (done == pid)
                return exit_status(st);
        }
    }
}
