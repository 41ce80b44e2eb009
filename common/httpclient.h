/* httpclient.h - GETs of small documents over HTTP(S) with libcurl: a node
 * daemon's /inventory, a Prometheus query. Each GET has a timeout, a cap
 * on the reply's size, an optional conditional header (If-None-Match) and
 * gives back the status, the body and the ETag. Many GETs run at once on
 * one thread (libcurl's multi interface).
 *
 * Usage:
 *   httpclient_request rq = {.url = url, .timeout_ms = 1000, .max_body = 1 << 20};
 *   if (httpclient_get(&rq, &err) == 0 && rq.status == 200)
 *       use(rq.body, rq.len);
 *   httpclient_request_clear(&rq);
 *
 * A reply of any status is a success of the GET (rc 0): the caller judges
 * the status. Failures: TETRIS_E_TIMEOUT (no complete reply in time),
 * TETRIS_E_PROTOCOL (reply larger than max_body), TETRIS_E_UNAVAILABLE
 * (cannot connect, connection broken), TETRIS_E_NOMEM; the message starts
 * with "GET <url>: ".
 *
 * Not for the Kubernetes API (kube.h: credentials, retries, watches). */
#ifndef TETRIS_HTTPCLIENT_H
#define TETRIS_HTTPCLIENT_H

#include <stddef.h>

#include "common/error.h"

typedef struct httpclient_request {
    /* Set by the caller. */
    const char *url;           /* http:// or https:// only */
    long timeout_ms;           /* the whole GET; 0: none */
    long connect_timeout_ms;   /* 0: timeout_ms */
    size_t max_body;           /* 0: no limit */
    const char *if_none_match; /* NULL, or an ETag to send as If-None-Match */
    const char *user_agent;    /* NULL: none */

    /* Filled by the GET; freed by httpclient_request_clear(). */
    int rc;            /* 0, or -code with err filled */
    tetris_error err;
    long status;       /* HTTP status of the reply (0 if none) */
    char *body;        /* NUL-terminated ("" when empty); NULL if rc < 0 */
    size_t len;
    char *etag;        /* the reply's ETag header as sent, NULL if none */
} httpclient_request;

/* libcurl's process-wide set-up, done once however often it is called
 * (the GETs call it themselves). */
int httpclient_global_init(tetris_error *err);

/* One GET: returns rq->rc and copies rq->err to err on failure. */
int httpclient_get(httpclient_request *rq, tetris_error *err);

/* n GETs at once, at most max_parallel connections open (0: no limit);
 * each request's rc, err and reply are its own. */
void httpclient_get_all(httpclient_request *const *rqs, size_t n, unsigned max_parallel);

/* Frees the reply of a request (it may be run again). */
void httpclient_request_clear(httpclient_request *rq);

#endif
