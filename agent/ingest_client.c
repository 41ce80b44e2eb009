/* ingest_client.c - the agent's side of the ingest protocol (see
 * ingest_client.h; the messages and their framing are protocol/ingest.c's).
 * Every blocking step waits in poll() against one deadline, so a stalled
 * daemon turns into TETRIS_E_TIMEOUT instead of a hung function instance. */
#include "agent/ingest_client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/log.h"
#include "protocol/derived.h"

#define DEFAULT_TIMEOUT_MS 30000
/* Re-registration after a lost connection: the first retry comes after
 * about this long, each failure doubles it up to the cap, and each delay
 * is drawn from [d/2, d] so the instances of a node do not all knock on a
 * restarted daemon at the same instant. */
#define REREGISTER_FIRST_DELAY_MS 100
#define REREGISTER_MAX_DELAY_MS 5000

struct ingest_client {
    int sock; /* -1 while the watcher is between connections */
    int timeout_ms;
    char *socket_path;
    /* The last successful ingest, for re-registration. */
    char *label;
    const model *m;
    /* ingest_client_keep_registered's watcher */
    bool watching;
    int stop_fd; /* eventfd: readable once the client closes */
    pthread_t watcher;
    /* Guards sock against the watcher replacing it while close shuts it
     * down (which wakes a watcher waiting on a stalled daemon). */
    pthread_mutex_t sock_lock;
    bool closing;
};

/* ---- client ---- */

/* Backoff between connects while the daemon's backlog is full. */
#define BUSY_RETRY_FIRST_MS 5
#define BUSY_RETRY_MAX_MS 500

/* A full backlog (EAGAIN: a Unix socket connects at once or not at all)
 * means the daemon is alive but behind, e.g. a burst of instances starting
 * together: try again, with backoff, until the deadline, rather than load
 * privately for the instance's whole life. */
static int connect_socket(const char *path, int64_t deadline_ms, int *out, tetris_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "socket path too long: %s", path);
    strcpy(sa.sun_path, path);
    int64_t delay_ms = BUSY_RETRY_FIRST_MS;
    for (unsigned attempt = 1;; attempt++) {
        cleanup_close int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (sock < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "socket");
        if (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            *out = steal_fd(&sock);
            return 0;
        }
        if (errno == ENOENT || errno == ECONNREFUSED || errno == ENOTDIR)
            return tetris_fail(err, TETRIS_E_UNAVAILABLE, errno, "no node daemon at %s", path);
        if (errno != EAGAIN)
            return tetris_fail(err, TETRIS_E_IO, errno, "connect %s", path);
        int64_t left = deadline_ms - clock_mono_ms();
        if (left <= 0)
            return tetris_fail(err, TETRIS_E_TIMEOUT, EAGAIN,
                               "connect %s: the daemon's backlog stayed full (%u attempts)", path,
                               attempt);
        if (attempt == 1)
            log_info("event=daemon-busy socket=%s action=retry", LOG_Q(path));
        int64_t nap = delay_ms < left ? delay_ms : left;
        struct timespec ts = {.tv_sec = nap / 1000, .tv_nsec = (nap % 1000) * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
        delay_ms = delay_ms * 2 < BUSY_RETRY_MAX_MS ? delay_ms * 2 : BUSY_RETRY_MAX_MS;
    }
}

int ingest_client_connect(const char *socket_path, int timeout_ms, ingest_client **out,
                          tetris_error *err)
{
    if (timeout_ms <= 0)
        timeout_ms = DEFAULT_TIMEOUT_MS;
    int sock;
    int rc = connect_socket(socket_path, clock_mono_ms() + timeout_ms, &sock, err);
    if (rc < 0)
        return rc;
    ingest_client *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->socket_path = strdup(socket_path)) == NULL) {
        free(c);
        close(sock);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "ingest client");
    }
    c->sock = sock;
    c->timeout_ms = timeout_ms;
    c->stop_fd = -1;
    pthread_mutex_init(&c->sock_lock, NULL);
    *out = c;
    return 0;
}

/* Replaces the client's socket (-1: none); the watcher's side of
 * sock_lock. A client closing meanwhile gets a socket already shut down. */
static void set_sock(ingest_client *c, int sock)
{
    pthread_mutex_lock(&c->sock_lock);
    if (c->sock >= 0)
        close(c->sock);
    c->sock = sock;
    if (c->closing && sock >= 0)
        shutdown(sock, SHUT_RDWR);
    pthread_mutex_unlock(&c->sock_lock);
}

void ingest_client_close(ingest_client *c)
{
    if (c == NULL)
        return;
    if (c->watching) {
        /* Stop first, so that the watcher reads the shutdown below as the
         * stop and not as a lost daemon; the shutdown ends any exchange it
         * is waiting in. */
        uint64_t one = 1;
        while (write(c->stop_fd, &one, sizeof(one)) < 0 && errno == EINTR)
            ;
        pthread_mutex_lock(&c->sock_lock);
        c->closing = true;
        if (c->sock >= 0)
            shutdown(c->sock, SHUT_RDWR);
        pthread_mutex_unlock(&c->sock_lock);
        pthread_join(c->watcher, NULL);
    }
    pthread_mutex_destroy(&c->sock_lock);
    if (c->stop_fd >= 0)
        close(c->stop_fd);
    if (c->sock >= 0)
        close(c->sock);
    free(c->socket_path);
    free(c->label);
    free(c);
}

void ingest_client_interrupt(ingest_client *c)
{
    pthread_mutex_lock(&c->sock_lock);
    if (c->sock >= 0)
        shutdown(c->sock, SHUT_RDWR);
    pthread_mutex_unlock(&c->sock_lock);
}

static void close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
}

/* The request for m, with a descriptor of each of its sources open. */
static int build_request(const char *label, const model *m, char **out, int *fds, size_t *n_fds,
                         tetris_error *err)
{
    const char *sources[INGEST_MAX_SOURCES];
    size_t n_sources;
    int rc = ingest_request_encode(label, m, out, sources, &n_sources, err);
    for (size_t i = 0; rc == 0 && i < n_sources; i++) {
        fds[i] = open(sources[i], O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0)
            rc = tetris_fail(err, TETRIS_E_IO, errno, "open %s", sources[i]);
        else
            *n_fds = i + 1;
    }
    if (rc < 0) {
        close_fds(fds, *n_fds);
        *n_fds = 0;
        free(*out);
        *out = NULL;
    }
    return rc;
}

/* One request/reply exchange on sock; *reply is malloc'd. */
static int exchange(int sock, const char *request, const int *fds, size_t n_fds,
                    int64_t deadline_ms, char **reply, size_t *reply_len, tetris_error *err)
{
    int rc = ingest_send_message(sock, request, strlen(request), fds, n_fds, deadline_ms, err);
    bool send_failed = rc < 0;
    if (rc < 0 && rc != -TETRIS_E_UNAVAILABLE)
        return rc;
    /* A daemon that turns a client away (too many connections) answers and
     * closes before reading: its reason is still waiting in the socket. */
    tetris_error send_err;
    if (send_failed)
        send_err = *err;
    rc = ingest_recv_message(sock, INGEST_MAX_MESSAGE_BYTES, reply, reply_len, NULL, 0, NULL,
                             deadline_ms, err);
    if (rc < 0 && send_failed)
        *err = send_err;
    if (rc < 0)
        return send_failed ? -send_err.code : rc;
    return 0;
}

int ingest_client_ingest(ingest_client *c, const char *label, const model *m,
                         struct ingest_tensor_result *results, struct ingest_summary *summary,
                         tetris_error *err)
{
    int64_t deadline = clock_mono_ms() + c->timeout_ms;
    int fds[INGEST_MAX_SOURCES];
    size_t n_fds = 0;
    cleanup_free char *request = NULL;
    int rc = build_request(label, m, &request, fds, &n_fds, err);
    cleanup_free char *reply = NULL;
    size_t reply_len = 0;
    if (rc == 0)
        rc = exchange(c->sock, request, fds, n_fds, deadline, &reply, &reply_len, err);
    close_fds(fds, n_fds);
    if (rc == 0)
        rc = ingest_reply_decode(reply, reply_len, m->n_tensors, results, summary, err);
    /* A tensor sent without its identity is mapped by the one the daemon
     * computed: a reply without it is no answer. */
    for (size_t i = 0; rc == 0 && i < m->n_tensors; i++)
        if (!m->tensors[i].has_digest && results[i].status != INGEST_REJECTED &&
            !results[i].has_digest)
            rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                             "daemon reply: tensor %zu (%s) sent without a digest got none", i,
                             m->tensors[i].name);
    if (rc == 0 && label != c->label) {
        char *copy = strdup(label != NULL ? label : "");
        if (copy == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "ingest client");
        free(c->label);
        c->label = copy;
    }
    if (rc == 0)
        c->m = m;
    return rc;
}

int ingest_client_gpu_attach(ingest_client *c, const char *device, const tensor_digest *digests,
                             size_t n, struct ingest_gpu_result *results, int *fds,
                             tetris_error *err)
{
    for (size_t i = 0; i < n; i++)
        fds[i] = -1;
    if (n == 0 || n > INGEST_MAX_GPU_TENSORS)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "gpu_attach of %zu tensors (1 to %d)", n,
                           INGEST_MAX_GPU_TENSORS);
    int64_t deadline = clock_mono_ms() + c->timeout_ms;
    cleanup_free char *request = ingest_gpu_attach_encode(device, digests, n);
    if (request == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "gpu_attach request");
    int rc = ingest_send_message(c->sock, request, strlen(request), NULL, 0, deadline, err);
    cleanup_free char *reply = NULL;
    size_t reply_len = 0;
    int got[INGEST_MAX_GPU_TENSORS];
    size_t n_got = 0;
    if (rc == 0)
        rc = ingest_recv_message(c->sock, INGEST_MAX_MESSAGE_BYTES, &reply, &reply_len, got,
                                 INGEST_MAX_GPU_TENSORS, &n_got, deadline, err);
    if (rc == 0)
        rc = ingest_gpu_reply_decode(reply, reply_len, n, n_got, results, err);
    if (rc < 0) {
        close_fds(got, n_got);
        return rc;
    }
    for (size_t i = 0, k = 0; i < n; i++)
        if (results[i].attached)
            fds[i] = got[k++];
    return 0;
}

int ingest_client_derive(ingest_client *c, const char *label, int image_fd, const char *runtime,
                         int timeout_ms, bool *answered, tetris_error *err)
{
    *answered = false;
    int64_t deadline = clock_mono_ms() + timeout_ms;
    cleanup_free char *request = ingest_derive_encode(label, DERIVED_TRANSFORM_ORT, runtime);
    if (request == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "derive request");
    int rc = ingest_send_message(c->sock, request, strlen(request), &image_fd, 1, deadline, err);
    cleanup_free char *reply = NULL;
    size_t reply_len = 0, n_got = 0;
    if (rc == 0)
        rc = ingest_recv_message(c->sock, INGEST_MAX_MESSAGE_BYTES, &reply, &reply_len, NULL, 0,
                                 &n_got, deadline, err);
    *answered = rc == 0;
    if (rc == 0)
        rc = ingest_ack_decode(reply, reply_len, err);
    return rc;
}

int ingest_client_pull(ingest_client *c, const char *label, const char *ref, int timeout_ms,
                       struct ingest_pull_result *out, int fds[2], tetris_error *err)
{
    int64_t deadline = clock_mono_ms() + (timeout_ms > 0 ? timeout_ms : c->timeout_ms);
    cleanup_free char *request = ingest_pull_encode(label, ref);
    if (request == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "pull request");
    int rc = ingest_send_message(c->sock, request, strlen(request), NULL, 0, deadline, err);
    cleanup_free char *reply = NULL;
    size_t reply_len = 0, n_got = 0;
    fds[0] = fds[1] = -1;
    int got[2] = {-1, -1};
    if (rc == 0)
        rc = ingest_recv_message(c->sock, INGEST_MAX_MESSAGE_BYTES, &reply, &reply_len, got, 2,
                                 &n_got, deadline, err);
    if (rc == 0)
        rc = ingest_pull_reply_decode(reply, reply_len, n_got, out, err);
    for (size_t i = 0; i < 2; i++) {
        if (rc == 0)
            fds[i] = got[i];
        else if (i < n_got)
            close(got[i]);
    }
    return rc;
}

/* ---- staying registered across daemon restarts ---- */

/* Sleeps about delay_ms (see REREGISTER_FIRST_DELAY_MS). Returns false if
 * the client is closing. */
static bool backoff(const ingest_client *c, int delay_ms, unsigned *seed)
{
    int ms = delay_ms / 2 + (int)((unsigned)rand_r(seed) % (unsigned)(delay_ms / 2 + 1));
    struct pollfd p = {.fd = c->stop_fd, .events = POLLIN};
    int64_t deadline = clock_mono_ms() + ms;
    for (;;) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0)
            return true;
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return false;
        if (n < 0 && errno != EINTR)
            return false; /* cannot wait: give up rather than spin */
    }
}

/* Blocks until the daemon's end of the connection goes away (true) or the
 * client is closing (false). The daemon sends nothing unasked, so anything
 * readable is the end of the connection (or a daemon out of step with us:
 * starting over is right then too). */
static bool wait_connection_lost(const ingest_client *c)
{
    struct pollfd p[2] = {
        {.fd = c->sock, .events = POLLIN | POLLRDHUP},
        {.fd = c->stop_fd, .events = POLLIN},
    };
    for (;;) {
        int n = poll(p, 2, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || p[1].revents != 0)
            return false;
        if (p[0].revents != 0)
            return true;
    }
}

/* A new connection carrying the last ingest request again: the daemon at
 * the other end records our references in a holder of its own (tensors it
 * no longer has are ingested again from the sources). */
static int reregister(ingest_client *c, tetris_error *err)
{
    int sock;
    int rc = connect_socket(c->socket_path, clock_mono_ms() + c->timeout_ms, &sock, err);
    if (rc < 0)
        return rc;
    set_sock(c, sock);
    cleanup_free struct ingest_tensor_result *res = calloc(c->m->n_tensors + 1, sizeof(*res));
    struct ingest_summary sum = {0};
    if (res == NULL)
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "re-registration");
    if (rc == 0)
        rc = ingest_client_ingest(c, c->label, c->m, res, &sum, err);
    if (rc < 0) {
        set_sock(c, -1);
        return rc;
    }
    if (sum.rejected > 0) {
        /* Our mappings stay valid; only these tensors go unreferenced. */
        size_t i = 0;
        while (res[i].status != INGEST_REJECTED)
            i++;
        log_warn("event=daemon-reregister-partial label=%s rejected=%zu first=%s reason=%s",
                 LOG_Q(c->label), sum.rejected, LOG_Q(c->m->tensors[i].name), LOG_Q(res[i].reason));
    }
    log_info("event=daemon-reregistered label=%s tensors=%zu ingested_bytes=%llu", c->label,
             sum.resident + sum.ingested, (unsigned long long)sum.ingested_bytes);
    return 0;
}

static void *watch_main(void *arg)
{
    ingest_client *c = arg;
    unsigned seed = (unsigned)getpid() ^ (unsigned)clock_mono_ms();
    while (wait_connection_lost(c)) {
        log_warn("event=daemon-connection-lost label=%s socket=%s action=reconnect", c->label,
                 c->socket_path);
        set_sock(c, -1);
        int delay = REREGISTER_FIRST_DELAY_MS;
        unsigned attempts = 0;
        for (;;) {
            tetris_error err;
            if (!backoff(c, delay, &seed))
                return NULL;
            attempts++;
            if (reregister(c, &err) == 0)
                break;
            /* Attempts 1, 2, 4, 8, ...: a daemon gone for hours costs a
             * dozen lines, not thousands. */
            if ((attempts & (attempts - 1)) == 0)
                log_warn("event=daemon-reregister-failed label=%s attempts=%u msg=%s",
                         LOG_Q(c->label), attempts, LOG_Q(err.msg));
            delay = delay * 2 > REREGISTER_MAX_DELAY_MS ? REREGISTER_MAX_DELAY_MS : delay * 2;
        }
    }
    return NULL;
}

int ingest_client_keep_registered(ingest_client *c, tetris_error *err)
{
    if (c->m == NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "nothing registered to keep");
    if (c->watching)
        return 0;
    c->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (c->stop_fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "eventfd");
    /* The watcher takes no signals: they stay with the threads that wait
     * for them (hold.c's ppoll), whatever the process's disposition. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->watcher, NULL, watch_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return tetris_fail(err, TETRIS_E_IO, rc, "start the daemon connection watcher");
    c->watching = true;
    return 0;
}

int ingest_report_fallback(const char *socket_path, const char *label, const char *reason,
                           int timeout_ms, tetris_error *err)
{
    if (timeout_ms <= 0)
        timeout_ms = DEFAULT_TIMEOUT_MS;
    int64_t deadline = clock_mono_ms() + timeout_ms;
    cleanup_close int sock = -1;
    int rc = connect_socket(socket_path, deadline, &sock, err);
    if (rc < 0)
        return rc;
    cleanup_free char *text = ingest_fallback_encode(label, reason);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
    cleanup_free char *reply = NULL;
    size_t reply_len = 0;
    rc = exchange(sock, text, NULL, 0, deadline, &reply, &reply_len, err);
    if (rc == 0)
        rc = ingest_ack_decode(reply, reply_len, err);
    return rc;
}
