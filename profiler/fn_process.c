/* fn_process.c - start, wait for and stop a tetris-function process (see
 * fn_process.h). */
#include "profiler/fn_process.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "protocol/names.h"

int fn_process_default_bin(char *buf, size_t len, tetris_error *err)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "readlink /proc/self/exe");
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    if ((size_t)snprintf(buf, len, "%s/tetris-function", self) >= len)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "path too long");
    return 0;
}

static void set_env_int(const char *name, long v)
{
    char text[32];
    snprintf(text, sizeof(text), "%ld", v);
    setenv(name, text, 1);
}

/* In the child: join the cgroup, wire stdout to the pipe and exec. Only
 * async-signal-safe calls, then _exit(127) if anything fails. */
static void exec_child(const struct fn_process_options *o, int out_fd)
{
    if (o->cgroup_procs != NULL) {
        char pid[32];
        int n = snprintf(pid, sizeof(pid), "%d", (int)getpid());
        int fd = open(o->cgroup_procs, O_WRONLY);
        if (fd < 0 || write(fd, pid, (size_t)n) != n)
            _exit(126);
        close(fd);
    }
    if (o->log_path != NULL) {
        int log_fd = open(o->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (log_fd < 0 || dup2(log_fd, STDERR_FILENO) < 0)
            _exit(127);
    }
    if (dup2(out_fd, STDOUT_FILENO) < 0)
        _exit(127);
    const char *argv[] = {o->function_bin, "--listen", "127.0.0.1:0",
                          o->store_dir == NULL ? "--private" : o->direct ? "--direct" : NULL,
                          NULL};
    execv(o->function_bin, (char *const *)argv);
    _exit(127);
}

static int read_ready_line(int fd, int timeout_s, char *buf, size_t len, tetris_error *err)
{
    size_t used = 0;
    int64_t deadline = clock_mono_ms() + timeout_s * 1000L;
    for (;;) {
        int64_t left_ms = deadline - clock_mono_ms();
        if (left_ms <= 0)
            return tetris_fail(err, TETRIS_E_TIMEOUT, 0, "no ready line within %d s", timeout_s);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)left_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "poll");
        if (r == 0)
            continue;
        ssize_t n = read(fd, buf + used, len - 1 - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return tetris_fail(err, TETRIS_E_RUNTIME, n < 0 ? errno : 0,
                               "tetris-function exited before it was ready");
        used += (size_t)n;
        buf[used] = '\0';
        if (strchr(buf, '\n') != NULL)
            return 0;
        if (used == len - 1)
            return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "ready line too long");
    }
}

static int parse_ready(const char *line, fn_process *p, tetris_error *err)
{
    json_error_t je;
    json_t *j = json_loads(line, JSON_DISABLE_EOF_CHECK, &je);
    json_int_t port = 0, shared = 0;
    const char *batching = NULL;
    int fell_back = 0;
    int r = 0;
    if (j == NULL || json_unpack(j, "{s:I, s:s, s:I, s:b}", "port", &port, "batching", &batching,
                                 "shared_bytes", &shared, "fell_back", &fell_back) < 0 ||
        port <= 0 || port > 65535)
        r = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "bad ready line: %s", line);
    if (r == 0) {
        p->port = (unsigned)port;
        snprintf(p->url, sizeof(p->url), "http://127.0.0.1:%u", p->port);
        p->shared_bytes = (uint64_t)shared;
        p->batching_concat = strcmp(batching, "concat") == 0;
        p->fell_back = fell_back != 0;
    }
    json_decref(j);
    return r;
}

int fn_process_start(const struct fn_process_options *o, fn_process *out, tetris_error *err)
{
    int fds[2];
    char line[4096];
    int r;

    memset(out, 0, sizeof(*out));
    out->pid = -1;
    if (pipe2(fds, O_CLOEXEC) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "pipe");
    /* The environment is the configuration, as in a pod. */
    setenv(TETRIS_ENV_MODEL, o->model, 1);
    set_env_int(TETRIS_ENV_BATCH, o->batch);
    set_env_int(TETRIS_ENV_CONCURRENCY, o->concurrency);
    set_env_int(TETRIS_ENV_THREADS, o->threads);
    char wait_ms[32];
    snprintf(wait_ms, sizeof(wait_ms), "%g", o->max_wait_ms);
    setenv(TETRIS_ENV_MAX_WAIT_MS, wait_ms, 1);
    if (o->store_dir != NULL)
        setenv(TETRIS_ENV_STORE, o->store_dir, 1);
    else
        unsetenv(TETRIS_ENV_STORE);
    pid_t pid = fork();
    if (pid < 0) {
        r = tetris_fail(err, TETRIS_E_IO, errno, "fork");
        close(fds[0]);
        close(fds[1]);
        return r;
    }
    if (pid == 0)
        exec_child(o, fds[1]);
    close(fds[1]);
    cleanup_close int rd = fds[0];
    out->pid = pid;
    r = read_ready_line(rd, o->ready_timeout_s > 0 ? o->ready_timeout_s : 120, line,
                        sizeof(line), err);
    if (r == 0)
        r = parse_ready(line, out, err);
    if (r < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        out->pid = -1;
        return tetris_wrap(err, "%s (log: %s)", o->function_bin,
                           o->log_path != NULL ? o->log_path : "stderr");
    }
    return 0;
}

int fn_process_stop(fn_process *p, tetris_error *err)
{
    int status = 0;
    if (p->pid <= 0)
        return 0;
    kill(p->pid, SIGTERM);
    while (waitpid(p->pid, &status, 0) < 0) {
        if (errno != EINTR) {
            p->pid = -1;
            return tetris_fail(err, TETRIS_E_IO, errno, "waitpid");
        }
    }
    p->pid = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "tetris-function ended with status %d",
                           WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return 0;
}
