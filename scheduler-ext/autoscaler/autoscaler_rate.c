/* autoscaler_rate.c - where request rates come from: a trace file in local
 * mode, Prometheus's HTTP API (over the OpenFaaS gateway's invocation
 * counter, gateway_function_invocation_total{function_name, code}, of the
 * gateway's scrape job and instances only) in a cluster. */
#include "scheduler-ext/autoscaler/autoscaler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "common/cleanup.h"
#include "common/httpclient.h"
#include "common/textbuf.h"

/* ---- trace files ---- */

void rate_trace_free(rate_trace *t)
{
    if (t == NULL)
        return;
    free(t->time_s);
    free(t->rps);
    free(t);
}

static int trace_append(rate_trace *t, size_t *cap, double time_s, double rps,
                        tetris_error *err)
{
    if (t->n == *cap) {
        size_t grown = *cap ? *cap * 2 : 64;
        double *a = realloc(t->time_s, grown * sizeof *a);
        if (a == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "trace");
        t->time_s = a;
        double *b = realloc(t->rps, grown * sizeof *b);
        if (b == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "trace");
        t->rps = b;
        *cap = grown;
    }
    t->time_s[t->n] = time_s;
    t->rps[t->n] = rps;
    t->n++;
    return 0;
}

static int trace_read(FILE *f, const char *path, rate_trace *t, tetris_error *err)
{
    cleanup_free char *line = NULL;
    size_t line_cap = 0, cap = 0;
    unsigned lineno = 0;
    while (getline(&line, &line_cap, f) >= 0) {
        lineno++;
        char *s = line + strspn(line, " \t");
        if (*s == '#' || *s == '\n' || *s == '\0')
            continue;
        double time_s, rps;
        char extra;
        if (sscanf(s, "%lf %lf %c", &time_s, &rps, &extra) != 2 || !isfinite(time_s) ||
            !isfinite(rps))
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s:%u: expected two numbers `time_s rps`", path, lineno);
        if (time_s < 0 || rps < 0)
            return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s:%u: time and rate must be >= 0",
                               path, lineno);
        if (t->n > 0 && time_s <= t->time_s[t->n - 1])
            return tetris_fail(err, TETRIS_E_FORMAT, 0,
                               "%s:%u: time %g is not after the previous line's %g", path,
                               lineno, time_s, t->time_s[t->n - 1]);
        int rc = trace_append(t, &cap, time_s, rps, err);
        if (rc < 0)
            return rc;
    }
    if (ferror(f))
        return tetris_fail(err, TETRIS_E_IO, errno, "read %s", path);
    if (t->n == 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s: no `time_s rps` lines", path);
    return 0;
}

int rate_trace_load(const char *path, rate_trace **out, tetris_error *err)
{
    cleanup_fclose FILE *f = fopen(path, "r");
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "open trace %s", path);
    rate_trace *t = calloc(1, sizeof *t);
    if (t == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "trace %s", path);
    int rc = trace_read(f, path, t, err);
    if (rc < 0) {
        rate_trace_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

double rate_trace_at(const rate_trace *t, double time_s)
{
    double rps = 0;
    for (size_t i = 0; i < t->n && t->time_s[i] <= time_s; i++)
        rps = t->rps[i];
    return rps;
}

double rate_trace_end(const rate_trace *t)
{
    return t->time_s[t->n - 1];
}

/* ---- Prometheus ---- */

/* Appends template with each token replaced by value. */
static void replace_token(textbuf *t, const char *template, const char *token, const char *value)
{
    size_t token_len = strlen(token);
    for (const char *s = template;;) {
        const char *at = strstr(s, token);
        textbuf_append(t, s, at != NULL ? (size_t)(at - s) : strlen(s));
        if (at == NULL)
            break;
        textbuf_puts(t, value);
        s = at + token_len;
    }
}

char *rate_query_expand(const rate_source *src, const char *function, const char *namespace_)
{
    const char *tokens[][2] = {{"{function}", function},
                               {"{namespace}", namespace_},
                               {"{job}", src->job},
                               {"{instance}", src->instance}};
    char *text = strdup(src->query);
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0] && text != NULL; i++) {
        textbuf t = {0};
        replace_token(&t, text, tokens[i][0], tokens[i][1]);
        free(text);
        text = textbuf_take(&t, NULL);
    }
    return text;
}

int rate_check_matcher(const char *option, const char *value, tetris_error *err)
{
    if (value[0] == '\0' || strpbrk(value, "\"\n\r") != NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "%s: a regular expression for a PromQL string, not empty and "
                           "without '\"' or line breaks",
                           option);
    return 0;
}

/* GETs url into *body; fails on transport errors and non-2xx statuses. */
static int http_get(const char *url, char **body, tetris_error *err)
{
    httpclient_request rq = {.url = url, .connect_timeout_ms = 3000, .timeout_ms = 10000};
    int rc = httpclient_get(&rq, err);
    if (rc == 0 && rq.status / 100 != 2)
        rc = tetris_fail(err, TETRIS_E_HTTP, 0, "GET %s: HTTP %ld: %.200s", url, rq.status,
                         rq.body);
    if (rc == 0)
        *body = steal_pointer(&rq.body);
    httpclient_request_clear(&rq);
    return rc;
}

/* Reads {"status":"success","data":{"resultType":"vector","result":[...]}}. */
int rate_parse_vector(const char *body, const char *query, double *rps, tetris_error *err)
{
    json_error_t jerr;
    json_t *root = json_loads(body, 0, &jerr);
    if (root == NULL)
        return tetris_fail(err, TETRIS_E_PROTOCOL, 0, "prometheus: not JSON: %s", jerr.text);
    int rc = 0;
    const char *status = json_string_value(json_object_get(root, "status"));
    json_t *data = json_object_get(root, "data");
    json_t *result = json_object_get(data, "result");
    const char *type = json_string_value(json_object_get(data, "resultType"));
    if (status == NULL || strcmp(status, "success") != 0) {
        const char *msg = json_string_value(json_object_get(root, "error"));
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "prometheus: query %s failed: %s", query,
                         msg ? msg : "no error message");
    } else if (type == NULL || strcmp(type, "vector") != 0 || !json_is_array(result)) {
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                         "prometheus: query %s: expected an instant vector", query);
    } else if (json_array_size(result) == 0) {
        *rps = 0;
    } else {
        /* "value": [ <unix time>, "<number as string>" ] */
        json_t *value = json_object_get(json_array_get(result, 0), "value");
        const char *s = json_string_value(json_array_get(value, 1));
        char *end = NULL;
        double v = s ? strtod(s, &end) : NAN;
        if (s == NULL || *end != '\0')
            rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                             "prometheus: query %s: sample has no numeric value", query);
        else
            *rps = isfinite(v) && v > 0 ? v : 0; /* NaN: no samples in the window */
    }
    json_decref(root);
    return rc;
}

int rate_prometheus(const rate_source *src, const char *function, const char *namespace_,
                    double *rps, tetris_error *err)
{
    const char *base_url = src->url;
    cleanup_free char *query = rate_query_expand(src, function, namespace_);
    if (query == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "prometheus query");
    CURL *curl = curl_easy_init();
    if (curl == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "curl init");
    char *escaped = curl_easy_escape(curl, query, 0);
    curl_easy_cleanup(curl);
    if (escaped == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "prometheus query");
    cleanup_free char *url = NULL;
    size_t base_len = strlen(base_url);
    while (base_len > 0 && base_url[base_len - 1] == '/')
        base_len--;
    int n = asprintf(&url, "%.*s/api/v1/query?query=%s", (int)base_len, base_url, escaped);
    curl_free(escaped);
    if (n < 0)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "prometheus url");
    cleanup_free char *body = NULL;
    int rc = http_get(url, &body, err);
    if (rc < 0)
        return rc;
    return rate_parse_vector(body, query, rps, err);
}
