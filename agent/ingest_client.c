/* ingest_client.c - the agent's side of the ingest protocol (see
 * ingest_client.h), and the message framing the daemon shares: a 4-byte
 * little-endian length, JSON, descriptors attached to the first byte. Every
 * blocking step waits in poll() against one deadline, so a stalled daemon
 * turns into TETRIS_E_TIMEOUT instead of a hung function instance. */
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
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/log.h"

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

/* Waits until sock is ready for events or the deadline passes. */
static int wait_ready(int sock, short events, int64_t deadline_ms, tetris_error *err)
{
    for (;;) {
        int timeout = -1;
        if (deadline_ms > 0) {
            int64_t left = deadline_ms - clock_mono_ms();
            if (left <= 0)
                return tetris_fail(err, TETRIS_E_TIMEOUT, ETIMEDOUT, "ingest socket: timed out");
            timeout = left > 1000000 ? 1000000 : (int)left;
        }
        struct pollfd p = {.fd = sock, .events = events};
        int n = poll(&p, 1, timeout);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return tetris_fail(err, TETRIS_E_IO, errno, "ingest socket: poll");
    }
}

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int ingest_send_message(int sock, const char *json, size_t len, const int *fds, size_t n_fds,
                        int64_t deadline_ms, tetris_error *err)
{
    if (len > INGEST_MAX_MESSAGE_BYTES)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "ingest message of %zu bytes exceeds %u", len,
                           INGEST_MAX_MESSAGE_BYTES);
    if (n_fds > INGEST_MAX_SOURCES)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%zu descriptors exceed %d", n_fds,
                           INGEST_MAX_SOURCES);
    uint8_t header[4];
    put_le32(header, (uint32_t)len);
    size_t total = sizeof(header) + len;
    size_t sent = 0;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * INGEST_MAX_SOURCES)];
    } control;
    while (sent < total) {
        int rc = wait_ready(sock, POLLOUT, deadline_ms, err);
        if (rc < 0)
            return rc;
        struct iovec iov[2];
        int n_iov = 0;
        if (sent < sizeof(header)) {
            iov[n_iov++] = (struct iovec){header + sent, sizeof(header) - sent};
            iov[n_iov++] = (struct iovec){(void *)json, len};
        } else {
            size_t off = sent - sizeof(header);
            iov[n_iov++] = (struct iovec){(void *)(json + off), len - off};
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
        if (sent == 0 && n_fds > 0) {
            memset(&control, 0, sizeof(control));
            msg.msg_control = control.buf;
            msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
            struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
            memcpy(CMSG_DATA(cm), fds, sizeof(int) * n_fds);
        }
        ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            if (errno == EPIPE || errno == ECONNRESET)
                return tetris_fail(err, TETRIS_E_UNAVAILABLE, errno, "ingest socket: peer gone");
            return tetris_fail(err, TETRIS_E_IO, errno, "ingest socket: sendmsg");
        }
        sent += (size_t)n;
    }
    return 0;
}

static void close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Takes the descriptors of one recvmsg's control data. Returns false if
 * there were more than fit (all of them are closed then). */
static bool collect_fds(struct msghdr *msg, int *fds, size_t max_fds, size_t *n_fds)
{
    bool ok = (msg->msg_flags & MSG_CTRUNC) == 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int got[INGEST_MAX_SOURCES + 8];
        if (n > sizeof(got) / sizeof(got[0]))
            n = sizeof(got) / sizeof(got[0]);
        memcpy(got, CMSG_DATA(cm), n * sizeof(int));
        for (size_t i = 0; i < n; i++) {
            if (*n_fds < max_fds)
                fds[(*n_fds)++] = got[i];
            else {
                close(got[i]);
                ok = false;
            }
        }
    }
    return ok;
}

/* Reads exactly len bytes (descriptors only ride on the header). */
static int recv_exact(int sock, void *buf, size_t len, int64_t deadline_ms, bool first,
                      int *fds, size_t max_fds, size_t *n_fds, bool *fds_ok, tetris_error *err)
{
    size_t got = 0;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * (INGEST_MAX_SOURCES + 8))];
    } control;
    while (got < len) {
        int rc = wait_ready(sock, POLLIN, deadline_ms, err);
        if (rc < 0)
            return rc;
        struct iovec iov = {(char *)buf + got, len - got};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof(control.buf);
        ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            if (errno == ECONNRESET)
                return tetris_fail(err, TETRIS_E_UNAVAILABLE, errno, "ingest socket: peer gone");
            return tetris_fail(err, TETRIS_E_IO, errno, "ingest socket: recvmsg");
        }
        if (msg.msg_controllen > 0 && !collect_fds(&msg, fds, max_fds, n_fds))
            *fds_ok = false;
        if (n == 0) {
            if (first && got == 0)
                return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "ingest socket: closed by peer");
            return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                               "ingest socket: truncated message (%zu of %zu bytes)", got, len);
        }
        got += (size_t)n;
    }
    return 0;
}

int ingest_recv_message(int sock, size_t max_len, char **json, size_t *len, int *fds,
                        size_t max_fds, size_t *n_fds, int64_t deadline_ms, tetris_error *err)
{
    size_t nfd = 0;
    bool fds_ok = true;
    uint8_t header[4];
    int rc = recv_exact(sock, header, sizeof(header), deadline_ms, true, fds, max_fds, &nfd,
                        &fds_ok, err);
    if (rc < 0)
        goto fail;
    if (!fds_ok) {
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "too many descriptors (max %zu)", max_fds);
        goto fail;
    }
    uint32_t n = get_le32(header);
    if (n > max_len) {
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "message of %u bytes exceeds %zu", n,
                         max_len);
        goto fail;
    }
    char *buf = malloc((size_t)n + 1);
    if (buf == NULL) {
        rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "message of %u bytes", n);
        goto fail;
    }
    rc = recv_exact(sock, buf, n, deadline_ms, false, fds, max_fds, &nfd, &fds_ok, err);
    if (rc == 0 && !fds_ok)
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "too many descriptors (max %zu)", max_fds);
    if (rc < 0) {
        free(buf);
        goto fail;
    }
    buf[n] = '\0';
    *json = buf;
    *len = n;
    if (n_fds != NULL)
        *n_fds = nfd;
    return 0;
fail:
    close_fds(fds, nfd);
    if (n_fds != NULL)
        *n_fds = 0;
    return rc;
}

/* ---- client ---- */

static int connect_socket(const char *path, int64_t deadline_ms, int *out, tetris_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "socket path too long: %s", path);
    strcpy(sa.sun_path, path);
    cleanup_close int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sock < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "socket");
    if (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno == ENOENT || errno == ECONNREFUSED || errno == ENOTDIR)
            return tetris_fail(err, TETRIS_E_UNAVAILABLE, errno, "no node daemon at %s", path);
        if (errno != EINPROGRESS && errno != EAGAIN)
            return tetris_fail(err, TETRIS_E_IO, errno, "connect %s", path);
        /* Backlog full: the daemon is alive but not accepting. */
        int rc = wait_ready(sock, POLLOUT, deadline_ms, err);
        if (rc < 0)
            return tetris_wrap(err, "connect %s", path);
    }
    *out = steal_fd(&sock);
    return 0;
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

/* Index of path in the request's sources, adding it (and opening its fd). */
static int source_index(const char *path, json_t *sources, int *fds, size_t *n_fds,
                        tetris_error *err)
{
    for (size_t i = 0; i < json_array_size(sources); i++)
        if (strcmp(json_string_value(json_array_get(sources, i)), path) == 0)
            return (int)i;
    if (*n_fds >= INGEST_MAX_SOURCES)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "model has more than %d source files",
                           INGEST_MAX_SOURCES);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s", path);
    if (json_array_append_new(sources, json_string(path)) < 0) {
        close(fd);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
    }
    fds[(*n_fds)++] = fd;
    return (int)(*n_fds - 1);
}

static json_t *tensor_to_json(const tensor_desc *t, int src)
{
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    char digest[TENSOR_DIGEST_HEX_LEN + 8];
    tensor_digest_to_hex(&t->meta.digest, hex);
    snprintf(digest, sizeof(digest), "sha256:%s", hex);
    json_t *shape = json_array();
    for (int d = 0; shape != NULL && d < t->meta.ndim; d++)
        json_array_append_new(shape, json_integer(t->meta.shape[d]));
    return json_pack("{s:s, s:s, s:o*, s:i, s:I, s:I, s:I, s:s, s:s, s:I}", "name",
                     t->name ? t->name : "", "dtype", t->meta.dtype, "shape", shape,
                     "source_index", src, "offset", (json_int_t)t->offset, "length",
                     (json_int_t)t->length, "nbytes", (json_int_t)t->meta.nbytes, "encoding",
                     t->encoding == TENSOR_ENC_VARINT ? "varint" : "raw", "digest", digest,
                     "crc32", (json_int_t)t->meta.crc32);
}

static int build_request(const char *label, const model *m, char **out, int *fds, size_t *n_fds,
                         tetris_error *err)
{
    json_t *sources = json_array();
    json_t *tensors = json_array();
    json_t *req = json_pack("{s:s, s:s, s:o*, s:o*}", "op", "ingest", "label", label ? label : "",
                            "sources", sources, "tensors", tensors);
    if (req == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
    int rc = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const tensor_desc *t = &m->tensors[i];
        if (!t->has_digest) {
            rc = tetris_fail(err, TETRIS_E_INVAL, 0, "tensor %s has no digest", t->name);
            break;
        }
        int src = source_index(t->source ? t->source : m->path, sources, fds, n_fds, err);
        if (src < 0) {
            rc = src;
            break;
        }
        if (json_array_append_new(tensors, tensor_to_json(t, src)) < 0) {
            rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
            break;
        }
    }
    if (rc == 0) {
        *out = json_dumps(req, JSON_COMPACT);
        if (*out == NULL)
            rc = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
    }
    json_decref(req);
    return rc;
}

static int code_from_name(const char *name)
{
    for (int c = TETRIS_E_INVAL; c <= TETRIS_E_DENIED; c++)
        if (strcmp(tetris_code_name(c), name) == 0)
            return c;
    return TETRIS_E_PROTOCOL;
}

/* Turns {"ok":false,...} into the daemon's error; 0 for {"ok":true}. */
static int check_reply(json_t *reply, tetris_error *err)
{
    if (!json_is_object(reply))
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "daemon reply is not a JSON object");
    if (json_is_true(json_object_get(reply, "ok")))
        return 0;
    const char *code = json_string_value(json_object_get(reply, "error"));
    const char *msg = json_string_value(json_object_get(reply, "message"));
    return tetris_fail(err, code ? code_from_name(code) : TETRIS_E_PROTOCOL, 0,
                       "node daemon refused: %s", msg ? msg : "(no message)");
}

static int parse_results(json_t *reply, const model *m, struct ingest_tensor_result *results,
                         struct ingest_summary *summary, tetris_error *err)
{
    json_t *tensors = json_object_get(reply, "tensors");
    if (!json_is_array(tensors) || json_array_size(tensors) != m->n_tensors)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                           "daemon reply has %zu tensor results, want %zu",
                           json_array_size(tensors), m->n_tensors);
    struct ingest_summary sum = {0};
    for (size_t i = 0; i < m->n_tensors; i++) {
        json_t *t = json_array_get(tensors, i);
        const char *status = json_string_value(json_object_get(t, "status"));
        struct ingest_tensor_result *r = &results[i];
        memset(r, 0, sizeof(*r));
        if (status != NULL && strcmp(status, "resident") == 0) {
            r->status = INGEST_RESIDENT;
            sum.resident++;
        } else if (status != NULL && strcmp(status, "ingested") == 0) {
            r->status = INGEST_INGESTED;
            sum.ingested++;
        } else if (status != NULL && strcmp(status, "rejected") == 0) {
            r->status = INGEST_REJECTED;
            const char *code = json_string_value(json_object_get(t, "error"));
            const char *reason = json_string_value(json_object_get(t, "reason"));
            r->code = code ? code_from_name(code) : TETRIS_E_PROTOCOL;
            snprintf(r->reason, sizeof(r->reason), "%s", reason ? reason : "rejected");
            sum.rejected++;
            if (r->code == TETRIS_E_FULL)
                sum.rejected_full++;
        } else {
            return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "daemon reply: bad status for tensor %zu",
                               i);
        }
    }
    sum.ingested_bytes = (uint64_t)json_integer_value(json_object_get(reply, "ingested_bytes"));
    if (summary != NULL)
        *summary = sum;
    return 0;
}

/* One request/reply exchange on c's socket. */
static int exchange(int sock, const char *request, const int *fds, size_t n_fds,
                    int64_t deadline_ms, json_t **reply, tetris_error *err)
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
    cleanup_free char *text = NULL;
    size_t len;
    rc = ingest_recv_message(sock, INGEST_MAX_MESSAGE_BYTES, &text, &len, NULL, 0, NULL,
                             deadline_ms, err);
    if (rc < 0 && send_failed)
        *err = send_err;
    if (rc < 0)
        return send_failed ? -send_err.code : rc;
    json_error_t jerr;
    *reply = json_loadb(text, len, 0, &jerr);
    if (*reply == NULL)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "daemon reply is not JSON: %s", jerr.text);
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
    json_t *reply = NULL;
    if (rc == 0)
        rc = exchange(c->sock, request, fds, n_fds, deadline, &reply, err);
    close_fds(fds, n_fds);
    if (rc == 0)
        rc = check_reply(reply, err);
    if (rc == 0)
        rc = parse_results(reply, m, results, summary, err);
    json_decref(reply);
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
        log_warn("event=daemon-reregister-partial label=%s rejected=%zu first=%s reason=\"%s\"",
                 c->label, sum.rejected, c->m->tensors[i].name, res[i].reason);
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
                log_warn("event=daemon-reregister-failed label=%s attempts=%u error=\"%s\"",
                         c->label, attempts, err.msg);
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
    json_t *req = json_pack("{s:s, s:s, s:s}", "op", "report_fallback", "label",
                            label ? label : "", "reason", reason ? reason : "");
    cleanup_free char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "request");
    json_t *reply = NULL;
    rc = exchange(sock, text, NULL, 0, deadline, &reply, err);
    if (rc == 0)
        rc = check_reply(reply, err);
    json_decref(reply);
    return rc;
}
