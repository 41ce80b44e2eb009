/* fake_daemon.c - a broken node daemon, to test that the agent degrades to
 * a private load (a fault injector used in addition to the real daemon).
 *
 *   tetris-test-fake-daemon dead SOCKET   leave a socket file nobody listens
 *                                         on (a daemon that died), then exit
 *   tetris-test-fake-daemon stall SOCKET  accept connections, read, never
 *                                         answer; runs until killed
 * Exit status: 0 ok (or --help, --version), 1 failure, 2 usage. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"

static int listen_on(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "fake-daemon: socket path too long\n");
        return -1;
    }
    strcpy(sa.sun_path, path);
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
        fprintf(stderr, "fake-daemon: listen on %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static const char usage_text[] =
    "usage: tetris-test-fake-daemon dead|stall SOCKET\n"
    "\n"
    "A broken node daemon at SOCKET, to test the agent's private fallback:\n"
    "  dead    leave a socket file nobody listens on, then exit\n"
    "  stall   accept connections, read, never answer (prints ready); runs\n"
    "          until killed\n"
    "\n"
    "  -h, --help     this text         --version   the version\n"
    "\n"
    "Exit status: 0 ok; 1 failure; 2 usage.\n";

int main(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("tetris-test-fake-daemon %s\n", TETRIS_VERSION);
        return 0;
    }
    if (argc != 3 || (strcmp(argv[1], "dead") != 0 && strcmp(argv[1], "stall") != 0)) {
        fprintf(stderr, "tetris-test-fake-daemon: expected dead|stall SOCKET\n"
                        "Try 'tetris-test-fake-daemon --help'.\n");
        return 2;
    }
    cleanup_close int fd = listen_on(argv[2]);
    if (fd < 0)
        return 1;
    if (strcmp(argv[1], "dead") == 0)
        return 0; /* the file stays, the listener goes: ECONNREFUSED */
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0 && errno == EINTR)
            continue;
        if (c < 0)
            return 1;
        /* keep the connection open and silent: the agent must time out */
    }
}
