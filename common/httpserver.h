/* httpserver.h - a small HTTP/1.1 server on libmicrohttpd for the daemons'
 * APIs (/metrics, /inventory, the scheduler extender's /filter ...).
 *
 * Usage:
 *   http_server *srv;
 *   struct http_server_options o;
 *   http_server_options_init(&o);
 *   o.listen = "127.0.0.1:9464";
 *   http_server_new(&o, &srv, &err);
 *   http_server_route(srv, "GET", "/metrics", handle_metrics, ctx, &err);
 *   http_server_start(srv, &err);   // serves from internal threads
 *   ...
 *   http_server_free(srv);          // stops, waits for running handlers
 *
 * Routing is by exact method + path (the query string is not part of the
 * path); a route path ending in '*' matches every path with that prefix.
 * HEAD is served by the GET route (without the body).
 * Unknown path -> 404, known path with another method -> 405 (with Allow),
 * a body larger than max_body_bytes -> 413. Those replies are JSON
 * `{"error":"..."}` like the ones http_response_error() builds.
 *
 * Handlers run on the server's threads, possibly several at once: whatever
 * they share must be thread-safe. A handler fills *resp and returns; if it
 * leaves resp untouched the client gets 500. */
#ifndef TETRIS_HTTPSERVER_H
#define TETRIS_HTTPSERVER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/error.h"

typedef struct http_server http_server;

struct http_server_options {
    const char *listen;      /* "ADDR:PORT", "[V6ADDR]:PORT", ":PORT" (all
                                addresses); port 0 picks a free port */
    size_t max_body_bytes;   /* default 1 MiB; larger bodies get 413 */
    unsigned threads;        /* 0 (default): one thread per connection; else a
                                pool of that many polling threads */
    unsigned max_connections; /* default 256 */
    unsigned timeout_s;      /* idle connection timeout, default 30 */
    unsigned max_per_address; /* connections from one client address at
                                 most, 0 (default): no limit; keeps one
                                 client's stalled connections from taking
                                 every slot */
    const char *tls_cert_pem; /* both set: serve HTTPS (TLS through libmicrohttpd's
                                 GnuTLS) with this PEM certificate chain and */
    const char *tls_key_pem;  /* PEM private key (copied); both NULL: plain HTTP */
};

void http_server_options_init(struct http_server_options *o);

typedef struct http_request {
    const char *method;  /* "GET", "POST", ... */
    const char *path;    /* without the query string */
    const char *body;    /* NUL-terminated copy of the body ("" if none) */
    size_t body_len;
    struct http_request_private *priv;
} http_request;

/* A request header (case-insensitive name), or NULL. */
const char *http_request_header(const http_request *req, const char *name);
/* A query-string argument, or NULL. */
const char *http_request_query(const http_request *req, const char *name);
/* Parses the body as JSON; TETRIS_E_FORMAT with jansson's message if not. */
int http_request_json(const http_request *req, json_t **out, tetris_error *err);

#define HTTP_MAX_HEADERS 8

typedef struct http_response {
    int status;                 /* 0: not set (-> 500) */
    const char *content_type;   /* static string; default "application/json" */
    const void *body;
    size_t body_len;
    void (*release)(void *ctx); /* called once the body has been sent */
    void *release_ctx;
    size_t n_headers;
    char *headers[HTTP_MAX_HEADERS][2]; /* owned copies */
} http_response;

/* Body setters. Each replaces any body set before. */
/* Copies len bytes. */
int http_response_set_body(http_response *r, int status, const char *content_type,
                           const void *body, size_t len);
/* Takes ownership of a malloc'd body (freed after sending). */
void http_response_take_body(http_response *r, int status, const char *content_type,
                             char *body, size_t len);
/* Sends bytes that stay owned by the caller; release(release_ctx) is called
 * once the server no longer needs them (use it to drop a reference count),
 * so a cached reply is served without a copy. */
void http_response_set_shared(http_response *r, int status, const char *content_type,
                              const void *body, size_t len, void (*release)(void *ctx),
                              void *release_ctx);
/* Serialises j (compact); does not steal the reference. */
int http_response_json(http_response *r, int status, const json_t *j);
/* `{"error": msg}` with the given status. */
int http_response_error(http_response *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A status with an empty body (204, 304, ...). */
void http_response_empty(http_response *r, int status);
/* Adds a response header (copied). At most HTTP_MAX_HEADERS. */
int http_response_add_header(http_response *r, const char *name, const char *value);

typedef void (*http_handler_fn)(void *ctx, const http_request *req, http_response *resp);

int http_server_new(const struct http_server_options *o, http_server **out, tetris_error *err);
/* Routes must be added before http_server_start. */
int http_server_route(http_server *s, const char *method, const char *path, http_handler_fn fn,
                      void *ctx, tetris_error *err);
/* Binds and starts serving. TETRIS_E_IO if the address cannot be bound,
 * TETRIS_E_INVAL if TLS is asked for with only one of certificate and key,
 * or libmicrohttpd has no TLS or refuses them. */
int http_server_start(http_server *s, tetris_error *err);
/* The bound port (useful after listening on port 0); 0 before start. */
uint16_t http_server_port(const http_server *s);
/* Stops (if started) and frees. Running handlers finish first. */
void http_server_free(http_server *s);

/* Splits "ADDR:PORT" / "[V6]:PORT" / ":PORT" into host (empty for all
 * addresses) and port. TETRIS_E_INVAL on a malformed address. */
int http_parse_listen(const char *addr, char *host, size_t host_len, uint16_t *port,
                      tetris_error *err);

#endif
