/* batcher.c - the batching queue and its worker threads (see batcher.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "function/batcher.h"
#include "common/clock.h"
#include "common/log.h"

/* A worker's scratch space, sized once for the largest batch. */
struct scratch {
    fn_request **reqs;
    uint64_t *seeds;
    OrtValue **inputs, **outputs;
};

struct worker {
    batcher *b;
    pthread_t thread;
    struct scratch s;
};

struct batcher {
    const ort_model *m;
    const ort_io *io;
    fn_metrics *metrics;
    struct batcher_options o;
    pthread_mutex_t lock;
    pthread_cond_t work; /* a request arrived, or draining began */
    pthread_cond_t done; /* a batch finished */
    fn_request *head, *tail;
    size_t depth;
    uint64_t batches;
    bool draining;
    struct worker *workers; /* concurrency entries */
    int n_workers;          /* started */
};

static void fail_request(fn_request *req, const tetris_error *err)
{
    req->rc = -err->code;
    snprintf(req->error, sizeof(req->error), "%s", err->msg);
}

static void scratch_free(struct scratch *s)
{
    free(s->reqs);
    free(s->seeds);
    free(s->inputs);
    free(s->outputs);
    memset(s, 0, sizeof(*s));
}

static int scratch_alloc(struct scratch *s, const batcher *b)
{
    s->reqs = calloc((size_t)b->o.batch, sizeof(*s->reqs));
    s->seeds = calloc((size_t)b->o.batch, sizeof(*s->seeds));
    s->inputs = calloc(b->io->n_in + 1, sizeof(*s->inputs));
    s->outputs = calloc(b->io->n_out + 1, sizeof(*s->outputs));
    if (s->reqs == NULL || s->seeds == NULL || s->inputs == NULL || s->outputs == NULL) {
        scratch_free(s);
        return -1;
    }
    return 0;
}

/* One Run over the whole batch, its inputs concatenated along dim 0. */
static void run_concatenated(batcher *b, struct scratch *s, size_t n)
{
    const ort_io *io = b->io;
    tetris_error err = {0};
    int r;

    for (size_t j = 0; j < n; j++)
        s->seeds[j] = s->reqs[j]->seed;
    r = ort_inputs_make(b->m, io, s->seeds, n, s->inputs, &err);
    if (r == 0) {
        r = ort_io_run(b->m, io, s->inputs, s->outputs, &err);
        ort_values_release(b->m, s->inputs, io->n_in);
    }
    for (size_t j = 0; j < n; j++) {
        fn_request *req = s->reqs[j];
        if (r < 0)
            fail_request(req, &err);
        else if (ort_outputs_sha256(b->m, io, s->outputs, n, j, req->sha256, &req->output_bytes,
                                    &err) < 0)
            fail_request(req, &err);
    }
    if (r == 0)
        ort_values_release(b->m, s->outputs, io->n_out);
}

/* The model cannot take a batch dimension: one Run per request. */
static void run_sequentially(batcher *b, struct scratch *s, size_t n)
{
    const ort_io *io = b->io;

    for (size_t j = 0; j < n; j++) {
        fn_request *req = s->reqs[j];
        tetris_error err = {0};
        int r = ort_inputs_make(b->m, io, &req->seed, 1, s->inputs, &err);
        if (r == 0) {
            r = ort_io_run(b->m, io, s->inputs, s->outputs, &err);
            ort_values_release(b->m, s->inputs, io->n_in);
        }
        if (r == 0) {
            r = ort_outputs_sha256(b->m, io, s->outputs, 1, 0, req->sha256, &req->output_bytes,
                                   &err);
            ort_values_release(b->m, s->outputs, io->n_out);
        }
        if (r < 0)
            fail_request(req, &err);
    }
}

static void run_batch(batcher *b, struct scratch *s, size_t n, uint64_t id)
{
    fn_request **reqs = s->reqs;
    double start = clock_now_ms();
    if (b->io->batchable)
        run_concatenated(b, s, n);
    else
        run_sequentially(b, s, n);
    double elapsed = clock_now_ms() - start;
    for (size_t j = 0; j < n; j++) {
        reqs[j]->batch_size = n;
        reqs[j]->batch_id = id;
        reqs[j]->queue_ms = start - reqs[j]->enqueued_ms;
        reqs[j]->inference_ms = elapsed;
        if (reqs[j]->rc < 0)
            log_error("event=inference-failed batch=%llu seed=%llu msg=%s", (unsigned long long)id,
                      (unsigned long long)reqs[j]->seed, LOG_Q(reqs[j]->error));
    }
    fn_metrics_batch(b->metrics, n, elapsed / 1e3);
}

/* Waits (lock held) until a batch is due; returns how many requests it
 * took into reqs, 0 when the batcher is drained and empty. */
static size_t next_batch(batcher *b, fn_request **reqs, uint64_t *id)
{
    for (;;) {
        if (b->head == NULL) {
            if (b->draining)
                return 0;
            pthread_cond_wait(&b->work, &b->lock);
            continue;
        }
        if (b->depth < (size_t)b->o.batch && !b->draining) {
            double deadline = b->head->enqueued_ms + b->o.max_wait_ms;
            if (clock_now_ms() < deadline) {
                struct timespec ts = clock_timespec(deadline);
                pthread_cond_timedwait(&b->work, &b->lock, &ts);
                continue;
            }
        }
        size_t n = 0;
        while (b->head != NULL && n < (size_t)b->o.batch) {
            reqs[n++] = b->head;
            b->head = b->head->next;
        }
        if (b->head == NULL)
            b->tail = NULL;
        b->depth -= n;
        *id = ++b->batches;
        fn_metrics_queue_depth(b->metrics, b->depth);
        return n;
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    batcher *b = w->b;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        uint64_t id;
        size_t n = next_batch(b, w->s.reqs, &id);
        if (n == 0)
            break;
        pthread_mutex_unlock(&b->lock);
        run_batch(b, &w->s, n, id);
        pthread_mutex_lock(&b->lock);
        for (size_t j = 0; j < n; j++)
            w->s.reqs[j]->done = true;
        pthread_cond_broadcast(&b->done);
    }
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

int batcher_new(const ort_model *m, const ort_io *io, const struct batcher_options *o,
                fn_metrics *metrics, batcher **out, tetris_error *err)
{
    pthread_condattr_t ca;
    int r;

    if (o->batch < 1 || o->concurrency < 1 || o->max_wait_ms < 0)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "batch %d, concurrency %d, max wait %g ms",
                           o->batch, o->concurrency, o->max_wait_ms);
    batcher *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    b->m = m;
    b->io = io;
    b->metrics = metrics;
    b->o = *o;
    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->work, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&b->done, NULL);
    b->workers = calloc((size_t)o->concurrency, sizeof(*b->workers));
    if (b->workers == NULL) {
        batcher_free(b);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    for (int i = 0; i < o->concurrency; i++) {
        b->workers[i].b = b;
        if (scratch_alloc(&b->workers[i].s, b) < 0) {
            batcher_free(b);
            return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
        }
    }
    for (int i = 0; i < o->concurrency; i++) {
        if ((r = pthread_create(&b->workers[i].thread, NULL, worker_main, &b->workers[i])) != 0) {
            batcher_free(b);
            return tetris_fail(err, TETRIS_E_IO, r, "cannot start worker %d", i);
        }
        b->n_workers++;
    }
    *out = b;
    return 0;
}

int batcher_run(batcher *b, fn_request *req, tetris_error *err)
{
    req->rc = 0;
    req->done = false;
    req->next = NULL;
    pthread_mutex_lock(&b->lock);
    if (b->draining) {
        pthread_mutex_unlock(&b->lock);
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "shutting down");
    }
    req->enqueued_ms = clock_now_ms();
    if (b->tail != NULL)
        b->tail->next = req;
    else
        b->head = req;
    b->tail = req;
    b->depth++;
    fn_metrics_queue_depth(b->metrics, b->depth);
    /* Every idle worker re-checks: the batch may now be full. */
    pthread_cond_broadcast(&b->work);
    while (!req->done)
        pthread_cond_wait(&b->done, &b->lock);
    pthread_mutex_unlock(&b->lock);
    return 0;
}

void batcher_drain(batcher *b)
{
    pthread_mutex_lock(&b->lock);
    b->draining = true;
    pthread_cond_broadcast(&b->work);
    pthread_mutex_unlock(&b->lock);
}

void batcher_free(batcher *b)
{
    if (b == NULL)
        return;
    batcher_drain(b);
    for (int i = 0; i < b->n_workers; i++)
        pthread_join(b->workers[i].thread, NULL);
    for (int i = 0; b->workers != NULL && i < b->o.concurrency; i++)
        scratch_free(&b->workers[i].s);
    free(b->workers);
    pthread_cond_destroy(&b->work);
    pthread_cond_destroy(&b->done);
    pthread_mutex_destroy(&b->lock);
    free(b);
}
