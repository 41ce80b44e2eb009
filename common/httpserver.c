/* httpserver.c - the libmicrohttpd wrapper declared in httpserver.h: route
 * table, body collection with a size cap, and response helpers.
 *
 * We create and bind the listening socket ourselves (getaddrinfo + bind)
 * and hand it to libmicrohttpd, so a bind failure is reported with the
 * address and errno, and port 0 works (http_server_port reads it back). */
#include "common/httpserver.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/textbuf.h"
#include "common/utf8.h"

#define DEFAULT_MAX_BODY (1u << 20)
#define DEFAULT_MAX_CONNECTIONS 256
#define DEFAULT_TIMEOUT_S 30
#define MAX_ROUTES 32

struct route {
    char *method;
    char *path;
    bool prefix; /* path ended in '*' */
    http_handler_fn fn;
    void *ctx;
};

struct http_server {
    struct http_server_options opts;
    char *listen;
    char *tls_cert_pem, *tls_key_pem; /* owned copies, NULL without TLS */
    struct route routes[MAX_ROUTES];
    size_t n_routes;
    struct MHD_Daemon *daemon; /* owns the listening socket once started */
    uint16_t port;
};

/* Per-request state, from the first callback to request completion. */
struct http_request_private {
    struct MHD_Connection *conn;
    textbuf body;
    bool too_large;
};

void http_server_options_init(struct http_server_options *o)
{
    memset(o, 0, sizeof(*o));
    o->listen = "127.0.0.1:0";
    o->max_body_bytes = DEFAULT_MAX_BODY;
    o->max_connections = DEFAULT_MAX_CONNECTIONS;
    o->timeout_s = DEFAULT_TIMEOUT_S;
}

/* ---- requests ---- */

const char *http_request_header(const http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->priv->conn, MHD_HEADER_KIND, name);
}

const char *http_request_query(const http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->priv->conn, MHD_GET_ARGUMENT_KIND, name);
}

int http_request_json(const http_request *req, json_t **out, tetris_error *err)
{
    json_error_t jerr;
    json_t *j = json_loadb(req->body, req->body_len, 0, &jerr);
    if (j == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "request body is not JSON: %s (line %d)",
                           jerr.text, jerr.line);
    *out = j;
    return 0;
}

/* ---- responses ---- */

static void response_drop_body(http_response *r)
{
    if (r->release != NULL)
        r->release(r->release_ctx);
    r->release = NULL;
    r->release_ctx = NULL;
    r->body = NULL;
    r->body_len = 0;
}

static void response_clear(http_response *r)
{
    response_drop_body(r);
    for (size_t i = 0; i < r->n_headers; i++) {
        free(r->headers[i][0]);
        free(r->headers[i][1]);
    }
    r->n_headers = 0;
}

void http_response_take_body(http_response *r, int status, const char *content_type, char *body,
                             size_t len)
{
    response_drop_body(r);
    r->status = status;
    r->content_type = content_type;
    r->body = body;
    r->body_len = len;
    r->release = free;
    r->release_ctx = body;
}

int http_response_set_body(http_response *r, int status, const char *content_type,
                           const void *body, size_t len)
{
    char *copy = malloc(len + 1);
    if (copy == NULL) {
        response_drop_body(r);
        r->status = 500;
        return -TETRIS_E_NOMEM;
    }
    if (len > 0)
        memcpy(copy, body, len);
    copy[len] = '\0';
    http_response_take_body(r, status, content_type, copy, len);
    return 0;
}

void http_response_set_shared(http_response *r, int status, const char *content_type,
                              const void *body, size_t len, void (*release)(void *ctx),
                              void *release_ctx)
{
    response_drop_body(r);
    r->status = status;
    r->content_type = content_type;
    r->body = body;
    r->body_len = len;
    r->release = release;
    r->release_ctx = release_ctx;
}

int http_response_json(http_response *r, int status, const json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT);
    if (text == NULL) {
        response_drop_body(r);
        r->status = 500;
        return -TETRIS_E_NOMEM;
    }
    http_response_take_body(r, status, "application/json", text, strlen(text));
    return 0;
}

int http_response_error(http_response *r, int status, const char *fmt, ...)
{
    char msg[512], valid[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* Messages quote what clients sent (names, paths), maybe not UTF-8,
     * and a cut may split a character: JSON must get UTF-8. */
    utf8_copy_valid(valid, sizeof(valid), msg);
    json_t *j = json_pack("{s:s}", "error", valid);
    if (j == NULL) {
        response_drop_body(r);
        r->status = status;
        return -TETRIS_E_NOMEM;
    }
    int rc = http_response_json(r, status, j);
    json_decref(j);
    return rc;
}

void http_response_empty(http_response *r, int status)
{
    response_drop_body(r);
    r->status = status;
    r->content_type = NULL;
}

int http_response_add_header(http_response *r, const char *name, const char *value)
{
    if (r->n_headers >= HTTP_MAX_HEADERS)
        return -TETRIS_E_INVAL;
    char *n = strdup(name);
    char *v = strdup(value);
    if (n == NULL || v == NULL) {
        free(n);
        free(v);
        return -TETRIS_E_NOMEM;
    }
    r->headers[r->n_headers][0] = n;
    r->headers[r->n_headers][1] = v;
    r->n_headers++;
    return 0;
}

/* libmicrohttpd calls this once it has sent (or dropped) the body. */
static void release_trampoline(void *cls)
{
    http_response *r = cls;
    if (r->release != NULL)
        r->release(r->release_ctx);
    free(r);
}

/* Hands resp to libmicrohttpd. Consumes resp (its body and headers). */
static enum MHD_Result queue_response(struct MHD_Connection *conn, http_response *resp)
{
    int status = resp->status;
    if (status == 0) {
        http_response_error(resp, 500, "handler produced no response");
        status = 500;
    }
    /* The body must outlive this call: move the response to the heap and
     * let libmicrohttpd release it through the trampoline. */
    http_response *held = malloc(sizeof(*held));
    if (held == NULL) {
        response_clear(resp);
        return MHD_NO;
    }
    *held = *resp;
    struct MHD_Response *mr = MHD_create_response_from_buffer_with_free_callback_cls(
        held->body_len, (void *)held->body, release_trampoline, held);
    if (mr == NULL) {
        response_clear(held);
        free(held);
        return MHD_NO;
    }
    if (held->body_len > 0 || held->content_type != NULL)
        MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE,
                                held->content_type ? held->content_type : "application/json");
    for (size_t i = 0; i < held->n_headers; i++) {
        MHD_add_response_header(mr, held->headers[i][0], held->headers[i][1]);
        free(held->headers[i][0]);
        free(held->headers[i][1]);
    }
    held->n_headers = 0;
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)status, mr);
    MHD_destroy_response(mr);
    return rc;
}

static enum MHD_Result queue_error(struct MHD_Connection *conn, int status, const char *allow,
                                   const char *msg)
{
    http_response r = {0};
    http_response_error(&r, status, "%s", msg);
    if (allow != NULL)
        http_response_add_header(&r, MHD_HTTP_HEADER_ALLOW, allow);
    return queue_response(conn, &r);
}

/* ---- dispatch ---- */

static bool route_matches_path(const struct route *rt, const char *path)
{
    if (rt->prefix)
        return strncmp(path, rt->path, strlen(rt->path)) == 0;
    return strcmp(path, rt->path) == 0;
}

static enum MHD_Result dispatch(http_server *s, struct MHD_Connection *conn, const char *method,
                                const char *url, struct http_request_private *priv)
{
    char allow[128] = "";
    for (size_t i = 0; i < s->n_routes; i++) {
        const struct route *rt = &s->routes[i];
        if (!route_matches_path(rt, url))
            continue;
        /* HEAD is GET without the body (libmicrohttpd drops it). */
        bool head_of_get = strcmp(method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0;
        if (strcmp(rt->method, method) != 0 && !head_of_get) {
            size_t used = strlen(allow);
            snprintf(allow + used, sizeof(allow) - used, "%s%s", used ? ", " : "", rt->method);
            continue;
        }
        http_request req = {
            .method = method,
            .path = url,
            .body = priv->body.data ? priv->body.data : "",
            .body_len = priv->body.len,
            .priv = priv,
        };
        http_response resp = {0};
        rt->fn(rt->ctx, &req, &resp);
        return queue_response(conn, &resp);
    }
    if (allow[0] != '\0')
        return queue_error(conn, 405, allow, "method not allowed");
    return queue_error(conn, 404, NULL, "no such path");
}

static bool declared_body_too_large(http_server *s, struct MHD_Connection *conn)
{
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl == NULL)
        return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(cl, &end, 10);
    return errno != 0 || end == cl || n > s->opts.max_body_bytes;
}

static int append_body(struct http_request_private *priv, const char *data, size_t len,
                       size_t max)
{
    if (priv->too_large || priv->body.len + len > max) {
        priv->too_large = true;
        return 0;
    }
    return textbuf_append(&priv->body, data, len) ? 0 : -1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    http_server *s = cls;
    struct http_request_private *priv = *con_cls;
    if (priv == NULL) {
        priv = calloc(1, sizeof(*priv));
        if (priv == NULL)
            return MHD_NO;
        priv->conn = conn;
        *con_cls = priv;
        /* Refuse a declared oversized body before reading any of it. */
        if (declared_body_too_large(s, conn)) {
            priv->too_large = true;
            return queue_error(conn, 413, NULL, "request body too large");
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (append_body(priv, upload_data, *upload_data_size, s->opts.max_body_bytes) < 0)
            return MHD_NO;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (priv->too_large)
        return queue_error(conn, 413, NULL, "request body too large");
    return dispatch(s, conn, method, url, priv);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    struct http_request_private *priv = *con_cls;
    if (priv == NULL)
        return;
    textbuf_free(&priv->body);
    free(priv);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    log_debug("event=http-server-log msg=%s", LOG_Q(msg));
}

/* ---- lifecycle ---- */

int http_parse_listen(const char *addr, char *host, size_t host_len, uint16_t *port,
                      tetris_error *err)
{
    const char *colon = strrchr(addr, ':');
    if (colon == NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "listen address %s: want ADDR:PORT", addr);
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    } else if (memchr(h, ':', hl) != NULL) {
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "listen address %s: write IPv6 addresses as [ADDR]:PORT", addr);
    }
    if (hl >= host_len)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "listen address %s: host too long", addr);
    char *end;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno != 0 || p > 65535 || colon[1] == '-' ||
        colon[1] == '+')
        return tetris_fail(err, TETRIS_E_INVAL, 0, "listen address %s: bad port", addr);
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (uint16_t)p;
    return 0;
}

static int bind_listen_socket(const char *addr, int *out_fd, uint16_t *out_port,
                              tetris_error *err)
{
    char host[256];
    uint16_t port;
    int rc = http_parse_listen(addr, host, sizeof(host), &port, err);
    if (rc < 0)
        return rc;
    char service[8];
    snprintf(service, sizeof(service), "%u", port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM,
        .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
    };
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host[0] ? host : NULL, service, &hints, &res);
    if (gai != 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "listen address %s: %s", addr,
                           gai_strerror(gai));
    int saved_errno = 0;
    int fd = -1;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved_errno = errno;
            continue;
        }
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
            bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
            break;
        saved_errno = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, saved_errno, "listen on %s", addr);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        int e = errno;
        close(fd);
        return tetris_fail(err, TETRIS_E_IO, e, "getsockname %s", addr);
    }
    if (ss.ss_family == AF_INET6)
        *out_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    else
        *out_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *out_fd = fd;
    return 0;
}

int http_server_new(const struct http_server_options *o, http_server **out, tetris_error *err)
{
    http_server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "http server");
    s->opts = *o;
    if (s->opts.max_body_bytes == 0)
        s->opts.max_body_bytes = DEFAULT_MAX_BODY;
    if (s->opts.max_connections == 0)
        s->opts.max_connections = DEFAULT_MAX_CONNECTIONS;
    if (s->opts.timeout_s == 0)
        s->opts.timeout_s = DEFAULT_TIMEOUT_S;
    s->listen = strdup(o->listen ? o->listen : "127.0.0.1:0");
    if (s->listen == NULL) {
        free(s);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "http server");
    }
    s->opts.listen = s->listen;
    if ((o->tls_cert_pem == NULL) != (o->tls_key_pem == NULL)) {
        http_server_free(s);
        return tetris_fail(err, TETRIS_E_INVAL, 0, "TLS needs both a certificate and a key");
    }
    if (o->tls_cert_pem != NULL) {
        s->tls_cert_pem = strdup(o->tls_cert_pem);
        s->tls_key_pem = strdup(o->tls_key_pem);
        if (s->tls_cert_pem == NULL || s->tls_key_pem == NULL) {
            http_server_free(s);
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "http server");
        }
    }
    s->opts.tls_cert_pem = s->tls_cert_pem;
    s->opts.tls_key_pem = s->tls_key_pem;
    *out = s;
    return 0;
}

int http_server_route(http_server *s, const char *method, const char *path, http_handler_fn fn,
                      void *ctx, tetris_error *err)
{
    if (s->daemon != NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "route %s %s added after start", method, path);
    if (s->n_routes >= MAX_ROUTES)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "too many routes (max %d)", MAX_ROUTES);
    struct route *rt = &s->routes[s->n_routes];
    size_t pl = strlen(path);
    rt->prefix = pl > 0 && path[pl - 1] == '*';
    rt->method = strdup(method);
    rt->path = strndup(path, rt->prefix ? pl - 1 : pl);
    if (rt->method == NULL || rt->path == NULL) {
        free(rt->method);
        free(rt->path);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "route");
    }
    rt->fn = fn;
    rt->ctx = ctx;
    s->n_routes++;
    return 0;
}

int http_server_start(http_server *s, tetris_error *err)
{
    cleanup_close int fd = -1;
    int rc = bind_listen_socket(s->listen, &fd, &s->port, err);
    if (rc < 0)
        return rc;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    bool tls = s->tls_cert_pem != NULL;
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "libmicrohttpd was built without TLS");
    if (tls)
        flags |= MHD_USE_TLS;
    if (s->opts.threads == 0)
        flags |= MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL;
    else
        flags |= MHD_USE_AUTO;
    struct MHD_OptionItem opts[10] = {
        {MHD_OPTION_LISTEN_SOCKET, fd, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, s->opts.max_connections, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, s->opts.timeout_s, NULL},
        {MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->opts.max_per_address, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, NULL},
        {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_mhd_log, NULL},
    };
    size_t n = 6;
    if (s->opts.threads > 0)
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, s->opts.threads, NULL};
    if (tls) {
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert_pem};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key_pem};
    }
    opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_ARRAY, opts,
                                 MHD_OPTION_END);
    if (s->daemon == NULL && tls)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "cannot start HTTPS server on %s (are the certificate and key "
                           "PEM, and do they belong together?)",
                           s->listen);
    if (s->daemon == NULL)
        return tetris_fail(err, TETRIS_E_IO, 0, "cannot start HTTP server on %s", s->listen);
    fd = -1; /* libmicrohttpd closes it in MHD_stop_daemon */
    return 0;
}

uint16_t http_server_port(const http_server *s)
{
    return s->daemon != NULL ? s->port : 0;
}

void http_server_free(http_server *s)
{
    if (s == NULL)
        return;
    if (s->daemon != NULL)
        MHD_stop_daemon(s->daemon);
    for (size_t i = 0; i < s->n_routes; i++) {
        free(s->routes[i].method);
        free(s->routes[i].path);
    }
    free(s->listen);
    free(s->tls_cert_pem);
    free(s->tls_key_pem);
    free(s);
}
