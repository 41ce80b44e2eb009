/* hold.c - block until stdin closes or a termination signal arrives.
 *
 * The signals stay blocked except inside ppoll(), so one that arrives
 * between two checks is never lost. */
#include "agent/hold.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t released_by;

static void on_signal(int sig)
{
    released_by = sig;
}

void hold_block_signals(void)
{
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, NULL);
}

int hold_until_released(void)
{
    struct sigaction sa;
    sigset_t block, wait_mask;
    char buf[256];

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &wait_mask);
    sigdelset(&wait_mask, SIGTERM);
    sigdelset(&wait_mask, SIGINT);
    while (!released_by) {
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        int n = ppoll(&pfd, 1, NULL, &wait_mask);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (pfd.revents & (POLLHUP | POLLERR | POLLNVAL) && !(pfd.revents & POLLIN)))
            break;
        ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
        if (got <= 0 && !(got < 0 && errno == EINTR))
            break;
    }
    sigprocmask(SIG_UNBLOCK, &block, NULL);
    return released_by;
}
