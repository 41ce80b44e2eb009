/* oci_fetch.c - the calls of the OCI distribution API a pull makes
 * (manifest GET, blob GET) on oci_transport.c. A registry is no more
 * trusted than a pod: every request is admitted first (oci_send: the
 * admit function says whether its host may be reached, at which address,
 * pinned, and over which scheme), a redirect is followed by hand only to
 * an admitted host and without credentials, and every reply is held to
 * the size it must have. A blob's download that breaks is resumed where
 * it stopped, so a registry's hiccup costs the bytes it lost, not the
 * blob. */
#include "protocol/oci.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/httpclient.h"
#include "common/log.h"

int oci_manifest_get(oci_registry *r, const char *reference, char **json, size_t *len,
                     tensor_digest *digest, tetris_error *err)
{
    char url[1024];
    snprintf(url, sizeof url, "%s/v2/%s/manifests/%s", r->base, r->repo, reference);
    const char *headers[] = {"Accept: " OCI_MANIFEST_MEDIA_TYPE, NULL};
    httpclient_request rq = {.url = url, .headers = headers, .max_body = OCI_MANIFEST_MAX_BYTES};
    int rc = oci_call(r, &rq, 0, err);
    if (rc == 0 && rq.status == 404)
        rc = tetris_fail(err, TETRIS_E_NOTFOUND, 0, "GET %s: no such manifest", url);
    else if (rc == 0 && rq.status >= 300 && rq.status < 400)
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                         "GET %s: HTTP %ld: a manifest is never fetched from elsewhere", url,
                         rq.status);
    else if (rc == 0 && rq.status != 200)
        rc = tetris_fail(err, TETRIS_E_HTTP, 0, "GET %s: HTTP %ld: %.200s", url, rq.status,
                         rq.body);
    if (rc == 0)
        rc = oci_sha256(rq.body, rq.len, digest, err);
    if (rc == 0) {
        *json = steal_pointer(&rq.body);
        *len = rq.len;
    }
    httpclient_request_clear(&rq);
    return rc;
}

/* What a blob's sink sees: the caller's sink, held to the declared size,
 * each byte once across the attempts. */
struct bounded_sink {
    int (*sink)(void *ctx, const void *data, size_t len, tetris_error *err);
    void *ctx;
    uint64_t size;
    uint64_t received;               /* bytes handed to the sink, all attempts */
    const httpclient_request *reply; /* the reply under way (its headers) */
    bool started;                    /* its first byte came */
    uint64_t skip;                   /* its bytes still to pass over (had already) */
    tetris_error refused;            /* why the transfer was stopped (code 0: it was not) */
};

/* "bytes START-END/TOTAL" (TOTAL may be '*'): whether it starts at `at`
 * and, when it says, the blob has `size` bytes. */
static bool range_resumes_at(const char *range, uint64_t at, uint64_t size)
{
    unsigned long long start, end;
    int used = 0;
    if (sscanf(range, "bytes %llu-%llu/%n", &start, &end, &used) != 2 || used == 0)
        return false;
    const char *total = range + used;
    char *stop;
    errno = 0;
    unsigned long long n = strtoull(total, &stop, 10);
    bool total_ok = strcmp(total, "*") == 0 ||
                    (errno == 0 && stop != total && *stop == '\0' && n == size);
    return start == at && end >= start && end < size && total_ok;
}

static int bounded(void *ctx, const void *data, size_t len, tetris_error *err)
{
    struct bounded_sink *b = ctx;
    int rc = 0;
    if (!b->started) {
        b->started = true;
        b->skip = 0;
        /* A resumed reply: a 206 must start where the last one stopped; a
         * 200 is the whole blob again, whose head the sink has had. */
        if (b->received > 0 && b->reply->content_range == NULL)
            b->skip = b->received;
        else if (b->received > 0 &&
                 !range_resumes_at(b->reply->content_range, b->received, b->size))
            rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                             "the registry resumed at the wrong place: Content-Range '%.80s', "
                             "not from byte %" PRIu64 " of %" PRIu64,
                             b->reply->content_range, b->received, b->size);
        else if (b->received == 0 && b->reply->content_range != NULL)
            rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                             "a part of the blob (Content-Range '%.80s') where none was asked",
                             b->reply->content_range);
    }
    if (rc == 0 && b->skip > 0) {
        size_t n = b->skip < len ? (size_t)b->skip : len;
        b->skip -= n;
        data = (const char *)data + n;
        len -= n;
    }
    if (rc == 0 && len > 0)
        rc = len > b->size - b->received
                 ? tetris_fail(err, TETRIS_E_CORRUPT, 0,
                               "more than the %" PRIu64 " bytes the manifest declares", b->size)
                 : b->sink(b->ctx, data, len, err);
    if (rc == 0)
        b->received += len;
    else
        b->refused = *err;
    return rc;
}

/* The next hop of a redirect from url: an absolute http(s):// Location
 * (oci_send admits its host), or a path on the same host. */
static int next_hop(const char *url, const char *location, char *next, size_t cap,
                    tetris_error *err)
{
    int n;
    if (location == NULL || location[0] == '\0')
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s: a redirect without a Location", url);
    if (location[0] == '/' && location[1] != '/') {
        const char *authority = strstr(url, "://") + 3;
        const char *path = authority + strcspn(authority, "/");
        n = snprintf(next, cap, "%.*s%s", (int)(path - url), url, location);
    } else if (strncmp(location, "https://", 8) == 0 || strncmp(location, "http://", 7) == 0) {
        n = snprintf(next, cap, "%s", location);
    } else {
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "refusing the redirect to '%.100s': only http(s):// to a listed "
                           "registry is followed",
                           location);
    }
    if (n < 0 || (size_t)n >= cap)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s: Location too long", url);
    return 0;
}

/* One attempt: from the registry's URL through its redirects to the
 * bytes, asking for those after b->received. *again: the failure is one
 * that another attempt may not meet (*reply: its status and Retry-After). */
static int blob_attempt(oci_registry *r, const char *digest, struct bounded_sink *b, bool *again,
                        httpclient_request *reply, tetris_error *err)
{
    char url[2048], range[64];
    snprintf(url, sizeof url, "%s/v2/%s/blobs/%s", r->base, r->repo, digest);
    snprintf(range, sizeof range, "Range: bytes=%" PRIu64 "-", b->received);
    const char *headers[] = {b->received > 0 ? range : NULL, NULL};
    *again = false;
    for (int hops = 0;; hops++) {
        /* Each piece goes to the sink as it arrives: memory stays one
         * buffer of libcurl's, whatever the blob's size. */
        httpclient_request rq = {.url = url, .headers = headers, .sink = bounded, .sink_ctx = b};
        b->reply = &rq;
        b->started = false;
        b->refused.code = 0;
        int rc = oci_send(r, &rq, 0, err);
        b->reply = NULL;
        if (rc == 0 && rq.status >= 300 && rq.status < 400 && rq.status != 304) {
            char next[sizeof url];
            rc = hops == OCI_MAX_REDIRECTS
                     ? tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s: more than %d redirects", url,
                                   OCI_MAX_REDIRECTS)
                     : next_hop(url, rq.location, next, sizeof next, err);
            httpclient_request_clear(&rq);
            if (rc < 0)
                return rc;
            snprintf(url, sizeof url, "%s", next);
            continue;
        }
        *again = b->refused.code == 0 && oci_retryable(&rq, rc);
        reply->status = rq.status;
        reply->retry_after_s = rq.retry_after_s;
        /* The messages lead with the fault: a rejected tensor's reason is
         * short (protocol/ingest.h), and the URL is in the pull's log. */
        /* httpclient's "GET URL: what": the URL holds no ": ". */
        const char *what = rc < 0 ? strstr(err->msg, ": ") : NULL;
        if (rc < 0 && b->refused.code != 0)
            rc = tetris_fail(err, b->refused.code, 0, "%s", b->refused.msg);
        else if (rc < 0 && rq.failure != HTTPCLIENT_FAIL_NONE && what != NULL) {
            tetris_error transport = *err;
            rc = tetris_fail(err, transport.code, 0, "%s (GET %s)",
                             transport.msg + (what - err->msg) + 2, url);
        } else if (rc < 0)
            ; /* a refused target's */
        else if (rq.status == 404)
            rc = tetris_fail(err, TETRIS_E_NOTFOUND, 0, "no such blob (GET %s)", url);
        else if (rq.status == 206 && b->received > 0 && !b->started)
            rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "an empty 206 (GET %s)", url);
        else if (rq.status != 200 && rq.status != 206)
            rc = tetris_fail(err, TETRIS_E_HTTP, 0, "HTTP %ld: %.100s (GET %s)", rq.status, rq.body,
                             url);
        else if (b->received != b->size)
            rc = tetris_fail(err, TETRIS_E_CORRUPT, 0,
                             "%" PRIu64 " bytes, not the %" PRIu64 " the manifest declares",
                             b->received, b->size);
        httpclient_request_clear(&rq);
        return rc;
    }
}

int oci_blob_get(oci_registry *r, const tensor_digest *d, uint64_t size,
                 int (*sink)(void *ctx, const void *data, size_t len, tetris_error *err),
                 void *sink_ctx, tetris_error *err)
{
    char digest[7 + TENSOR_DIGEST_HEX_LEN + 1];
    oci_digest_format(d, digest);
    struct bounded_sink b = {.sink = sink, .ctx = sink_ctx, .size = size};
    for (int attempt = 1;; attempt++) {
        bool again = false;
        httpclient_request reply = {.retry_after_s = HTTPCLIENT_RETRY_AFTER_NONE};
        int rc = blob_attempt(r, digest, &b, &again, &reply, err);
        if (rc == 0 || !again || attempt == OCI_MAX_ATTEMPTS) {
            if (rc < 0 && again && b.received > 0 && b.received < size)
                rc = tetris_fail(err, TETRIS_E_CORRUPT, 0,
                                 "the reply ended after %" PRIu64 " of the %" PRIu64
                                 " bytes declared (%d attempts)",
                                 b.received, size, attempt);
            else if (rc < 0 && again)
                rc = tetris_wrap(err, "%d attempts", attempt);
            return rc;
        }
        long delay = oci_retry_delay_ms(&reply, attempt);
        log_info("event=registry-retry op=blob digest=%s received=%" PRIu64 " size=%" PRIu64
                 " status=%ld attempt=%d delay_ms=%ld msg=%s",
                 digest, b.received, size, reply.status, attempt, delay, LOG_Q(err->msg));
        clock_sleep_ms(delay);
    }
}
