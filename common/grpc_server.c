/* grpc_server.c - the unary gRPC server of grpc.h on nghttp2: a thread
 * accepts on the Unix socket, a thread per connection feeds nghttp2 what
 * it reads (nghttp2_session_mem_recv) and writes what nghttp2 has to send
 * (nghttp2_session_mem_send), so the HTTP/2 state machine (settings, flow
 * control, HPACK, pings, GOAWAY) is the library's and the framing of
 * calls is ours.
 *
 * A request stream collects its :path, :method, content-type and DATA
 * (bounded by the message limit; past it the rest is dropped and the call
 * answered RESOURCE_EXHAUSTED), and is answered when its END_STREAM
 * arrives, from inside nghttp2's frame callback, by the method's handler.
 * A stream is freed when nghttp2 closes it, answered or reset.
 *
 * nghttp2's HTTP messaging checks are off: grpc-go before 1.30 or so (the
 * kubelet's, in Kubernetes 1.20) sends the Unix socket's path as
 * :authority, whose '/' nghttp2 would answer with RST_STREAM
 * PROTOCOL_ERROR, and there is no way to relax that one check. What a
 * call needs is checked here instead: POST, a gRPC content-type, a :path
 * of printable ASCII that names a method; the other headers are ignored. */
#include "common/grpc.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "common/cleanup.h"
#include "common/log.h"

#define READ_CHUNK_BYTES (16u << 10)
#define MAX_CONCURRENT_STREAMS 8
#define PATH_MAX_BYTES 256
#define SEND_TIMEOUT_S 30

struct grpc_server {
    struct grpc_server_options o;
    int listen_fd;
    pthread_t acceptor;
    bool acceptor_started;
    atomic_bool stopping;
    pthread_mutex_t lock; /* conns, n_conns */
    pthread_cond_t drained;
    struct conn *conns;
    unsigned n_conns;
};

struct conn {
    grpc_server *srv;
    int fd;
    nghttp2_session *session;
    struct conn *next;
    uint64_t calls;
};

struct stream {
    char path[PATH_MAX_BYTES];
    bool path_bad, method_ok, content_type_ok;
    uint8_t *body;
    size_t body_len, body_cap;
    bool too_big;
    /* the answer's DATA: prefix + message */
    uint8_t *out;
    size_t out_len, out_off;
};

static void stream_free(struct stream *st)
{
    if (st == NULL)
        return;
    free(st->body);
    free(st->out);
    free(st);
}

/* ---- answering ---- */

#define NV(name, value)                                                                            \
    {                                                                                              \
        (uint8_t *)(name), (uint8_t *)(value), sizeof(name) - 1, strlen(value),                    \
            NGHTTP2_NV_FLAG_NONE                                                                   \
    }

static void answer_http(struct conn *c, int32_t id, const char *status)
{
    nghttp2_nv nva[] = {NV(":status", status)};
    if (nghttp2_submit_response(c->session, id, nva, 1, NULL) != 0)
        nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
}

/* A trailers-only answer: the call failed before any message. */
static void answer_status(struct conn *c, int32_t id, int status, const char *message)
{
    char code[16], encoded[3 * GRPC_MESSAGE_MAX + 1];
    snprintf(code, sizeof(code), "%d", status);
    grpc_percent_encode(message, encoded, sizeof(encoded));
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                        NV("grpc-status", code), NV("grpc-message", encoded)};
    if (nghttp2_submit_response(c->session, id, nva, 4, NULL) != 0)
        nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
}

static ssize_t read_answer(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    (void)user_data;
    struct stream *st = source->ptr;
    size_t n = st->out_len - st->out_off;
    if (n > length)
        n = length;
    memcpy(buf, st->out + st->out_off, n);
    st->out_off += n;
    if (st->out_off == st->out_len) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        nghttp2_nv trailers[] = {NV("grpc-status", "0")};
        if (nghttp2_submit_trailer(session, id, trailers, 1) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

static void answer_message(struct conn *c, int32_t id, struct stream *st, uint8_t *body, size_t len)
{
    st->out = malloc(GRPC_PREFIX_BYTES + len);
    if (st->out == NULL) {
        answer_status(c, id, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    grpc_frame_prefix(st->out, (uint32_t)len);
    if (len > 0)
        memcpy(st->out + GRPC_PREFIX_BYTES, body, len);
    st->out_len = GRPC_PREFIX_BYTES + len;
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_answer};
    if (nghttp2_submit_response(c->session, id, nva, 2, &prd) != 0)
        nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
}

static const struct grpc_method *find_method(const grpc_server *s, const char *path)
{
    for (const struct grpc_method *m = s->o.methods; m->path != NULL; m++)
        if (strcmp(m->path, path) == 0)
            return m;
    return NULL;
}

/* The request is complete: check it, run its handler, answer. */
static void serve_call(struct conn *c, int32_t id, struct stream *st)
{
    const grpc_server *s = c->srv;
    if (!st->method_ok) {
        answer_http(c, id, "405");
        return;
    }
    if (!st->content_type_ok) {
        answer_http(c, id, "415");
        return;
    }
    const struct grpc_method *m = st->path_bad ? NULL : find_method(s, st->path);
    if (m == NULL) {
        answer_status(c, id, GRPC_UNIMPLEMENTED, "unknown method");
        log_debug("event=grpc-call server=%s path=%s status=UNIMPLEMENTED", s->o.name,
                  LOG_Q(st->path));
        return;
    }
    if (st->too_big) {
        char msg[128];
        snprintf(msg, sizeof(msg), "request message over the limit of %zu bytes",
                 s->o.max_message_bytes);
        answer_status(c, id, GRPC_RESOURCE_EXHAUSTED, msg);
        return;
    }
    const uint8_t *msg;
    size_t len;
    tetris_error err = {0};
    int status = grpc_unframe(st->body, st->body_len, s->o.max_message_bytes, &msg, &len, &err);
    if (status != 0) {
        answer_status(c, id, status, err.msg);
        log_info("event=grpc-bad-request server=%s path=%s status=%s msg=%s", s->o.name,
                 LOG_Q(st->path), grpc_status_name(status), LOG_Q(err.msg));
        return;
    }
    struct grpc_reply reply = {.status = GRPC_OK};
    m->handler(s->o.ctx, msg, len, &reply);
    c->calls++;
    log_debug("event=grpc-call server=%s path=%s status=%s", s->o.name, LOG_Q(st->path),
              grpc_status_name(reply.status));
    if (reply.status == GRPC_OK)
        answer_message(c, id, st, reply.body, reply.body_len);
    else
        answer_status(c, id, reply.status, reply.message);
    free(reply.body);
}

/* ---- nghttp2's callbacks ---- */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    (void)user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct stream *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, st) != 0) {
        free(st);
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

static bool is_grpc_content_type(const uint8_t *v, size_t len)
{
    static const char want[] = "application/grpc";
    size_t n = sizeof(want) - 1;
    return len >= n && memcmp(v, want, n) == 0 && (len == n || v[n] == '+' || v[n] == ';');
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    (void)flags;
    (void)user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct stream *st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (st == NULL)
        return 0;
    if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
        st->path_bad = valuelen >= sizeof(st->path);
        for (size_t i = 0; i < valuelen && !st->path_bad; i++)
            st->path_bad = value[i] < '!' || value[i] > '~';
        if (!st->path_bad) {
            memcpy(st->path, value, valuelen);
            st->path[valuelen] = '\0';
        }
    } else if (namelen == 7 && memcmp(name, ":method", 7) == 0) {
        st->method_ok = valuelen == 4 && memcmp(value, "POST", 4) == 0;
    } else if (namelen == 12 && memcmp(name, "content-type", 12) == 0) {
        st->content_type_ok = is_grpc_content_type(value, valuelen);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user_data)
{
    (void)flags;
    struct conn *c = user_data;
    struct stream *st = nghttp2_session_get_stream_user_data(session, id);
    if (st == NULL || st->too_big)
        return 0;
    size_t limit = c->srv->o.max_message_bytes + GRPC_PREFIX_BYTES;
    if (len > limit - st->body_len) {
        st->too_big = true; /* the rest is read and dropped; the call is refused */
        free(st->body);
        st->body = NULL;
        st->body_len = st->body_cap = 0;
        return 0;
    }
    if (st->body_len + len > st->body_cap) {
        size_t cap = st->body_cap ? st->body_cap : 256;
        while (cap < st->body_len + len)
            cap *= 2;
        uint8_t *b = realloc(st->body, cap);
        if (b == NULL)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        st->body = b;
        st->body_cap = cap;
    }
    memcpy(st->body + st->body_len, data, len);
    st->body_len += len;
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    struct conn *c = user_data;
    if ((frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS) ||
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0)
        return 0;
    struct stream *st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (st != NULL && st->out == NULL)
        serve_call(c, frame->hd.stream_id, st);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t id, uint32_t error_code,
                           void *user_data)
{
    (void)error_code;
    (void)user_data;
    stream_free(nghttp2_session_get_stream_user_data(session, id));
    nghttp2_session_set_stream_user_data(session, id, NULL);
    return 0;
}

/* ---- connections ---- */

static int send_pending(struct conn *c)
{
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->session, &data);
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        while (n > 0) {
            ssize_t w = send(c->fd, data, (size_t)n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return -1; /* the peer is gone, or stopped reading for SEND_TIMEOUT_S */
            data += w;
            n -= w;
        }
    }
}

static int session_new(struct conn *c)
{
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return -1;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_option *opt;
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cb);
        return -1;
    }
    nghttp2_option_set_no_http_messaging(opt, 1);
    int rc = nghttp2_session_server_new2(&c->session, cb, c, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0)
        return -1;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_CONCURRENT_STREAMS},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16u << 10},
    };
    return nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, 2) == 0 ? 0 : -1;
}

/* Reads and answers until the peer leaves, breaks the protocol, idles past
 * the timeout or the server stops. */
static void serve_connection(struct conn *c)
{
    grpc_server *s = c->srv;
    uint8_t buf[READ_CHUNK_BYTES];
    const char *why = "closed";
    int idle_ms = (int)(s->o.idle_timeout_s * 1000);

    if (session_new(c) < 0) {
        log_warn("event=grpc-connection-failed server=%s reason=nghttp2-session", s->o.name);
        return;
    }
    while (!atomic_load(&s->stopping)) {
        if (send_pending(c) < 0) {
            why = "write-failed";
            break;
        }
        if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session))
            break;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int r = poll(&p, 1, idle_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            why = "idle";
            break;
        }
        ssize_t n = r < 0 ? -1 : read(c->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        ssize_t used = nghttp2_session_mem_recv(c->session, buf, (size_t)n);
        if (used < 0) {
            /* Not HTTP/2, or a broken one: say so in a GOAWAY where the
             * peer can still read it, and end this connection only. */
            log_info("event=grpc-bad-connection server=%s msg=%s", s->o.name,
                     LOG_Q(nghttp2_strerror((int)used)));
            nghttp2_session_terminate_session(c->session, NGHTTP2_PROTOCOL_ERROR);
            (void)send_pending(c); /* best effort: the connection ends either way */
            why = "protocol-error";
            break;
        }
    }
    log_debug("event=grpc-connection-end server=%s reason=%s calls=%llu", s->o.name, why,
              (unsigned long long)c->calls);
    nghttp2_session_del(c->session);
}

static void conn_unlink(grpc_server *s, struct conn *c)
{
    pthread_mutex_lock(&s->lock);
    for (struct conn **p = &s->conns; *p != NULL; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    s->n_conns--;
    pthread_cond_broadcast(&s->drained);
    pthread_mutex_unlock(&s->lock);
}

static void *connection_thread(void *arg)
{
    struct conn *c = arg;
    serve_connection(c);
    conn_unlink(c->srv, c);
    close(c->fd);
    free(c);
    return NULL;
}

/* Hands fd to a thread of its own, or closes it when the server is full. */
static void take_connection(grpc_server *s, int fd)
{
    struct timeval tv = {.tv_sec = SEND_TIMEOUT_S};
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
        close(fd);
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return;
    }
    c->srv = s;
    c->fd = fd;
    pthread_mutex_lock(&s->lock);
    bool full = s->n_conns >= s->o.max_connections || atomic_load(&s->stopping);
    if (!full) {
        c->next = s->conns;
        s->conns = c;
        s->n_conns++;
    }
    pthread_mutex_unlock(&s->lock);
    if (full) {
        log_warn("event=grpc-connection-refused server=%s reason=max-connections limit=%u",
                 s->o.name, s->o.max_connections);
        close(fd);
        free(c);
        return;
    }
    pthread_t t;
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &attr, connection_thread, c);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        log_warn("event=grpc-connection-refused server=%s reason=thread msg=%s", s->o.name,
                 LOG_Q(strerror(rc)));
        conn_unlink(s, c);
        close(fd);
        free(c);
    }
}

static void *accept_thread(void *arg)
{
    grpc_server *s = arg;
    while (!atomic_load(&s->stopping)) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (atomic_load(&s->stopping))
                break;
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
                log_warn("event=grpc-accept-failed server=%s msg=%s", s->o.name,
                         LOG_Q(strerror(errno)));
                poll(NULL, 0, 100); /* let a connection end before trying again */
                continue;
            }
            log_error("event=grpc-accept-failed server=%s msg=%s action=stop-accepting", s->o.name,
                      LOG_Q(strerror(errno)));
            break;
        }
        take_connection(s, fd);
    }
    return NULL;
}

/* ---- the socket ---- */

static int bind_socket(grpc_server *s, tetris_error *err)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    const char *path = s->o.socket_path;
    if (strlen(path) >= sizeof(addr.sun_path))
        return tetris_fail(err, TETRIS_E_INVAL, ENAMETOOLONG, "socket path %s: too long", path);
    strcpy(addr.sun_path, path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return tetris_fail(err, TETRIS_E_INVAL, 0,
                               "socket path %s: a file that is not a socket is there", path);
        if (unlink(path) < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "remove the old socket %s", path);
    }
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "socket");
    if (bind(s->listen_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "bind %s", path);
    if (chmod(path, s->o.socket_mode) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "chmod %s", path);
    if (listen(s->listen_fd, 64) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "listen %s", path);
    return 0;
}

int grpc_server_start(const struct grpc_server_options *o, grpc_server **out, tetris_error *err)
{
    grpc_server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    s->o = *o;
    if (s->o.max_message_bytes == 0)
        s->o.max_message_bytes = GRPC_DEFAULT_MAX_MESSAGE_BYTES;
    if (s->o.max_connections == 0)
        s->o.max_connections = 16;
    if (s->o.socket_mode == 0)
        s->o.socket_mode = 0600;
    if (s->o.idle_timeout_s <= 0)
        s->o.idle_timeout_s = 300;
    if (s->o.name == NULL)
        s->o.name = "grpc";
    s->listen_fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->drained, NULL);
    int r = bind_socket(s, err);
    if (r == 0) {
        int rc = pthread_create(&s->acceptor, NULL, accept_thread, s);
        if (rc != 0)
            r = tetris_fail(err, TETRIS_E_IO, rc, "start the %s server's thread", s->o.name);
        s->acceptor_started = rc == 0;
    }
    if (r < 0) {
        grpc_server_stop(s);
        return r;
    }
    *out = s;
    return 0;
}

void grpc_server_stop(grpc_server *s)
{
    if (s == NULL)
        return;
    atomic_store(&s->stopping, true);
    if (s->listen_fd >= 0)
        shutdown(s->listen_fd, SHUT_RDWR); /* wakes accept(2) */
    if (s->acceptor_started)
        pthread_join(s->acceptor, NULL);
    pthread_mutex_lock(&s->lock);
    for (struct conn *c = s->conns; c != NULL; c = c->next)
        shutdown(c->fd, SHUT_RDWR); /* wakes its poll(2); a running handler ends first */
    while (s->n_conns > 0)
        pthread_cond_wait(&s->drained, &s->lock);
    pthread_mutex_unlock(&s->lock);
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
        struct stat st;
        if (lstat(s->o.socket_path, &st) == 0 && S_ISSOCK(st.st_mode))
            unlink(s->o.socket_path);
    }
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->drained);
    free(s);
}
