/* fn_metrics.c - counters, gauges and histograms of the inference function
 * and their Prometheus exposition (see fn_metrics.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "function/fn_metrics.h"

static const double duration_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                          0.1,   0.25,   0.5,   1,    2.5,   5,    10};
#define N_DURATION_BUCKETS (sizeof(duration_buckets) / sizeof(duration_buckets[0]))
static const double batch_size_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128};
#define N_BATCH_BUCKETS (sizeof(batch_size_buckets) / sizeof(batch_size_buckets[0]))

/* The status codes the function answers POST / with; anything else is
 * counted under "other" so the label set stays bounded. */
static const int codes[] = {200, 400, 413, 500, 503};
#define N_CODES (sizeof(codes) / sizeof(codes[0]))

#define MAX_BUCKETS 16
_Static_assert(N_DURATION_BUCKETS < MAX_BUCKETS && N_BATCH_BUCKETS < MAX_BUCKETS,
               "a histogram needs one more count than its bounds (+Inf)");

struct histogram {
    uint64_t counts[MAX_BUCKETS]; /* per bucket, not cumulative; the last is +Inf */
    uint64_t count;
    double sum;
};

struct fn_metrics {
    pthread_mutex_t lock;
    char *model, *mode, *batching;
    uint64_t shared_bytes;
    uint64_t requests[N_CODES + 1];
    struct histogram request_duration, batch_size, batch_duration;
    uint64_t inflight, queue_depth;
};

static char *escape_label(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(2 * n + 1), *o = out;
    if (out == NULL)
        return NULL;
    for (; *s != '\0'; s++) {
        if (*s == '\\' || *s == '"') {
            *o++ = '\\';
            *o++ = *s;
        } else if (*s == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
    return out;
}

int fn_metrics_new(const struct fn_metrics_info *info, fn_metrics **out, tetris_error *err)
{
    fn_metrics *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    pthread_mutex_init(&m->lock, NULL);
    m->model = escape_label(info->model);
    m->mode = escape_label(info->mode);
    m->batching = escape_label(info->batching);
    m->shared_bytes = info->shared_bytes;
    if (m->model == NULL || m->mode == NULL || m->batching == NULL) {
        fn_metrics_free(m);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    *out = m;
    return 0;
}

void fn_metrics_free(fn_metrics *m)
{
    if (m == NULL)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m->model);
    free(m->mode);
    free(m->batching);
    free(m);
}

static void observe(struct histogram *h, const double *bounds, size_t n, double v)
{
    size_t i = 0;
    while (i < n && v > bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

void fn_metrics_request_begin(fn_metrics *m)
{
    pthread_mutex_lock(&m->lock);
    m->inflight++;
    pthread_mutex_unlock(&m->lock);
}

void fn_metrics_request_end(fn_metrics *m, int code, double seconds)
{
    size_t i = 0;
    while (i < N_CODES && codes[i] != code)
        i++;
    pthread_mutex_lock(&m->lock);
    m->inflight--;
    m->requests[i]++;
    observe(&m->request_duration, duration_buckets, N_DURATION_BUCKETS, seconds);
    pthread_mutex_unlock(&m->lock);
}

void fn_metrics_queue_depth(fn_metrics *m, size_t depth)
{
    pthread_mutex_lock(&m->lock);
    m->queue_depth = depth;
    pthread_mutex_unlock(&m->lock);
}

void fn_metrics_batch(fn_metrics *m, size_t size, double seconds)
{
    pthread_mutex_lock(&m->lock);
    observe(&m->batch_size, batch_size_buckets, N_BATCH_BUCKETS, (double)size);
    observe(&m->batch_duration, duration_buckets, N_DURATION_BUCKETS, seconds);
    pthread_mutex_unlock(&m->lock);
}

/* ---- exposition ---- */

struct text {
    char *buf;
    size_t len, cap;
    int failed;
};

static void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(struct text *t, const char *fmt, ...)
{
    va_list ap;
    while (!t->failed) {
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = 2 * t->cap + (size_t)n;
        char *b = realloc(t->buf, cap);
        if (b == NULL) {
            t->failed = 1;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
}

static void render_histogram(struct text *t, const char *name, const char *help,
                             const struct histogram *h, const double *bounds, size_t n)
{
    uint64_t cumulative = 0;
    text_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t i = 0; i < n; i++) {
        cumulative += h->counts[i];
        text_printf(t, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, bounds[i], cumulative);
    }
    text_printf(t, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.9g\n%s_count %" PRIu64 "\n",
                name, h->count, name, h->sum, name, h->count);
}

char *fn_metrics_render(fn_metrics *m, size_t *len)
{
    struct text t = {.cap = 4096};
    t.buf = malloc(t.cap);
    if (t.buf == NULL)
        return NULL;
    pthread_mutex_lock(&m->lock);
    text_printf(&t, "# HELP tetris_function_requests_total Inference requests answered, by "
                    "HTTP status code.\n# TYPE tetris_function_requests_total counter\n");
    for (size_t i = 0; i <= N_CODES; i++) {
        if (i < N_CODES)
            text_printf(&t, "tetris_function_requests_total{code=\"%d\"} %" PRIu64 "\n",
                        codes[i], m->requests[i]);
        else
            text_printf(&t, "tetris_function_requests_total{code=\"other\"} %" PRIu64 "\n",
                        m->requests[i]);
    }
    render_histogram(&t, "tetris_function_request_duration_seconds",
                     "Time from receiving an inference request to answering it.",
                     &m->request_duration, duration_buckets, N_DURATION_BUCKETS);
    render_histogram(&t, "tetris_function_batch_size", "Requests run together in one batch.",
                     &m->batch_size, batch_size_buckets, N_BATCH_BUCKETS);
    render_histogram(&t, "tetris_function_batch_duration_seconds",
                     "Inference time of one batch.", &m->batch_duration, duration_buckets,
                     N_DURATION_BUCKETS);
    text_printf(&t,
                "# HELP tetris_function_queue_depth Requests waiting for a worker.\n"
                "# TYPE tetris_function_queue_depth gauge\n"
                "tetris_function_queue_depth %" PRIu64 "\n"
                "# HELP tetris_function_inflight_requests Requests accepted and not yet "
                "answered.\n"
                "# TYPE tetris_function_inflight_requests gauge\n"
                "tetris_function_inflight_requests %" PRIu64 "\n"
                "# HELP tetris_function_shared_tensor_bytes Model weight bytes read from "
                "tensor store mappings.\n"
                "# TYPE tetris_function_shared_tensor_bytes gauge\n"
                "tetris_function_shared_tensor_bytes %" PRIu64 "\n"
                "# HELP tetris_function_info The model and how it is served.\n"
                "# TYPE tetris_function_info gauge\n"
                "tetris_function_info{model=\"%s\",mode=\"%s\",batching=\"%s\"} 1\n",
                m->queue_depth, m->inflight, m->shared_bytes, m->model, m->mode, m->batching);
    pthread_mutex_unlock(&m->lock);
    if (t.failed) {
        free(t.buf);
        return NULL;
    }
    *len = t.len;
    return t.buf;
}
