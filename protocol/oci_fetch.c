/* oci_fetch.c - the calls of the OCI distribution API a pull makes
 * (manifest GET, blob GET) on common/httpclient.h. A registry is no more
 * trusted than a pod: before each request the registry's admit function
 * says whether its host may be reached and at which address (pinned, so
 * a name checked once cannot resolve elsewhere), a redirect is followed
 * by hand only to an admitted host, and every reply is held to the size
 * it must have. */
#include "protocol/oci.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/httpclient.h"

/* The request's target, admitted: fills resolve. */
static int admit(oci_registry *r, const char *host, unsigned port, char *resolve, size_t cap,
                 tetris_error *err)
{
    resolve[0] = '\0';
    if (r->admit == NULL)
        return 0;
    return r->admit(r->admit_ctx, host, port, resolve, cap, err);
}

static int get(oci_registry *r, httpclient_request *rq, const char *resolve, tetris_error *err)
{
    rq->timeout_ms = r->timeout_ms;
    rq->user_agent = "tetris/" TETRIS_VERSION;
    rq->resolve = resolve[0] != '\0' ? resolve : NULL;
    r->requests++;
    return httpclient_get(rq, err);
}

int oci_manifest_get(oci_registry *r, const char *reference, char **json, size_t *len,
                     tensor_digest *digest, tetris_error *err)
{
    char url[1024], resolve[OCI_RESOLVE_MAX];
    snprintf(url, sizeof url, "%s/v2/%s/manifests/%s", r->base, r->repo, reference);
    int rc = admit(r, r->host, r->port, resolve, sizeof resolve, err);
    if (rc < 0)
        return rc;
    const char *headers[] = {"Accept: " OCI_MANIFEST_MEDIA_TYPE, NULL};
    httpclient_request rq = {.url = url, .headers = headers, .max_body = OCI_MANIFEST_MAX_BYTES};
    rc = get(r, &rq, resolve, err);
    if (rc == -TETRIS_E_PROTOCOL)
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "GET %s: a manifest larger than %u bytes", url,
                         OCI_MANIFEST_MAX_BYTES);
    else if (rc == 0 && rq.status == 404)
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

/* What a blob's sink sees: the caller's sink, held to the declared size. */
struct bounded_sink {
    int (*sink)(void *ctx, const void *data, size_t len, tetris_error *err);
    void *ctx;
    uint64_t size;
    uint64_t received;
    tetris_error refused; /* why the transfer was stopped (code 0: it was not) */
};

static int bounded(void *ctx, const void *data, size_t len, tetris_error *err)
{
    struct bounded_sink *b = ctx;
    int rc = len > b->size - b->received
                 ? tetris_fail(err, TETRIS_E_CORRUPT, 0,
                               "more than the %llu bytes the manifest declares",
                               (unsigned long long)b->size)
                 : b->sink(b->ctx, data, len, err);
    b->received += len;
    if (rc < 0)
        b->refused = *err;
    return rc;
}

/* The next hop of a redirect from url (on host:port): an absolute
 * http:// Location, or a path on the same host. */
static int next_hop(const char *url, const char *location, char *next, size_t cap, char *host,
                    unsigned *port, tetris_error *err)
{
    static const char http[] = "http://";
    int n;
    if (location == NULL || location[0] == '\0')
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s: a redirect without a Location", url);
    if (location[0] == '/' && location[1] != '/') {
        const char *path = strchr(url + strlen(http), '/');
        n = snprintf(next, cap, "%.*s%s", (int)(path - url), url, location);
    } else if (strncmp(location, http, strlen(http)) == 0) {
        const char *authority = location + strlen(http);
        size_t len = strcspn(authority, "/?#");
        int rc = oci_authority_parse(authority, len, host, port, err);
        if (rc < 0)
            return tetris_wrap(err, "redirect to '%.100s'", location);
        if (*port == 0)
            *port = 80;
        n = snprintf(next, cap, "%s", location);
    } else {
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "refusing the redirect to '%.100s': only http:// to a listed "
                           "registry is followed",
                           location);
    }
    if (n < 0 || (size_t)n >= cap)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s: Location too long", url);
    return 0;
}

int oci_blob_get(oci_registry *r, const tensor_digest *d, uint64_t size,
                 int (*sink)(void *ctx, const void *data, size_t len, tetris_error *err),
                 void *sink_ctx, tetris_error *err)
{
    char digest[7 + TENSOR_DIGEST_HEX_LEN + 1], url[2048], resolve[OCI_RESOLVE_MAX];
    char host[OCI_HOST_MAX + 1];
    unsigned port = r->port;
    snprintf(host, sizeof host, "%s", r->host);
    oci_digest_format(d, digest);
    snprintf(url, sizeof url, "%s/v2/%s/blobs/%s", r->base, r->repo, digest);
    struct bounded_sink b = {.sink = sink, .ctx = sink_ctx, .size = size};
    for (int hops = 0;; hops++) {
        int rc = admit(r, host, port, resolve, sizeof resolve, err);
        if (rc < 0)
            return rc;
        /* Each piece goes to the sink as it arrives: memory stays one
         * buffer of libcurl's, whatever the blob's size. */
        httpclient_request rq = {.url = url, .sink = bounded, .sink_ctx = &b};
        rc = get(r, &rq, resolve, err);
        if (rc == 0 && rq.status >= 300 && rq.status < 400 && rq.status != 304) {
            char next[sizeof url];
            rc = hops == OCI_MAX_REDIRECTS
                     ? tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s: more than %d redirects", url,
                                   OCI_MAX_REDIRECTS)
                     : next_hop(url, rq.location, next, sizeof next, host, &port, err);
            httpclient_request_clear(&rq);
            if (rc < 0)
                return rc;
            snprintf(url, sizeof url, "%s", next);
            continue;
        }
        /* The messages lead with the fault: a rejected tensor's reason is
         * short (protocol/ingest.h), and the URL is in the pull's log. */
        if (rc < 0 && b.refused.code != 0)
            rc = tetris_fail(err, b.refused.code, 0, "%s", b.refused.msg);
        else if (rc == -TETRIS_E_UNAVAILABLE && b.received > 0 && b.received < size)
            rc = tetris_fail(err, TETRIS_E_CORRUPT, 0,
                             "the reply ended after %llu of the %llu bytes declared",
                             (unsigned long long)b.received, (unsigned long long)size);
        else if (rc == 0 && rq.status == 404)
            rc = tetris_fail(err, TETRIS_E_NOTFOUND, 0, "GET %s: no such blob", url);
        else if (rc == 0 && rq.status != 200)
            rc = tetris_fail(err, TETRIS_E_HTTP, 0, "GET %s: HTTP %ld: %.200s", url, rq.status,
                             rq.body);
        else if (rc == 0 && b.received != size)
            rc = tetris_fail(err, TETRIS_E_CORRUPT, 0,
                             "%llu bytes, not the %llu the manifest declares",
                             (unsigned long long)b.received, (unsigned long long)size);
        httpclient_request_clear(&rq);
        return rc;
    }
}
