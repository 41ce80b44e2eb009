/* oci_client.c - the calls of the OCI distribution API a push makes
 * (blob HEAD, cross-repository mount, monolithic and chunked upload,
 * manifest PUT) on oci_transport.c, held to oci.h's rules: nothing
 * followed or sent to a host other than the registry's. A call that may be
 * repeated as it is is tried again on its own (oci_call); an upload, whose
 * steps share a session on the registry, is tried again whole. */
#include "protocol/oci.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/httpclient.h"
#include "common/log.h"

#define REPLY_MAX (64u << 10) /* an error document or an empty 201 */

int oci_sha256(const void *data, size_t len, tensor_digest *out, tetris_error *err)
{
    unsigned int n = 0;
    if (EVP_Digest(data, len, out->bytes, &n, EVP_sha256(), NULL) != 1 || n != TENSOR_DIGEST_BYTES)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "SHA-256 failed");
    return 0;
}

/* One request, tried again where that is safe (oci_call); the reply's
 * status is the caller's to judge. once: a step of an upload, which is
 * tried again as a whole (upload_blob). */
static int call(oci_registry *r, httpclient_request *rq, bool once, tetris_error *err)
{
    if (rq->max_body == 0)
        rq->max_body = REPLY_MAX;
    int rc = once ? oci_send(r, rq, 0, err) : oci_call(r, rq, 0, err);
    if (rc == 0)
        r->bytes_sent += rq->upload_len;
    return rc;
}

/* An unexpected status, with the first words of the registry's reply. */
static int unexpected(const httpclient_request *rq, const char *what, tetris_error *err)
{
    return tetris_fail(err, TETRIS_E_HTTP, 0, "%s %s: HTTP %ld: %.200s", rq->method, what,
                       rq->status, rq->body != NULL ? rq->body : "");
}

/* The absolute URL of a Location header, if it is the registry's own
 * (relative, or under base + "/"); TETRIS_E_PROTOCOL otherwise. */
static int own_location(const oci_registry *r, const char *location, char *out, size_t cap,
                        tetris_error *err)
{
    size_t base_len = strlen(r->base);
    int n;
    if (location == NULL)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s: an upload without a Location", r->base);
    if (location[0] == '/' && location[1] != '/')
        n = snprintf(out, cap, "%s%s", r->base, location);
    else if (strncmp(location, r->base, base_len) == 0 && location[base_len] == '/')
        n = snprintf(out, cap, "%s", location);
    else
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                           "%s: refusing Location '%.200s': not this registry", r->base, location);
    if (n < 0 || (size_t)n >= cap)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s: Location too long", r->base);
    return 0;
}

int oci_blob_exists(oci_registry *r, const tensor_digest *d, bool *present, uint64_t *size,
                    tetris_error *err)
{
    char digest[7 + TENSOR_DIGEST_HEX_LEN + 1], url[1024];
    oci_digest_format(d, digest);
    snprintf(url, sizeof url, "%s/v2/%s/blobs/%s", r->base, r->repo, digest);
    httpclient_request rq = {.url = url, .method = "HEAD"};
    int rc = call(r, &rq, false, err);
    if (rc == 0 && rq.status != 200 && rq.status != 404)
        rc = unexpected(&rq, url, err);
    if (rc == 0) {
        *present = rq.status == 200;
        if (size != NULL)
            *size = *present ? rq.content_length : 0;
    }
    httpclient_request_clear(&rq);
    return rc;
}

/* What an upload step's failure says about trying the upload again. */
struct upload_outcome {
    bool retryable;
    httpclient_request reply; /* its status and Retry-After only */
};

static void note_outcome(struct upload_outcome *o, const httpclient_request *rq, int rc)
{
    if (o == NULL)
        return;
    o->retryable = oci_retryable(rq, rc);
    o->reply.status = rq->status;
    o->reply.retry_after_s = rq->retry_after_s;
}

/* POST .../blobs/uploads/ (with query, if any): 201 (mounted, *location
 * NULL) or 202 with the session's URL in *location (malloc'd). o: NULL
 * for a call tried again on its own, else where a step of an upload says
 * whether it may be. */
static int start_upload(oci_registry *r, const char *query, char **location,
                        struct upload_outcome *o, tetris_error *err)
{
    char url[1024], where[1024];
    snprintf(url, sizeof url, "%s/v2/%s/blobs/uploads/%s", r->base, r->repo, query);
    httpclient_request rq = {.url = url, .method = "POST"};
    int rc = call(r, &rq, o != NULL, err);
    note_outcome(o, &rq, rc);
    *location = NULL;
    if (rc == 0 && rq.status != 201 && rq.status != 202)
        rc = unexpected(&rq, url, err);
    if (rc == 0 && rq.status == 202 &&
        (rc = own_location(r, rq.location, where, sizeof where, err)) == 0 &&
        (*location = strdup(where)) == NULL)
        rc = tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", url);
    httpclient_request_clear(&rq);
    return rc;
}

int oci_blob_mount(oci_registry *r, const tensor_digest *d, const char *from, bool *mounted,
                   tetris_error *err)
{
    char digest[7 + TENSOR_DIGEST_HEX_LEN + 1], query[2 * OCI_REPO_MAX];
    oci_digest_format(d, digest);
    snprintf(query, sizeof query, "?mount=%s&from=%s", digest, from);
    cleanup_free char *location = NULL;
    int rc = start_upload(r, query, &location, NULL, err);
    /* A 202 is the registry declining the mount and opening a session we
     * do not use: it expires on its own. */
    *mounted = rc == 0 && location == NULL;
    return rc;
}

/* Sends [offset, offset + len) of data to the session at *location
 * (PATCH), which the reply's Location replaces. */
static int upload_chunk(oci_registry *r, char **location, const uint8_t *data, size_t offset,
                        size_t len, struct upload_outcome *o, tetris_error *err)
{
    char range[96], where[1024];
    snprintf(range, sizeof range, "Content-Range: %zu-%zu", offset, offset + len - 1);
    const char *headers[] = {"Content-Type: application/octet-stream", range, NULL};
    httpclient_request rq = {.url = *location,
                             .method = "PATCH",
                             .headers = headers,
                             .upload = data + offset,
                             .upload_len = len};
    int rc = call(r, &rq, true, err);
    note_outcome(o, &rq, rc);
    if (rc == 0 && rq.status != 202)
        rc = unexpected(&rq, *location, err);
    if (rc == 0 && (rc = own_location(r, rq.location, where, sizeof where, err)) == 0) {
        char *next = strdup(where);
        if (next == NULL)
            rc = tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", where);
        else {
            free(*location);
            *location = next;
        }
    }
    httpclient_request_clear(&rq);
    return rc;
}

/* One upload, from its POST to its closing PUT. */
static int upload_once(oci_registry *r, const tensor_digest *d, const void *data, size_t len,
                       size_t chunk, struct upload_outcome *o, tetris_error *err)
{
    cleanup_free char *location = NULL;
    int rc = start_upload(r, "", &location, o, err);
    if (rc == 0 && location == NULL)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s: upload started with 201", r->base);
    size_t sent = 0;
    if (rc == 0 && chunk != 0 && len > chunk)
        for (; rc == 0 && sent < len; sent += chunk)
            rc = upload_chunk(r, &location, data, sent, len - sent < chunk ? len - sent : chunk, o,
                              err);
    if (rc < 0)
        return rc;
    char digest[7 + TENSOR_DIGEST_HEX_LEN + 1], url[2048];
    oci_digest_format(d, digest);
    snprintf(url, sizeof url, "%s%cdigest=%s", location, strchr(location, '?') ? '&' : '?', digest);
    const char *headers[] = {"Content-Type: application/octet-stream", NULL};
    size_t rest = sent < len ? len - sent : 0;
    httpclient_request rq = {.url = url,
                             .method = "PUT",
                             .headers = headers,
                             .upload = (const uint8_t *)data + (len - rest),
                             .upload_len = rest};
    rc = call(r, &rq, true, err);
    note_outcome(o, &rq, rc);
    if (rc == 0 && rq.status != 201)
        rc = unexpected(&rq, url, err);
    httpclient_request_clear(&rq);
    return rc;
}

/* A failed step leaves its session behind (the registry expires it): the
 * upload is tried again from a new POST, the bytes sent whole again. */
int oci_blob_upload(oci_registry *r, const tensor_digest *d, const void *data, size_t len,
                    size_t chunk, tetris_error *err)
{
    for (int attempt = 1;; attempt++) {
        struct upload_outcome o = {.retryable = false};
        int rc = upload_once(r, d, data, len, chunk, &o, err);
        if (rc == 0 || !o.retryable)
            return rc;
        if (attempt == OCI_MAX_ATTEMPTS)
            return tetris_wrap(err, "%d attempts", attempt);
        long delay = oci_retry_delay_ms(&o.reply, attempt);
        log_info("event=registry-retry op=upload status=%ld attempt=%d delay_ms=%ld msg=%s",
                 o.reply.status, attempt, delay, LOG_Q(err->msg));
        clock_sleep_ms(delay);
    }
}

int oci_manifest_put(oci_registry *r, const char *reference, const char *json, size_t len,
                     tensor_digest *digest, tetris_error *err)
{
    char url[1024];
    int rc = oci_sha256(json, len, digest, err);
    if (rc < 0)
        return rc;
    snprintf(url, sizeof url, "%s/v2/%s/manifests/%s", r->base, r->repo, reference);
    const char *headers[] = {"Content-Type: " OCI_MANIFEST_MEDIA_TYPE, NULL};
    httpclient_request rq = {.url = url,
                             .method = "PUT",
                             .headers = headers,
                             .upload = json,
                             .upload_len = len};
    rc = call(r, &rq, false, err);
    if (rc == 0 && rq.status != 201)
        rc = unexpected(&rq, url, err);
    if (rc == 0 && rq.content_digest != NULL) {
        tensor_digest said;
        if (oci_digest_parse(rq.content_digest, &said, err) < 0 ||
            !tensor_digest_equal(&said, digest))
            rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                             "%s: the registry says the manifest is %.80s, not what we sent", url,
                             rq.content_digest);
    }
    httpclient_request_clear(&rq);
    return rc;
}
