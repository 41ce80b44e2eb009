/* httpclient.c - GETs with a timeout and a size cap on libcurl's multi
 * interface (see httpclient.h). */
#include "common/httpclient.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    textbuf body;
    bool too_big;
    CURLcode cc;
    bool done;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
    struct transfer *x = user;
    size_t n = size * nmemb;
    if (x->rq->max_body != 0 && x->body.len + n + 1 > x->rq->max_body) {
        x->too_big = true;
        return 0;
    }
    return textbuf_append(&x->body, data, n) ? n : 0;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *user)
{
    struct transfer *x = user;
    size_t n = size * nmemb;
    if (n > 5 && strncasecmp(data, "etag:", 5) == 0) {
        const char *v = data + 5;
        size_t vlen = n - 5;
        while (vlen > 0 && (*v == ' ' || *v == '\t'))
            v++, vlen--;
        while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
            vlen--;
        free(x->rq->etag);
        x->rq->etag = strndup(v, vlen);
    }
    return n;
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
    long connect_ms = rq->connect_timeout_ms > 0 ? rq->connect_timeout_ms : rq->timeout_ms;
    curl_easy_setopt(x->h, CURLOPT_URL, rq->url);
    curl_easy_setopt(x->h, CURLOPT_HTTPGET, 1L);
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
        }
        if (running > 0 && curl_multi_poll(m, NULL, 0, 100, NULL) != CURLM_OK)
            break;
    }
    for (size_t i = 0; i < n; i++)
        if (!xs[i].done)
            xs[i].cc = CURLE_OPERATION_TIMEDOUT;
}

static void finish(struct transfer *x)
{
    httpclient_request *rq = x->rq;
    const char *url = rq->url;
    if (x->cc == CURLE_OK) {
        rq->body = textbuf_take(&x->body, &rq->len);
        rq->rc = rq->body != NULL ? 0
                                  : tetris_fail(&rq->err, TETRIS_E_NOMEM, ENOMEM, "GET %s", url);
    } else if (x->too_big) {
        rq->rc = tetris_fail(&rq->err, TETRIS_E_PROTOCOL, 0,
                             "GET %s: reply larger than %zu bytes", url, rq->max_body);
    } else if (x->body.failed || x->cc == CURLE_OUT_OF_MEMORY) {
        rq->rc = tetris_fail(&rq->err, TETRIS_E_NOMEM, ENOMEM, "GET %s", url);
    } else {
        rq->rc = tetris_fail(&rq->err,
                             x->cc == CURLE_OPERATION_TIMEDOUT ? TETRIS_E_TIMEOUT
                                                               : TETRIS_E_UNAVAILABLE,
                             0, "GET %s: %s", url, curl_easy_strerror(x->cc));
    }
    if (rq->rc < 0) {
        free(rq->etag);
        rq->etag = NULL;
        rq->status = 0;
    }
    textbuf_free(&x->body);
    curl_slist_free_all(x->headers);
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
        rc = tetris_fail(&err, TETRIS_E_NOMEM, ENOMEM, "GET: out of memory");
    if (rc == 0 && (m = curl_multi_init()) == NULL)
        rc = tetris_fail(&err, TETRIS_E_NOMEM, ENOMEM, "GET: curl multi init");
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
    free(rq->etag);
    rq->body = NULL;
    rq->etag = NULL;
    rq->len = 0;
    rq->status = 0;
    rq->rc = 0;
}
