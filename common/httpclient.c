/* httpclient.c - requests with a timeout and a size cap on libcurl's multi
 * interface (see httpclient.h). */
#include "common/httpclient.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "common/textbuf.h"

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int httpclient_global_init(tetris_error *err)
{
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return tetris_fail(err, TETRIS_E_IO, 0, "curl init: %s", curl_easy_strerror(global_rc));
    return 0;
}

/* What one GET needs while it runs. */
struct transfer {
    httpclient_request *rq;
    CURL *h;
    struct curl_slist *headers;
    struct curl_slist *resolve;
    textbuf body;
    size_t received; /* reply body bytes, sunk or kept */
    int sink_rc;     /* the sink's refusal, 0 if none */
    tetris_error sink_err;
    size_t sent; /* of rq->upload */
    bool too_big;
    CURLcode cc;
    bool done;
    char detail[CURL_ERROR_SIZE]; /* libcurl's words on a failure */
    bool handshake_unfinished;    /* connected, but TLS never completed */
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
    struct transfer *x = user;
    size_t n = size * nmemb;
    /* A kept body needs a byte more for its NUL; a sunk one does not. */
    size_t room = x->rq->sink != NULL ? 0 : 1;
    if (x->rq->max_body != 0 && x->received + n + room > x->rq->max_body) {
        x->too_big = true;
        return 0;
    }
    long status = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
    if (x->rq->sink != NULL && (status < 200 || status > 299)) {
        /* Not the content asked for: kept (in part) for the message. */
        size_t keep = x->body.len < HTTPCLIENT_ERROR_BODY_MAX
                          ? HTTPCLIENT_ERROR_BODY_MAX - x->body.len
                          : 0;
        return keep == 0 || textbuf_append(&x->body, data, n < keep ? n : keep) ? n : 0;
    }
    x->received += n;
    if (x->rq->sink != NULL) {
        int rc = x->rq->sink(x->rq->sink_ctx, data, n, &x->sink_err);
        if (rc < 0) {
            x->sink_rc = rc;
            return 0;
        }
        return n;
    }
    return textbuf_append(&x->body, data, n) ? n : 0;
}

static size_t on_upload(char *buf, size_t size, size_t nitems, void *user)
{
    struct transfer *x = user;
    size_t n = x->rq->upload_len - x->sent;
    if (n > size * nitems)
        n = size * nitems;
    memcpy(buf, (const char *)x->rq->upload + x->sent, n);
    x->sent += n;
    return n;
}

static void clear_reply_headers(httpclient_request *rq)
{
    free(rq->etag);
    free(rq->location);
    free(rq->content_digest);
    free(rq->www_authenticate);
    free(rq->content_range);
    rq->etag = rq->location = rq->content_digest = rq->www_authenticate = rq->content_range = NULL;
    rq->content_length = 0;
    rq->retry_after_s = HTTPCLIENT_RETRY_AFTER_NONE;
    rq->status = 0;
}

/* If the header line data (n bytes) is NAME (with its colon), its value
 * without blanks around it, malloc'd; else NULL. */
static char *header_value(const char *data, size_t n, const char *name)
{
    size_t name_len = strlen(name);
    if (n <= name_len || strncasecmp(data, name, name_len) != 0)
        return NULL;
    const char *v = data + name_len;
    size_t vlen = n - name_len;
    while (vlen > 0 && (*v == ' ' || *v == '\t'))
        v++, vlen--;
    while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
        vlen--;
    return strndup(v, vlen);
}

long httpclient_retry_after_s(const char *value, time_t now)
{
    while (*value == ' ' || *value == '\t')
        value++;
    size_t len = strlen(value);
    while (len > 0 && strchr(" \t\r\n", value[len - 1]) != NULL)
        len--;
    char v[64];
    if (len == 0 || len >= sizeof v)
        return HTTPCLIENT_RETRY_AFTER_NONE;
    memcpy(v, value, len);
    v[len] = '\0';
    if (v[0] >= '0' && v[0] <= '9') {
        char *end;
        errno = 0;
        long secs = strtol(v, &end, 10);
        return errno == 0 && *end == '\0' ? secs : HTTPCLIENT_RETRY_AFTER_NONE;
    }
    /* The three date formats RFC 9110 makes recipients accept. */
    time_t at = curl_getdate(v, NULL);
    if (at == -1)
        return HTTPCLIENT_RETRY_AFTER_NONE;
    return at > now ? (long)(at - now) : 0;
}

static void keep_header(char **slot, char *value)
{
    if (value != NULL) {
        free(*slot);
        *slot = value;
    }
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *user)
{
    struct transfer *x = user;
    size_t n = size * nmemb;
    keep_header(&x->rq->etag, header_value(data, n, "etag:"));
    keep_header(&x->rq->location, header_value(data, n, "location:"));
    keep_header(&x->rq->content_digest, header_value(data, n, "docker-content-digest:"));
    keep_header(&x->rq->www_authenticate, header_value(data, n, "www-authenticate:"));
    keep_header(&x->rq->content_range, header_value(data, n, "content-range:"));
    char *retry_after = header_value(data, n, "retry-after:");
    if (retry_after != NULL) {
        x->rq->retry_after_s = httpclient_retry_after_s(retry_after, time(NULL));
        free(retry_after);
    }
    char *length = header_value(data, n, "content-length:");
    if (length != NULL) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(length, &end, 10);
        x->rq->content_length = errno == 0 && *end == '\0' && end != length ? v : 0;
        free(length);
    }
    return n;
}

static const char *method_of(const httpclient_request *rq)
{
    return rq->method != NULL ? rq->method : "GET";
}

static int setup(struct transfer *x)
{
    const httpclient_request *rq = x->rq;
    x->h = curl_easy_init();
    if (x->h == NULL)
        return -1;
    if (rq->if_none_match != NULL) {
        char hdr[512];
        snprintf(hdr, sizeof hdr, "If-None-Match: %s", rq->if_none_match);
        if ((x->headers = curl_slist_append(NULL, hdr)) == NULL)
            return -1;
    }
    for (const char *const *h = rq->headers; h != NULL && *h != NULL; h++) {
        struct curl_slist *more = curl_slist_append(x->headers, *h);
        if (more == NULL)
            return -1;
        x->headers = more;
    }
    if (rq->resolve != NULL) {
        if ((x->resolve = curl_slist_append(NULL, rq->resolve)) == NULL)
            return -1;
        curl_easy_setopt(x->h, CURLOPT_RESOLVE, x->resolve);
    }
    long connect_ms = rq->connect_timeout_ms > 0 ? rq->connect_timeout_ms : rq->timeout_ms;
    const char *method = method_of(rq);
    curl_easy_setopt(x->h, CURLOPT_URL, rq->url);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(x->h, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(x->h, CURLOPT_NOBODY, 1L);
    } else {
        /* A body of upload_len bytes (maybe none) read from upload, with
         * the method named: curl's upload mode sends PUT, which
         * CUSTOMREQUEST renames. No "Expect: 100-continue" round trip. */
        curl_easy_setopt(x->h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(x->h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->upload_len);
        curl_easy_setopt(x->h, CURLOPT_READFUNCTION, on_upload);
        curl_easy_setopt(x->h, CURLOPT_READDATA, x);
        curl_easy_setopt(x->h, CURLOPT_CUSTOMREQUEST, method);
        struct curl_slist *more = curl_slist_append(x->headers, "Expect:");
        if (more == NULL)
            return -1;
        x->headers = more;
    }
    curl_easy_setopt(x->h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(x->h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    curl_easy_setopt(x->h, CURLOPT_TIMEOUT_MS, rq->timeout_ms);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->h, CURLOPT_ERRORBUFFER, x->detail);
    if (rq->ca_file != NULL)
        curl_easy_setopt(x->h, CURLOPT_CAINFO, rq->ca_file);
    if (rq->tls_probe) {
        curl_easy_setopt(x->h, CURLOPT_CONNECT_ONLY, 1L);
        curl_easy_setopt(x->h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(x->h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (rq->user_agent != NULL)
        curl_easy_setopt(x->h, CURLOPT_USERAGENT, rq->user_agent);
    return 0;
}

/* Runs the transfers until each is done or the loop cannot go on. */
static void run(CURLM *m, struct transfer *xs, size_t n)
{
    int running = 1;
    while (running > 0) {
        if (curl_multi_perform(m, &running) != CURLM_OK)
            break;
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct transfer *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            x->cc = msg->data.result;
            x->done = true;
            curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->rq->status);
            curl_off_t connected = 0, handshaken = 0;
            curl_easy_getinfo(x->h, CURLINFO_CONNECT_TIME_T, &connected);
            curl_easy_getinfo(x->h, CURLINFO_APPCONNECT_TIME_T, &handshaken);
            x->handshake_unfinished = strncmp(x->rq->url, "https://", 8) == 0 && connected > 0 &&
                                      handshaken == 0;
        }
        if (running > 0 && curl_multi_poll(m, NULL, 0, 100, NULL) != CURLM_OK)
            break;
    }
    for (size_t i = 0; i < n; i++)
        if (!xs[i].done)
            xs[i].cc = CURLE_OPERATION_TIMEDOUT;
}

static enum httpclient_failure failure_of(const struct transfer *x)
{
    /* A peer that took the connection and never answered the TLS
     * handshake (a plain HTTP server waiting for a request line). */
    if (x->cc == CURLE_OPERATION_TIMEDOUT && x->handshake_unfinished)
        return HTTPCLIENT_FAIL_TLS_HANDSHAKE;
    switch (x->cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return HTTPCLIENT_FAIL_CONNECT;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE: return HTTPCLIENT_FAIL_DROPPED;
    case CURLE_OPERATION_TIMEDOUT: return HTTPCLIENT_FAIL_TIMEOUT;
    case CURLE_SSL_CONNECT_ERROR: return HTTPCLIENT_FAIL_TLS_HANDSHAKE;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH: return HTTPCLIENT_FAIL_TLS_VERIFY;
    default: return HTTPCLIENT_FAIL_OTHER;
    }
}

static void finish(struct transfer *x)
{
    httpclient_request *rq = x->rq;
    const char *url = rq->url;
    const char *method = method_of(rq);
    if (x->cc == CURLE_OK) {
        rq->body = textbuf_take(&x->body, &rq->len);
        rq->rc = rq->body != NULL
                     ? 0
                     : tetris_fail(&rq->err, TETRIS_E_NOMEM, ENOMEM, "%s %s", method, url);
    } else if (x->too_big) {
        rq->rc = tetris_fail(&rq->err, TETRIS_E_PROTOCOL, 0, "%s %s: reply larger than %zu bytes",
                             method, url, rq->max_body);
    } else if (x->sink_rc < 0) {
        rq->rc = tetris_fail(&rq->err, -x->sink_rc, 0, "%s %s: %s", method, url, x->sink_err.msg);
    } else if (x->body.failed || x->cc == CURLE_OUT_OF_MEMORY) {
        rq->rc = tetris_fail(&rq->err, TETRIS_E_NOMEM, ENOMEM, "%s %s", method, url);
    } else {
        rq->failure = failure_of(x);
        rq->rc = tetris_fail(&rq->err,
                             x->cc == CURLE_OPERATION_TIMEDOUT ? TETRIS_E_TIMEOUT
                                                               : TETRIS_E_UNAVAILABLE,
                             0, "%s %s: %s", method, url,
                             x->detail[0] != '\0' ? x->detail : curl_easy_strerror(x->cc));
    }
    if (rq->rc < 0)
        clear_reply_headers(rq);
    textbuf_free(&x->body);
    curl_slist_free_all(x->headers);
    curl_slist_free_all(x->resolve);
}

void httpclient_get_all(httpclient_request *const *rqs, size_t n, unsigned max_parallel)
{
    for (size_t i = 0; i < n; i++) {
        httpclient_request_clear(rqs[i]);
        tetris_error_clear(&rqs[i]->err);
    }
    tetris_error err = {0};
    struct transfer *xs = NULL;
    CURLM *m = NULL;
    int rc = httpclient_global_init(&err);
    if (rc == 0 && (xs = calloc(n ? n : 1, sizeof *xs)) == NULL)
        rc = tetris_fail(&err, TETRIS_E_NOMEM, ENOMEM, "HTTP: out of memory");
    if (rc == 0 && (m = curl_multi_init()) == NULL)
        rc = tetris_fail(&err, TETRIS_E_NOMEM, ENOMEM, "HTTP: curl multi init");
    if (rc < 0) {
        for (size_t i = 0; i < n; i++) {
            rqs[i]->rc = rc;
            rqs[i]->err = err;
        }
        free(xs);
        return;
    }
    curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)max_parallel);
    for (size_t i = 0; i < n; i++) {
        xs[i].rq = rqs[i];
        if (setup(&xs[i]) < 0 || curl_multi_add_handle(m, xs[i].h) != CURLM_OK) {
            xs[i].cc = CURLE_OUT_OF_MEMORY;
            xs[i].done = true;
        }
    }
    run(m, xs, n);
    for (size_t i = 0; i < n; i++) {
        if (xs[i].h != NULL) {
            curl_multi_remove_handle(m, xs[i].h);
            curl_easy_cleanup(xs[i].h);
        }
        finish(&xs[i]);
    }
    curl_multi_cleanup(m);
    free(xs);
}

int httpclient_get(httpclient_request *rq, tetris_error *err)
{
    httpclient_get_all(&rq, 1, 1);
    if (rq->rc < 0 && err != NULL)
        *err = rq->err;
    return rq->rc;
}

void httpclient_request_clear(httpclient_request *rq)
{
    free(rq->body);
    rq->body = NULL;
    clear_reply_headers(rq);
    rq->len = 0;
    rq->rc = 0;
    rq->failure = HTTPCLIENT_FAIL_NONE;
}
