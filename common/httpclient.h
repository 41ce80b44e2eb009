/* httpclient.h - requests over HTTP(S) with libcurl: GETs of small
 * documents (a node daemon's /inventory, a Prometheus query) and an OCI
 * registry's calls (protocol/oci.h's clients: HEAD, POST, PUT of blobs and
 * manifests, blobs streamed to a sink). Each request has a timeout, a cap
 * on the reply's size, an optional conditional header (If-None-Match) and
 * gives back the status, the body (or hands it to a sink), the ETag, the
 * Location, the Docker-Content-Digest, the WWW-Authenticate challenge,
 * Retry-After and Content-Range. Redirects are never followed: a
 * 3xx is the reply, and the caller decides whether its Location is a host
 * it may talk to. Many requests run at once on one thread (libcurl's
 * multi interface).
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
 * (cannot connect, connection broken, TLS failed), TETRIS_E_NOMEM; the
 * message starts with "GET <url>: " and gives libcurl's detail (a
 * certificate's problem, say); `failure` says which kind of transport
 * failure it was, for a caller that retries or falls back.
 *
 * Not for the Kubernetes API (kube.h: credentials, retries, watches). */
#ifndef TETRIS_HTTPCLIENT_H
#define TETRIS_HTTPCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/error.h"

#define HTTPCLIENT_ERROR_BODY_MAX 4096 /* of a non-2xx reply with a sink */
#define HTTPCLIENT_RETRY_AFTER_NONE (-1)

/* What went wrong below HTTP when a request failed (rc < 0). */
enum httpclient_failure {
    HTTPCLIENT_FAIL_NONE = 0, /* a reply came, or the failure is not the transport's */
    HTTPCLIENT_FAIL_CONNECT,  /* no connection: refused, unreachable, unresolvable */
    HTTPCLIENT_FAIL_DROPPED,  /* the connection broke, or closed before the reply's end */
    HTTPCLIENT_FAIL_TIMEOUT,
    HTTPCLIENT_FAIL_TLS_HANDSHAKE, /* the peer did not complete a TLS handshake (it may
                                      speak plain HTTP): refused it, or never answered
                                      before the connect timeout */
    HTTPCLIENT_FAIL_TLS_VERIFY,    /* its certificate is not trusted, or not for this
                                      host; or the CA bundle is unusable */
    HTTPCLIENT_FAIL_OTHER,
};

typedef struct httpclient_request {
    /* Set by the caller. */
    const char *url;           /* http:// or https:// only */
    long timeout_ms;           /* the whole GET; 0: none */
    long connect_timeout_ms;   /* 0: timeout_ms */
    size_t max_body;           /* 0: no limit */
    const char *if_none_match; /* NULL, or an ETag to send as If-None-Match */
    const char *user_agent;    /* NULL: none */
    const char *method;        /* NULL: GET; else "HEAD", "POST", "PUT", "PATCH" */
    const char *const *headers; /* NULL, or "Name: value" lines ending with NULL */
    const void *upload;         /* the request's body (POST, PUT, PATCH), upload_len */
    size_t upload_len;          /* bytes; a POST or PUT without upload sends none */
    /* NULL: the reply's body is collected in body (max_body). Else each
     * piece of a 2xx reply's body is handed here (body stays ""): return 0
     * to go on, or a negative code to stop the transfer, which then fails
     * with that code and the sink's sink_err. max_body still caps the
     * whole. Another status's body (an error document, a redirect's) is
     * never sunk: its first HTTPCLIENT_ERROR_BODY_MAX bytes are kept in
     * body. */
    int (*sink)(void *ctx, const void *data, size_t len, tetris_error *err);
    void *sink_ctx;
    /* NULL, or "HOST:PORT:ADDRESS" (curl's CURLOPT_RESOLVE): connect to
     * ADDRESS for HOST:PORT without asking DNS, so a name checked once
     * cannot resolve elsewhere by the time of the connection. */
    const char *resolve;
    /* NULL, or a PEM file of the CA certificates that verify an https://
     * peer (curl's CURLOPT_CAINFO) instead of the system's. */
    const char *ca_file;
    /* An https:// url only asks whether its peer speaks TLS: connect, do
     * the handshake without verifying the peer (nor loading a CA bundle,
     * which may not exist), send nothing (curl's CURLOPT_CONNECT_ONLY).
     * rc 0: it completed a handshake; nothing it sent is trusted. */
    bool tls_probe;

    /* Filled by the GET; freed by httpclient_request_clear(). */
    int rc;            /* 0, or -code with err filled */
    tetris_error err;
    long status;       /* HTTP status of the reply (0 if none) */
    char *body;        /* NUL-terminated ("" when empty); NULL if rc < 0 */
    size_t len;
    char *etag;        /* the reply's ETag header as sent, NULL if none */
    char *location;    /* its Location header, NULL if none */
    char *content_digest;    /* its Docker-Content-Digest header, NULL if none */
    uint64_t content_length; /* its Content-Length (HEAD included), 0 if none */
    char *www_authenticate;  /* its WWW-Authenticate header, NULL if none */
    char *content_range;     /* its Content-Range header, NULL if none */
    long retry_after_s;      /* its Retry-After in seconds from its arrival
                                (httpclient_retry_after_s), HTTPCLIENT_RETRY_AFTER_NONE
                                if none */
    enum httpclient_failure failure;
} httpclient_request;

/* A Retry-After header's value (blanks around it allowed) as seconds to
 * wait from now: its delay-seconds, or the time to its HTTP-date (RFC 9110
 * 10.2.3; a date already past is 0); HTTPCLIENT_RETRY_AFTER_NONE if it is
 * neither. Servers use both forms: a registry or API server's date must
 * not read as "no advice" and retry at once into the same limit. */
long httpclient_retry_after_s(const char *value, time_t now);

/* libcurl's process-wide set-up, done once however often it is called
 * (the GETs call it themselves). */
int httpclient_global_init(tetris_error *err);

/* One request: returns rq->rc and copies rq->err to err on failure. */
int httpclient_get(httpclient_request *rq, tetris_error *err);

/* n requests at once, at most max_parallel connections open (0: no limit);
 * each request's rc, err and reply are its own. */
void httpclient_get_all(httpclient_request *const *rqs, size_t n, unsigned max_parallel);

/* Frees the reply of a request (it may be run again). */
void httpclient_request_clear(httpclient_request *rq);

#endif
