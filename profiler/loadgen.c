/* loadgen.c - closed- and open-loop HTTP load with libcurl (see loadgen.h). */
#include "profiler/loadgen.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/clock.h"

struct shared {
    const struct load_options *o;
    double t0, measure_from, end; /* monotonic ms */
    atomic_ulong next;            /* next request number */
    pthread_mutex_t pick_lock;
    double *current;              /* smooth weighted round robin state */
    double total_weight;
};

struct client {
    struct shared *sh;
    pthread_t thread;
    struct load_sample *samples;
    size_t n, cap;
    int failed;
};

struct reply {
    char buf[1024];
    size_t len;
};

static void sleep_until_ms(double t)
{
    struct timespec ts = clock_timespec(t);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* nginx's smooth weighted round robin: deterministic and evenly spread. */
static size_t pick_target(struct shared *sh)
{
    const struct load_options *o = sh->o;
    size_t best = 0;
    pthread_mutex_lock(&sh->pick_lock);
    for (size_t i = 0; i < o->n_targets; i++) {
        sh->current[i] += o->targets[i].weight;
        if (sh->current[i] > sh->current[best])
            best = i;
    }
    sh->current[best] -= sh->total_weight;
    pthread_mutex_unlock(&sh->pick_lock);
    return best;
}

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    struct reply *r = ctx;
    size_t len = size * n, room = sizeof(r->buf) - 1 - r->len;
    size_t take = len < room ? len : room;
    memcpy(r->buf + r->len, data, take);
    r->len += take;
    r->buf[r->len] = '\0';
    return len;
}

static int record(struct client *c, const struct load_sample *s)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 1024;
        struct load_sample *p = realloc(c->samples, cap * sizeof(*p));
        if (p == NULL)
            return -1;
        c->samples = p;
        c->cap = cap;
    }
    c->samples[c->n++] = *s;
    return 0;
}

/* One request; fills s (status 0 on a transport failure). */
static void send_one(CURL *curl, struct curl_slist *headers, const char *url, uint64_t seed,
                     struct load_sample *s)
{
    struct reply r = {.len = 0};
    char body[64], target[128];
    long status = 0;
    snprintf(body, sizeof(body), "{\"seed\":%llu}", (unsigned long long)seed);
    snprintf(target, sizeof(target), "%s/", url);
    curl_easy_setopt(curl, CURLOPT_URL, target);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r);
    r.buf[0] = '\0';
    if (curl_easy_perform(curl) == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    s->status = (uint16_t)status;
    if (status != 200)
        return;
    json_t *j = json_loads(r.buf, 0, NULL);
    json_int_t id = 0, size = 0;
    double inference = 0;
    if (j != NULL && json_unpack(j, "{s:I, s:I, s:F}", "batch_id", &id, "batch_size", &size,
                                 "inference_ms", &inference) == 0) {
        s->batch_id = (uint64_t)id;
        s->batch_size = (uint32_t)size;
        s->inference_ms = inference;
    } else {
        s->status = 0; /* a 200 we cannot read is no success */
    }
    json_decref(j);
}

static void *client_main(void *arg)
{
    struct client *c = arg;
    struct shared *sh = c->sh;
    const struct load_options *o = sh->o;
    CURL *curl = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (curl == NULL || headers == NULL) {
        c->failed = 1;
        goto out;
    }
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)(o->timeout_ms > 0 ? o->timeout_ms : 30000));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    for (;;) {
        unsigned long i = atomic_fetch_add(&sh->next, 1);
        double due;
        if (o->rate_rps > 0) {
            due = sh->t0 + (double)i * 1e3 / o->rate_rps;
            if (due >= sh->end)
                break;
            sleep_until_ms(due);
        } else {
            due = clock_now_ms();
            if (due >= sh->end)
                break;
        }
        struct load_sample s = {0};
        s.target = (uint16_t)pick_target(sh);
        send_one(curl, headers, o->targets[s.target].url, (uint64_t)i, &s);
        s.latency_ms = clock_now_ms() - due;
        if (due >= sh->measure_from && record(c, &s) < 0) {
            c->failed = 1;
            break;
        }
    }
out:
    curl_slist_free_all(headers);
    if (curl != NULL)
        curl_easy_cleanup(curl);
    return NULL;
}

int load_run(const struct load_options *o, struct load_result *out, tetris_error *err)
{
    struct shared sh = {.o = o};
    struct client *clients;
    int r = 0, started = 0;

    memset(out, 0, sizeof(*out));
    if (o->n_targets == 0 || o->n_targets > UINT16_MAX || o->clients < 1 ||
        !(o->duration_s > 0) || o->warmup_s < 0 || o->rate_rps < 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "bad load options");
    sh.current = calloc(o->n_targets, sizeof(*sh.current));
    clients = calloc((size_t)o->clients, sizeof(*clients));
    if (sh.current == NULL || clients == NULL) {
        free(sh.current);
        free(clients);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    for (size_t i = 0; i < o->n_targets; i++)
        sh.total_weight += o->targets[i].weight;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    pthread_mutex_init(&sh.pick_lock, NULL);
    atomic_init(&sh.next, 0);
    sh.t0 = clock_now_ms();
    sh.measure_from = sh.t0 + o->warmup_s * 1e3;
    sh.end = sh.measure_from + o->duration_s * 1e3;
    for (int i = 0; i < o->clients; i++) {
        clients[i].sh = &sh;
        if ((errno = pthread_create(&clients[i].thread, NULL, client_main, &clients[i])) != 0) {
            r = tetris_fail(err, TETRIS_E_IO, errno, "cannot start load client %d", i);
            break; /* the started ones finish their window */
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(clients[i].thread, NULL);
    out->elapsed_s = o->duration_s; /* the window the recorded requests were due in */
    size_t total = 0;
    for (int i = 0; i < started; i++) {
        total += clients[i].n;
        if (clients[i].failed && r == 0)
            r = tetris_fail(err, TETRIS_E_NOMEM, 0, "load client %d failed", i);
    }
    if (r == 0 && total > 0 && (out->samples = malloc(total * sizeof(*out->samples))) == NULL)
        r = tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    for (int i = 0; i < started; i++) {
        if (r == 0) {
            memcpy(out->samples + out->n_samples, clients[i].samples,
                   clients[i].n * sizeof(*out->samples));
            out->n_samples += clients[i].n;
        }
        free(clients[i].samples);
    }
    for (size_t i = 0; i < out->n_samples; i++)
        out->n_ok += out->samples[i].status == 200;
    pthread_mutex_destroy(&sh.pick_lock);
    free(sh.current);
    free(clients);
    if (r < 0)
        load_result_free(out);
    return r;
}

void load_result_free(struct load_result *r)
{
    free(r->samples);
    memset(r, 0, sizeof(*r));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double load_percentile(double *values, size_t n, double pct)
{
    if (n == 0)
        return 0;
    qsort(values, n, sizeof(*values), cmp_double);
    /* nearest rank */
    size_t rank = (size_t)ceil(pct / 100.0 * (double)n);
    return values[rank > 0 ? rank - 1 : 0];
}
