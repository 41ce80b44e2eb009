/* kube.c - the Kubernetes REST client: one curl easy handle per request (so
 * threads never share one), retries with backoff, Status-object errors,
 * paged lists and streamed watches. See kube.h for the contract. */
#include "common/kube.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include <curl/curl.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/httpclient.h"
#include "common/kubeconfig.h"
#include "common/log.h"
#include "common/textbuf.h"

#define KUBE_MAX_BODY (256u << 20)   /* a reply larger than this is refused */
#define KUBE_MAX_EVENT (16u << 20)   /* one watch event line */
#define KUBE_MAX_RETRY_AFTER_MS 30000
#define KUBE_LIST_RESTARTS 3

struct kube_client {
    kube_config cfg;
    long connect_ms;
    long total_ms;
    int max_attempts;
    long base_backoff_ms;
    long max_backoff_ms;
    pthread_mutex_t token_lock; /* guards the cached token_file contents */
    char *file_token;
    struct timespec file_token_mtime;
    ino_t file_token_ino;
    off_t file_token_size;
};

/* ---- construction ---- */

static int client_from_config(kube_config *cfg, kube_client **out, tetris_error *err)
{
    int r = httpclient_global_init(err);
    if (r < 0)
        return r;
    kube_client *c = calloc(1, sizeof *c);
    if (c == NULL) {
        kubeconfig_clear(cfg);
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "kube client");
    }
    c->cfg = *cfg;
    memset(cfg, 0, sizeof *cfg);
    c->connect_ms = 5000;
    c->total_ms = 30000;
    c->max_attempts = 5;
    c->base_backoff_ms = 200;
    c->max_backoff_ms = 5000;
    pthread_mutex_init(&c->token_lock, NULL);
    *out = c;
    return 0;
}

int kube_client_from_kubeconfig(const char *path, kube_client **out, tetris_error *err)
{
    kube_config cfg;
    int r = kubeconfig_load(path, &cfg, err);
    if (r < 0)
        return r;
    return client_from_config(&cfg, out, err);
}

int kube_client_in_cluster(const char *sa_dir, const char *server, kube_client **out,
                           tetris_error *err)
{
    kube_config cfg;
    int r = kubeconfig_in_cluster(sa_dir, server, &cfg, err);
    if (r < 0)
        return r;
    return client_from_config(&cfg, out, err);
}

int kube_client_new(const char *kubeconfig_path, kube_client **out, tetris_error *err)
{
    if (kubeconfig_path != NULL)
        return kube_client_from_kubeconfig(kubeconfig_path, out, err);
    return kube_client_in_cluster(NULL, NULL, out, err);
}

void kube_client_free(kube_client *c)
{
    if (c == NULL)
        return;
    kubeconfig_clear(&c->cfg);
    free(c->file_token);
    pthread_mutex_destroy(&c->token_lock);
    free(c);
}

void kube_client_set_timeouts(kube_client *c, long connect_ms, long total_ms)
{
    c->connect_ms = connect_ms;
    c->total_ms = total_ms;
}

void kube_client_set_retries(kube_client *c, int max_attempts, long base_backoff_ms,
                             long max_backoff_ms)
{
    c->max_attempts = max_attempts < 1 ? 1 : max_attempts;
    c->base_backoff_ms = base_backoff_ms;
    c->max_backoff_ms = max_backoff_ms;
}

const char *kube_client_namespace(const kube_client *c)
{
    return c->cfg.ns;
}

const char *kube_client_server(const kube_client *c)
{
    return c->cfg.server;
}

/* ---- credentials ---- */

/* The bearer token for this request (malloc'd, NULL if none). A token file
 * is re-read when its inode, size or mtime changed: service-account tokens
 * are rotated by the kubelet, which swaps the file. */
static int current_token(kube_client *c, char **out, tetris_error *err)
{
    *out = NULL;
    if (c->cfg.token_file == NULL) {
        if (c->cfg.token != NULL && (*out = strdup(c->cfg.token)) == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "token");
        return 0;
    }
    struct stat st;
    if (stat(c->cfg.token_file, &st) < 0)
        return tetris_fail(err, TETRIS_E_DENIED, errno, "token file %s", c->cfg.token_file);
    pthread_mutex_lock(&c->token_lock);
    int r = 0;
    if (c->file_token == NULL || st.st_ino != c->file_token_ino ||
        st.st_size != c->file_token_size || st.st_mtim.tv_sec != c->file_token_mtime.tv_sec ||
        st.st_mtim.tv_nsec != c->file_token_mtime.tv_nsec) {
        cleanup_fclose FILE *f = fopen(c->cfg.token_file, "re");
        char buf[16384];
        size_t n = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f == NULL || ferror(f)) {
            r = tetris_fail(err, TETRIS_E_DENIED, errno, "read token file %s", c->cfg.token_file);
        } else {
            buf[n] = '\0';
            buf[strcspn(buf, "\r\n")] = '\0';
            free(c->file_token);
            c->file_token = strdup(buf);
            c->file_token_ino = st.st_ino;
            c->file_token_size = st.st_size;
            c->file_token_mtime = st.st_mtim;
            if (c->file_token == NULL)
                r = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "token");
        }
    }
    if (r == 0 && (*out = strdup(c->file_token)) == NULL)
        r = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "token");
    pthread_mutex_unlock(&c->token_lock);
    return r;
}

/* ---- URLs ---- */

static void query_param(textbuf *b, const char *key, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    textbuf_append(b, strchr(b->data, '?') != NULL ? "&" : "?", 1);
    textbuf_append(b, key, strlen(key));
    textbuf_append(b, "=", 1);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            textbuf_append(b, (const char *)p, 1);
        } else {
            char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            textbuf_append(b, esc, 3);
        }
    }
}

/* server + path (which may carry a query already) + selector parameters. */
static int build_url(const kube_client *c, const char *path, const kube_list_opts *opts,
                     textbuf *url, tetris_error *err)
{
    *url = (textbuf){.max = 16384};
    if (path[0] != '/')
        return tetris_fail(err, TETRIS_E_INVAL, 0, "kube: path must start with '/': %s", path);
    size_t slen = strlen(c->cfg.server);
    while (slen > 0 && c->cfg.server[slen - 1] == '/')
        slen--;
    textbuf_append(url, c->cfg.server, slen);
    textbuf_append(url, path, strlen(path));
    if (opts != NULL && opts->label_selector != NULL)
        query_param(url, "labelSelector", opts->label_selector);
    if (opts != NULL && opts->field_selector != NULL)
        query_param(url, "fieldSelector", opts->field_selector);
    if (url->failed) {
        textbuf_free(url);
        return tetris_fail(err, TETRIS_E_INVAL, 0, "kube: URL too long: %s", path);
    }
    return 0;
}

/* ---- one HTTP exchange ---- */

typedef struct exchange {
    textbuf body;
    long retry_after_ms; /* -1 when absent */
    /* Watch streaming: lines are handed to on_line as they arrive. */
    int (*on_line)(struct exchange *x, char *line, size_t len);
    void *line_user;
    size_t line_start;
    volatile bool *stop;
    CURL *handle;
} exchange;

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
    exchange *x = user;
    size_t n = size * nmemb;
    if (!textbuf_append(&x->body, data, n))
        return 0;
    long status = 0;
    curl_easy_getinfo(x->handle, CURLINFO_RESPONSE_CODE, &status);
    /* An error reply is one Status object: keep it whole for the message. */
    if (x->on_line == NULL || status < 200 || status >= 300)
        return n;
    for (;;) {
        char *start = x->body.data + x->line_start;
        char *nl = memchr(start, '\n', x->body.len - x->line_start);
        if (nl == NULL)
            break;
        *nl = '\0';
        size_t len = (size_t)(nl - start);
        x->line_start += len + 1;
        if (len > 0 && x->on_line(x, start, len) != 0)
            return 0; /* aborts the transfer: the consumer is done */
    }
    /* Drop consumed lines so a long watch does not grow without bound. */
    if (x->line_start > 0) {
        memmove(x->body.data, x->body.data + x->line_start, x->body.len - x->line_start);
        x->body.len -= x->line_start;
        x->body.data[x->body.len] = '\0';
        x->line_start = 0;
    }
    return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *user)
{
    exchange *x = user;
    size_t n = size * nmemb;
    static const char name[] = "retry-after:";
    if (n > sizeof name - 1 && strncasecmp(data, name, sizeof name - 1) == 0) {
        char value[64];
        size_t vlen = n - (sizeof name - 1);
        if (vlen >= sizeof value)
            vlen = sizeof value - 1;
        memcpy(value, data + sizeof name - 1, vlen);
        value[vlen] = '\0';
        long secs = httpclient_retry_after_s(value, time(NULL));
        if (secs != HTTPCLIENT_RETRY_AFTER_NONE)
            x->retry_after_ms = secs > KUBE_MAX_RETRY_AFTER_MS / 1000 ? KUBE_MAX_RETRY_AFTER_MS
                                                                      : secs * 1000;
    }
    return n;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    exchange *x = user;
    return x->stop != NULL && *x->stop ? 1 : 0;
}

typedef struct request {
    const char *method;
    const char *url;
    const char *content_type; /* of body, NULL without body */
    const char *body;
    long total_ms;            /* 0: the client's */
} request;

/* Performs one attempt. *status is the HTTP status (0 on transport error);
 * *curl_rc the transport result. */
static int perform(kube_client *c, const request *rq, exchange *x, long *status,
                   CURLcode *curl_rc, tetris_error *err)
{
    cleanup_free char *token = NULL;
    int r = current_token(c, &token, err);
    if (r < 0)
        return r;
    CURL *h = curl_easy_init();
    if (h == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "curl_easy_init");
    struct curl_slist *headers = NULL;
    char auth[16400];
    headers = curl_slist_append(headers, "Accept: application/json");
    if (token != NULL && token[0] != '\0') {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append(headers, auth);
    }
    char ctype[128];
    if (rq->content_type != NULL) {
        snprintf(ctype, sizeof ctype, "Content-Type: %s", rq->content_type);
        headers = curl_slist_append(headers, ctype);
    }
    x->handle = h;
    curl_easy_setopt(h, CURLOPT_URL, rq->url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "tetris/" TETRIS_VERSION);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, rq->total_ms > 0 ? rq->total_ms : c->total_ms);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    if (x->stop != NULL) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
    if (rq->body != NULL) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(rq->body));
    } else if (strcmp(rq->method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    if (c->cfg.ca.data != NULL) {
        struct curl_blob blob = {c->cfg.ca.data, c->cfg.ca.len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    }
    if (c->cfg.cert.data != NULL) {
        struct curl_blob cert = {c->cfg.cert.data, c->cfg.cert.len, CURL_BLOB_COPY};
        struct curl_blob key = {c->cfg.key.data, c->cfg.key.len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (c->cfg.insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    *curl_rc = curl_easy_perform(h);
    *status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    x->handle = NULL;
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    explicit_bzero(auth, sizeof auth);
    return 0;
}

/* The Status object's "reason: message", or the start of the body. */
static void status_text(const textbuf *body, char *out, size_t size)
{
    out[0] = '\0';
    if (body->data == NULL)
        return;
    json_t *st = json_loadb(body->data, body->len, 0, NULL);
    const char *reason = json_string_value(json_object_get(st, "reason"));
    const char *message = json_string_value(json_object_get(st, "message"));
    if (reason != NULL || message != NULL)
        snprintf(out, size, "%s%s%s", reason != NULL ? reason : "",
                 reason != NULL && message != NULL ? ": " : "", message != NULL ? message : "");
    else
        snprintf(out, size, "%.200s", body->data);
    json_decref(st);
}

static int http_code_to_tetris(long status)
{
    if (status == 404)
        return TETRIS_E_NOTFOUND;
    if (status == 409 || status == 410)
        return TETRIS_E_CONFLICT;
    if (status == 401 || status == 403)
        return TETRIS_E_DENIED;
    if (status == 400 || status == 422)
        return TETRIS_E_INVAL;
    if (status == 429 || status >= 500)
        return TETRIS_E_UNAVAILABLE;
    return TETRIS_E_HTTP;
}

/* Where the server cannot have acted (refused connection) or asked us to
 * come back (429, Retry-After), any request is retried; other transport
 * failures and 5xx only for idempotent methods. */
static bool should_retry(const request *rq, CURLcode curl_rc, long status, const exchange *x)
{
    bool idempotent = strcmp(rq->method, "GET") == 0 || strcmp(rq->method, "DELETE") == 0;
    if (curl_rc == CURLE_COULDNT_CONNECT)
        return true;
    if (curl_rc != CURLE_OK)
        return idempotent && (curl_rc == CURLE_GOT_NOTHING || curl_rc == CURLE_RECV_ERROR ||
                              curl_rc == CURLE_SEND_ERROR || curl_rc == CURLE_PARTIAL_FILE ||
                              curl_rc == CURLE_OPERATION_TIMEDOUT);
    if (status == 429)
        return true;
    if (status >= 500)
        return idempotent || x->retry_after_ms >= 0;
    return false;
}

/* Exponential backoff with jitter in [delay/2, delay]. */
static long backoff_ms(const kube_client *c, int attempt)
{
    return clock_backoff_ms(c->base_backoff_ms, c->max_backoff_ms, attempt);
}

static int transport_error(const request *rq, const char *path, CURLcode rc, tetris_error *err)
{
    int code = rc == CURLE_OPERATION_TIMEDOUT ? TETRIS_E_TIMEOUT : TETRIS_E_UNAVAILABLE;
    return tetris_fail(err, code, 0, "%s %s: %s", rq->method, path, curl_easy_strerror(rc));
}

/* Sends rq with retries. On 2xx, *out (if not NULL) is the decoded body. */
static int kube_request(kube_client *c, const request *rq, const char *path, json_t **out,
                        tetris_error *err)
{
    for (int attempt = 1;; attempt++) {
        exchange x = {.body = {.max = KUBE_MAX_BODY}, .retry_after_ms = -1};
        long status = 0;
        CURLcode crc = CURLE_OK;
        int r = perform(c, rq, &x, &status, &crc, err);
        if (r < 0) {
            textbuf_free(&x.body);
            return r;
        }
        if (crc == CURLE_OK && status >= 200 && status < 300) {
            r = 0;
            if (out != NULL) {
                json_error_t je;
                *out = json_loadb(x.body.data != NULL ? x.body.data : "", x.body.len, 0, &je);
                if (*out == NULL)
                    r = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s %s: reply is not JSON: %s",
                                    rq->method, path, je.text);
            }
            textbuf_free(&x.body);
            return r;
        }
        if (x.body.failed && crc == CURLE_WRITE_ERROR) {
            textbuf_free(&x.body);
            return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "%s %s: reply larger than %u bytes",
                               rq->method, path, KUBE_MAX_BODY);
        }
        bool retry = should_retry(rq, crc, status, &x) && attempt < c->max_attempts;
        if (crc != CURLE_OK)
            r = transport_error(rq, path, crc, err);
        else {
            char text[400];
            status_text(&x.body, text, sizeof text);
            r = tetris_fail(err, http_code_to_tetris(status), 0, "%s %s: HTTP %ld%s%s",
                            rq->method, path, status, text[0] ? " " : "", text);
        }
        long delay = x.retry_after_ms >= 0 ? x.retry_after_ms : backoff_ms(c, attempt);
        textbuf_free(&x.body);
        if (!retry)
            return r;
        log_debug("event=kube-retry method=%s path=%s status=%ld attempt=%d delay_ms=%ld",
                  rq->method, path, status, attempt, delay);
        clock_sleep_ms(delay);
    }
}

static int simple_request(kube_client *c, const char *method, const char *path,
                          const char *content_type, json_t *body, json_t **out,
                          tetris_error *err)
{
    textbuf url;
    int r = build_url(c, path, NULL, &url, err);
    if (r < 0)
        return r;
    cleanup_free char *url_str = url.data;
    cleanup_free char *text = NULL;
    if (body != NULL && (text = json_dumps(body, JSON_COMPACT)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "%s %s: encode body", method, path);
    request rq = {.method = method, .url = url_str, .content_type = content_type, .body = text};
    return kube_request(c, &rq, path, out, err);
}

/* ---- public calls ---- */

int kube_get(kube_client *c, const char *path, json_t **out, tetris_error *err)
{
    return simple_request(c, "GET", path, NULL, NULL, out, err);
}

int kube_create(kube_client *c, const char *path, json_t *object, json_t **out,
                tetris_error *err)
{
    return simple_request(c, "POST", path, "application/json", object, out, err);
}

int kube_delete(kube_client *c, const char *path, tetris_error *err)
{
    return simple_request(c, "DELETE", path, NULL, NULL, NULL, err);
}

int kube_patch(kube_client *c, const char *path, enum kube_patch_type type, json_t *patch,
               json_t **out, tetris_error *err)
{
    static const char *const types[] = {
        [KUBE_PATCH_JSON] = "application/json-patch+json",
        [KUBE_PATCH_MERGE] = "application/merge-patch+json",
        [KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
    };
    if ((unsigned)type > KUBE_PATCH_STRATEGIC)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "kube_patch: bad patch type %d", (int)type);
    return simple_request(c, "PATCH", path, types[type], patch, out, err);
}

static int path_printf(char *buf, size_t size, tetris_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int path_printf(char *buf, size_t size, tetris_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "kube: object name too long");
    return 0;
}

int kube_bind_pod(kube_client *c, const char *ns, const char *pod, const char *node,
                  tetris_error *err)
{
    char path[1024];
    int r = path_printf(path, sizeof path, err, "/api/v1/namespaces/%s/pods/%s/binding", ns, pod);
    if (r < 0)
        return r;
    json_t *binding = json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:s,s:s,s:s}}", "apiVersion", "v1",
                                "kind", "Binding", "metadata", "name", pod, "namespace", ns,
                                "target", "apiVersion", "v1", "kind", "Node", "name", node);
    if (binding == NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "bind %s/%s: bad name", ns, pod);
    r = kube_create(c, path, binding, NULL, err);
    json_decref(binding);
    return r;
}

int kube_get_scale(kube_client *c, const char *ns, const char *deployment, long *replicas,
                   tetris_error *err)
{
    char path[1024];
    int r = path_printf(path, sizeof path, err, "/apis/apps/v1/namespaces/%s/deployments/%s/scale",
                        ns, deployment);
    json_t *scale = NULL;
    if (r == 0)
        r = kube_get(c, path, &scale, err);
    if (r < 0)
        return r;
    json_t *v = json_object_get(json_object_get(scale, "spec"), "replicas");
    /* spec.replicas is omitted when it is zero. */
    *replicas = json_is_integer(v) ? (long)json_integer_value(v) : 0;
    json_decref(scale);
    return 0;
}

int kube_scale_deployment(kube_client *c, const char *ns, const char *deployment, long replicas,
                          tetris_error *err)
{
    char path[1024];
    int r = path_printf(path, sizeof path, err, "/apis/apps/v1/namespaces/%s/deployments/%s/scale",
                        ns, deployment);
    if (r < 0)
        return r;
    json_t *patch = json_pack("{s:{s:I}}", "spec", "replicas", (json_int_t)replicas);
    if (patch == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "scale");
    r = kube_patch(c, path, KUBE_PATCH_MERGE, patch, NULL, err);
    json_decref(patch);
    return r;
}

/* ---- lists ---- */

static int dup_rv(json_t *page, char **out, tetris_error *err)
{
    const char *rv = json_string_value(json_object_get(json_object_get(page, "metadata"),
                                                       "resourceVersion"));
    free(*out);
    *out = NULL;
    if (rv != NULL && (*out = strdup(rv)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "list");
    return 0;
}

/* One pass over all pages. */
static int list_pages(kube_client *c, const char *path, const kube_list_opts *opts,
                      json_t *items, char **rv, tetris_error *err)
{
    long limit = opts != NULL && opts->page_size > 0 ? opts->page_size : 500;
    cleanup_free char *cont = NULL;
    do {
        textbuf url;
        int r = build_url(c, path, opts, &url, err);
        if (r < 0)
            return r;
        char num[32];
        snprintf(num, sizeof num, "%ld", limit);
        query_param(&url, "limit", num);
        if (cont != NULL)
            query_param(&url, "continue", cont);
        if (url.failed) {
            textbuf_free(&url);
            return tetris_fail(err, TETRIS_E_INVAL, 0, "list %s: URL too long", path);
        }
        request rq = {.method = "GET", .url = url.data};
        json_t *page = NULL;
        r = kube_request(c, &rq, path, &page, err);
        textbuf_free(&url);
        if (r < 0)
            return r;
        json_t *page_items = json_object_get(page, "items");
        if (!json_is_array(page_items) && !json_is_null(page_items) && page_items != NULL) {
            json_decref(page);
            return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "list %s: items is not an array", path);
        }
        if (json_is_array(page_items))
            json_array_extend(items, page_items);
        r = dup_rv(page, rv, err);
        const char *next = json_string_value(json_object_get(json_object_get(page, "metadata"),
                                                             "continue"));
        free(cont);
        cont = next != NULL && next[0] != '\0' ? strdup(next) : NULL;
        json_decref(page);
        if (r < 0)
            return r;
    } while (cont != NULL);
    return 0;
}

int kube_list(kube_client *c, const char *path, const kube_list_opts *opts, json_t **items,
              char **resource_version, tetris_error *err)
{
    for (int restart = 0;; restart++) {
        json_t *all = json_array();
        char *rv = NULL;
        if (all == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "list");
        int r = list_pages(c, path, opts, all, &rv, err);
        if (r == 0) {
            *items = all;
            if (resource_version != NULL)
                *resource_version = rv;
            else
                free(rv);
            return 0;
        }
        json_decref(all);
        free(rv);
        /* 410: the continue token expired between pages; start over. */
        if (r != -TETRIS_E_CONFLICT || restart >= KUBE_LIST_RESTARTS)
            return r;
        log_info("event=kube-list-restart path=%s reason=continue-expired", path);
    }
}

/* ---- watches ---- */

typedef struct watch_state {
    kube_watch_fn fn;
    void *user;
    char **rv;
    bool gone;         /* an ERROR event with code 410 */
    bool stopped;      /* fn asked to stop */
    tetris_error event_err;
    bool failed;       /* an ERROR event or an unparsable line */
} watch_state;

static int set_rv(char **rv, json_t *object)
{
    const char *v = json_string_value(json_object_get(json_object_get(object, "metadata"),
                                                      "resourceVersion"));
    if (v == NULL)
        return 0;
    char *copy = strdup(v);
    if (copy == NULL)
        return -1;
    free(*rv);
    *rv = copy;
    return 0;
}

static int on_watch_line(exchange *x, char *line, size_t len)
{
    watch_state *w = x->line_user;
    json_error_t je;
    json_t *ev = json_loadb(line, len, 0, &je);
    const char *type = json_string_value(json_object_get(ev, "type"));
    json_t *object = json_object_get(ev, "object");
    if (type == NULL || !json_is_object(object)) {
        tetris_fail(&w->event_err, TETRIS_E_PROTOCOL, 0, "watch: bad event: %s",
                    ev == NULL ? je.text : "no type/object");
        w->failed = true;
        json_decref(ev);
        return 1;
    }
    int stop = 0;
    if (strcmp(type, "ERROR") == 0) {
        json_int_t code = json_integer_value(json_object_get(object, "code"));
        const char *msg = json_string_value(json_object_get(object, "message"));
        w->gone = code == 410;
        tetris_fail(&w->event_err, w->gone ? TETRIS_E_CONFLICT : TETRIS_E_HTTP, 0,
                    "watch: ERROR event %lld: %s", (long long)code, msg != NULL ? msg : "");
        w->failed = true;
        stop = 1;
    } else if (strcmp(type, "BOOKMARK") == 0) {
        if (set_rv(w->rv, object) < 0)
            stop = 1;
    } else {
        if (set_rv(w->rv, object) < 0 || w->fn(type, object, w->user) != 0) {
            w->stopped = true;
            stop = 1;
        }
    }
    json_decref(ev);
    return stop;
}

static int watch_once(kube_client *c, const char *path, const kube_list_opts *opts,
                      char **resource_version, int timeout_seconds, kube_watch_fn fn, void *user,
                      volatile bool *stop, tetris_error *err)
{
    textbuf url;
    int r = build_url(c, path, opts, &url, err);
    if (r < 0)
        return r;
    char num[32];
    snprintf(num, sizeof num, "%d", timeout_seconds);
    query_param(&url, "watch", "1");
    query_param(&url, "allowWatchBookmarks", "true");
    query_param(&url, "timeoutSeconds", num);
    if (*resource_version != NULL)
        query_param(&url, "resourceVersion", *resource_version);
    cleanup_free char *url_str = url.data;
    if (url.failed)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "watch %s: URL too long", path);

    watch_state w = {.fn = fn, .user = user, .rv = resource_version};
    exchange x = {.body = {.max = KUBE_MAX_EVENT}, .retry_after_ms = -1,
                  .on_line = on_watch_line, .line_user = &w, .stop = stop};
    /* The server closes the stream after timeoutSeconds; allow it a margin. */
    request rq = {.method = "GET", .url = url_str, .total_ms = (timeout_seconds + 30) * 1000L};
    long status = 0;
    CURLcode crc = CURLE_OK;
    r = perform(c, &rq, &x, &status, &crc, err);
    if (r == 0 && status != 0 && (status < 200 || status >= 300)) {
        char text[400];
        status_text(&x.body, text, sizeof text);
        r = tetris_fail(err, http_code_to_tetris(status), 0, "WATCH %s: HTTP %ld%s%s", path,
                        status, text[0] ? " " : "", text);
    } else if (r == 0 && w.failed) {
        *err = w.event_err;
        r = -w.event_err.code;
    } else if (r == 0 && w.stopped) {
        r = 0;
    } else if (r == 0 && crc == CURLE_ABORTED_BY_CALLBACK) {
        r = 0; /* *stop was set */
    } else if (r == 0 && crc == CURLE_WRITE_ERROR && x.body.failed) {
        r = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "WATCH %s: event larger than %u bytes", path,
                        KUBE_MAX_EVENT);
    } else if (r == 0 && crc != CURLE_OK) {
        r = transport_error(&rq, path, crc, err);
    }
    textbuf_free(&x.body);
    return r;
}

int kube_watch(kube_client *c, const char *path, const kube_list_opts *opts,
               char **resource_version, int timeout_seconds, kube_watch_fn fn, void *user,
               tetris_error *err)
{
    return watch_once(c, path, opts, resource_version, timeout_seconds, fn, user, NULL, err);
}

typedef struct list_watch_user {
    kube_watch_fn fn;
    void *user;
    bool stopped;
} list_watch_user;

static int forward_event(const char *type, json_t *object, void *user)
{
    list_watch_user *u = user;
    if (u->fn(type, object, u->user) != 0) {
        u->stopped = true;
        return 1;
    }
    return 0;
}

int kube_list_watch(kube_client *c, const char *path, const kube_list_opts *opts,
                    kube_list_fn on_list, kube_watch_fn fn, void *user, volatile bool *stop,
                    tetris_error *err)
{
    list_watch_user u = {.fn = fn, .user = user};
    cleanup_free char *rv = NULL;
    bool need_list = true;
    int failures = 0;
    while (!*stop && !u.stopped) {
        tetris_error e = {0};
        int r;
        if (need_list) {
            json_t *items = NULL;
            free(rv);
            rv = NULL;
            r = kube_list(c, path, opts, &items, &rv, &e);
            if (r == 0) {
                need_list = false;
                int stop_now = on_list(items, user);
                json_decref(items);
                if (stop_now)
                    return 0;
            }
        } else {
            r = watch_once(c, path, opts, &rv, 300, forward_event, &u, stop, &e);
            if (r == -TETRIS_E_CONFLICT) {
                log_info("event=kube-relist path=%s reason=%s", path, LOG_Q(e.msg));
                need_list = true;
                continue;
            }
        }
        if (r == 0) {
            failures = 0;
            continue;
        }
        if (r == -TETRIS_E_DENIED || r == -TETRIS_E_INVAL || r == -TETRIS_E_NOMEM) {
            *err = e;
            return r; /* retrying will not help */
        }
        failures++;
        long delay = backoff_ms(c, failures);
        log_warn("event=kube-watch-retry path=%s code=%s delay_ms=%ld msg=%s", path,
                 tetris_code_name(r), delay, LOG_Q(e.msg));
        for (long slept = 0; slept < delay && !*stop; slept += 100)
            clock_sleep_ms(delay - slept < 100 ? delay - slept : 100);
    }
    return 0;
}
