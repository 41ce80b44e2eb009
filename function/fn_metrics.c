/* fn_metrics.c - counters, gauges and histograms of the inference function
 * and their Prometheus exposition (see fn_metrics.h). */
#include "function/fn_metrics.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/prom.h"

static const double duration_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                          0.1,   0.25,   0.5,   1,    2.5,   5,    10};
#define N_DURATION_BUCKETS (sizeof(duration_buckets) / sizeof(duration_buckets[0]))
/* Starts, from a warm small model (0.1 s) to a cold large one (minutes). */
static const double start_buckets[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
#define N_START_BUCKETS (sizeof(start_buckets) / sizeof(start_buckets[0]))
static const double batch_size_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128};
#define N_BATCH_BUCKETS (sizeof(batch_size_buckets) / sizeof(batch_size_buckets[0]))

/* The status codes the function answers POST / with; anything else is
 * counted under "other" so the label set stays bounded. */
static const int codes[] = {200, 400, 413, 500, 503};
#define N_CODES (sizeof(codes) / sizeof(codes[0]))

#define MAX_BUCKETS 16
_Static_assert(N_DURATION_BUCKETS < MAX_BUCKETS && N_BATCH_BUCKETS < MAX_BUCKETS &&
                   N_START_BUCKETS < MAX_BUCKETS,
               "a histogram needs one more count than its bounds (+Inf)");

struct histogram {
    uint64_t counts[MAX_BUCKETS]; /* per bucket, not cumulative; the last is +Inf */
    double sum;
};

struct fn_metrics {
    pthread_mutex_t lock;
    char *model, *mode, *batching;
    uint64_t shared_bytes;
    bool derived;
    uint64_t requests[N_CODES + 1];
    struct histogram request_duration, batch_size, batch_duration;
    uint64_t inflight, queue_depth;
    double started_ms;
    const char *start; /* "cold" or "warm" */
    char *store;
    struct fn_start_steps steps_ms;
    struct histogram start_seconds, first_answer;
    bool answered; /* first_answer observed */
};

int fn_metrics_new(const struct fn_metrics_info *info, fn_metrics **out, tetris_error *err)
{
    fn_metrics *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    pthread_mutex_init(&m->lock, NULL);
    m->model = strdup(info->model);
    m->mode = strdup(info->mode);
    m->batching = strdup(info->batching);
    m->shared_bytes = info->shared_bytes;
    m->derived = info->derived;
    m->started_ms = info->started_ms;
    m->store = strdup(info->store);
    m->start = strcmp(info->store, "hit") == 0 ? "warm" : "cold";
    m->steps_ms = info->steps_ms;
    if (m->model == NULL || m->mode == NULL || m->batching == NULL || m->store == NULL) {
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
    free(m->store);
    free(m);
}

static void observe(struct histogram *h, const double *bounds, size_t n, double v)
{
    h->counts[prom_bucket(bounds, n, v)]++;
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
    if (code == 200 && !m->answered) {
        m->answered = true;
        observe(&m->first_answer, start_buckets, N_START_BUCKETS,
                (clock_now_ms() - m->started_ms) / 1e3);
    }
    pthread_mutex_unlock(&m->lock);
}

void fn_metrics_ready(fn_metrics *m)
{
    pthread_mutex_lock(&m->lock);
    observe(&m->start_seconds, start_buckets, N_START_BUCKETS,
            (clock_now_ms() - m->started_ms) / 1e3);
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

static void render_histogram(textbuf *t, const char *name, const char *help,
                             const struct histogram *h, const double *bounds, size_t n)
{
    prom_header(t, name, "histogram", help);
    prom_histogram(t, name, NULL, 0, bounds, h->counts, n, h->sum, "%.9g");
}

/* The start histograms, labelled with this start's kind. */
static void render_start(textbuf *t, const fn_metrics *m)
{
    static const char *const names[] = {"tetris_function_start_seconds",
                                        "tetris_function_first_answer_seconds"};
    static const char *const helps[] = {
        "Time from the program's start to serving the model (weights loaded, session built), "
        "by start (cold, warm) and what the node's store held (hit, partial, miss, none).",
        "Time from the program's start to its first answered inference request, by start "
        "and store.",
    };
    const struct histogram *h[] = {&m->start_seconds, &m->first_answer};
    for (size_t i = 0; i < 2; i++) {
        prom_header(t, names[i], "histogram", helps[i]);
        prom_histogram(t, names[i], (prom_label[]){{"start", m->start}, {"store", m->store}}, 2,
                       start_buckets, h[i]->counts, N_START_BUCKETS, h[i]->sum, "%.6f");
    }
    static const char steps[] = "tetris_function_start_step_seconds";
    prom_header(t, steps, "gauge",
                "Where this instance's start went, step by step: the agent's load (read, store, "
                "digests, connect, register, watch, map, private) and the runtime's session.");
    const struct fn_start_steps *s = &m->steps_ms;
    const struct {
        const char *name;
        double ms;
    } rows[] = {{"read", s->read},       {"store", s->store},        {"digests", s->digests},
                {"connect", s->connect}, {"register", s->register_}, {"watch", s->watch},
                {"map", s->map},         {"private", s->private_},   {"session", s->session}};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        prom_sample_double(t, steps, (prom_label[]){{"step", rows[i].name}}, 1, "%.6f",
                           rows[i].ms / 1e3);
}

void fn_metrics_session(fn_metrics *m, uint64_t shared_bytes, bool derived)
{
    pthread_mutex_lock(&m->lock);
    m->shared_bytes = shared_bytes;
    m->derived = derived;
    pthread_mutex_unlock(&m->lock);
}

char *fn_metrics_render(fn_metrics *m, size_t *len)
{
    static const char requests[] = "tetris_function_requests_total";
    textbuf t = {0};
    pthread_mutex_lock(&m->lock);
    prom_header(&t, requests, "counter", "Inference requests answered, by HTTP status code.");
    for (size_t i = 0; i <= N_CODES; i++) {
        char code[16] = "other";
        if (i < N_CODES)
            snprintf(code, sizeof code, "%d", codes[i]);
        prom_sample(&t, requests, (prom_label[]){{"code", code}}, 1, m->requests[i]);
    }
    render_histogram(&t, "tetris_function_request_duration_seconds",
                     "Time from receiving an inference request to answering it.",
                     &m->request_duration, duration_buckets, N_DURATION_BUCKETS);
    render_histogram(&t, "tetris_function_batch_size", "Requests run together in one batch.",
                     &m->batch_size, batch_size_buckets, N_BATCH_BUCKETS);
    render_histogram(&t, "tetris_function_batch_duration_seconds",
                     "Inference time of one batch.", &m->batch_duration, duration_buckets,
                     N_DURATION_BUCKETS);
    prom_header(&t, "tetris_function_queue_depth", "gauge", "Requests waiting for a worker.");
    prom_sample(&t, "tetris_function_queue_depth", NULL, 0, m->queue_depth);
    prom_header(&t, "tetris_function_inflight_requests", "gauge",
                "Requests accepted and not yet answered.");
    prom_sample(&t, "tetris_function_inflight_requests", NULL, 0, m->inflight);
    prom_header(&t, "tetris_function_shared_tensor_bytes", "gauge",
                "Model weight bytes read from tensor store mappings.");
    prom_sample(&t, "tetris_function_shared_tensor_bytes", NULL, 0, m->shared_bytes);
    prom_header(&t, "tetris_function_derived_form", "gauge",
                "1 while the session runs on the store's derived form of the model, 0 on its "
                "plain weights.");
    prom_sample(&t, "tetris_function_derived_form", NULL, 0, m->derived ? 1 : 0);
    prom_header(&t, "tetris_function_info", "gauge", "The model and how it is served.");
    prom_sample(&t, "tetris_function_info",
                (prom_label[]){{"model", m->model}, {"mode", m->mode}, {"batching", m->batching}},
                3, 1);
    render_start(&t, m);
    pthread_mutex_unlock(&m->lock);
    return textbuf_take(&t, len);
}
