/* grpc_client.c - the tests' unary gRPC client (grpc_client.h): an
 * nghttp2 client session fed by blocking reads with a deadline. */
#include "tests/lib/grpc_client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/grpc.h"

#define CALL_TIMEOUT_MS 120000

struct call {
    int32_t stream_id;
    bool closed;
    const uint8_t *body;
    size_t body_len, body_off;
    struct grpc_call_result *res;
};

static ssize_t read_body(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)id;
    (void)source;
    struct call *c = user_data;
    size_t n = c->body_len - c->body_off;
    if (n > length)
        n = length;
    if (n > 0)
        memcpy(buf, c->body + c->body_off, n);
    c->body_off += n;
    if (c->body_off == c->body_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    (void)session;
    (void)flags;
    struct call *c = user_data;
    if (frame->hd.stream_id != c->stream_id)
        return 0;
    char v[1024];
    snprintf(v, sizeof(v), "%.*s", (int)valuelen, (const char *)value);
    if (namelen == 7 && memcmp(name, ":status", 7) == 0)
        c->res->http_status = atoi(v);
    else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        c->res->grpc_status = atoi(v);
    else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0)
        grpc_percent_decode(v, c->res->message, sizeof(c->res->message));
    return 0;
}

static int on_data(nghttp2_session *session, uint8_t flags, int32_t id, const uint8_t *data,
                   size_t len, void *user_data)
{
    (void)session;
    (void)flags;
    struct call *c = user_data;
    if (id != c->stream_id)
        return 0;
    uint8_t *b = realloc(c->res->body, c->res->body_len + len);
    if (b == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    memcpy(b + c->res->body_len, data, len);
    c->res->body = b;
    c->res->body_len += len;
    return 0;
}

static int on_close(nghttp2_session *session, int32_t id, uint32_t error_code, void *user_data)
{
    (void)session;
    (void)error_code;
    struct call *c = user_data;
    if (id == c->stream_id)
        c->closed = true;
    return 0;
}

static int connect_unix(const char *path, tetris_error *err)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(addr.sun_path))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: too long", path);
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "socket");
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        int e = errno;
        close(fd);
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, e, "connect %s", path);
    }
    return fd;
}

static int flush(nghttp2_session *s, int fd, tetris_error *err)
{
    const uint8_t *data;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(s, &data)) > 0) {
        while (n > 0) {
            ssize_t w = send(fd, data, (size_t)n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return tetris_fail(err, TETRIS_E_UNAVAILABLE, errno, "send");
            data += w;
            n -= w;
        }
    }
    return n < 0 ? tetris_fail(err, TETRIS_E_PROTOCOL, 0, "nghttp2: %s", nghttp2_strerror((int)n))
                 : 0;
}

static int run_call(int fd, struct call *c, const nghttp2_nv *nva, size_t n_nva, tetris_error *err)
{
    nghttp2_session_callbacks *cb;
    nghttp2_session *s;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "nghttp2 callbacks");
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    int rc = nghttp2_session_client_new(&s, cb, c);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "nghttp2 session");
    nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, NULL, 0);
    nghttp2_data_provider prd = {.read_callback = read_body};
    c->stream_id = nghttp2_submit_request(s, NULL, nva, n_nva, &prd, c);
    int r = c->stream_id < 0 ? tetris_fail(err, TETRIS_E_PROTOCOL, 0, "submit request") : 0;
    int64_t deadline = clock_mono_ms() + CALL_TIMEOUT_MS;
    while (r == 0 && !c->closed) {
        if ((r = flush(s, fd, err)) < 0)
            break;
        int64_t left = deadline - clock_mono_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            r = tetris_fail(err, TETRIS_E_TIMEOUT, 0, "no answer within %d ms", CALL_TIMEOUT_MS);
            break;
        }
        uint8_t buf[16384];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0) {
            r = tetris_fail(err, TETRIS_E_UNAVAILABLE, n < 0 ? errno : 0,
                            "the server closed the connection before answering");
            break;
        }
        if ((n = nghttp2_session_mem_recv(s, buf, (size_t)n)) < 0)
            r = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "nghttp2: %s", nghttp2_strerror((int)n));
    }
    nghttp2_session_del(s);
    return r;
}

#define NV(name, value)                                                                            \
    {                                                                                              \
        (uint8_t *)(name), (uint8_t *)(value), strlen(name), strlen(value), NGHTTP2_NV_FLAG_NONE   \
    }

int grpc_client_call_raw(const char *socket_path, const char *method, const char *path,
                         const char *content_type, const uint8_t *body, size_t body_len,
                         struct grpc_call_result *out, tetris_error *err)
{
    memset(out, 0, sizeof(*out));
    out->grpc_status = -1;
    cleanup_close int fd = connect_unix(socket_path, err);
    if (fd < 0)
        return fd;
    nghttp2_nv nva[] = {NV(":method", method), NV(":scheme", "http"), NV(":path", path),
                        /* as the kubelet's grpc-go does on a Unix socket */
                        NV(":authority", socket_path), NV("content-type", content_type),
                        NV("te", "trailers")};
    struct call c = {.body = body, .body_len = body_len, .res = out};
    int r = run_call(fd, &c, nva, sizeof(nva) / sizeof(nva[0]), err);
    if (r < 0) {
        grpc_call_result_free(out);
        return r;
    }
    if (out->grpc_status == 0 && out->body_len >= GRPC_PREFIX_BYTES) {
        out->msg = out->body + GRPC_PREFIX_BYTES;
        out->msg_len = out->body_len - GRPC_PREFIX_BYTES;
    }
    return 0;
}

int grpc_client_call(const char *socket_path, const char *path, const uint8_t *msg, size_t len,
                     struct grpc_call_result *out, tetris_error *err)
{
    cleanup_free uint8_t *body = malloc(GRPC_PREFIX_BYTES + len);
    if (body == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "out of memory");
    grpc_frame_prefix(body, (uint32_t)len);
    if (len > 0)
        memcpy(body + GRPC_PREFIX_BYTES, msg, len);
    return grpc_client_call_raw(socket_path, "POST", path, "application/grpc", body,
                                GRPC_PREFIX_BYTES + len, out, err);
}

void grpc_call_result_free(struct grpc_call_result *r)
{
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
    r->msg = NULL;
    r->msg_len = 0;
}
