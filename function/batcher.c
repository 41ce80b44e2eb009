/* batcher.c - the batching queue and its worker threads (see batcher.h). */
#include "function/batcher.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "function/oip_ort.h"

/* A worker's scratch space, sized once for the largest batch. */
struct scratch {
    fn_request **reqs;               /* the batch */
    fn_request **seeded, **tensored; /* its seed and its tensor requests */
    fn_request **group;              /* tensor requests run together */
    const oip_request **group_tensors;
    bool *taken;
    uint64_t *seeds;
    bool *wanted; /* outputs a group asks for */
    OrtValue **inputs, **outputs;
    /* The session the batch runs on, taken under the lock at its start
     * (NULL between batches): batcher_replace_model waits until no worker
     * holds the session it replaced. */
    const ort_model *m;
};

struct worker {
    batcher *b;
    pthread_t thread;
    struct scratch s;
};

struct batcher {
    const ort_model *m; /* what the next batch runs on */
    const ort_io *io;
    fn_metrics *metrics;
    struct batcher_options o;
    pthread_mutex_t lock;
    pthread_cond_t work; /* a request arrived, or draining began */
    pthread_cond_t done; /* a batch finished (and its worker let go of its session) */
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
    free(s->seeded);
    free(s->tensored);
    free(s->group);
    free(s->group_tensors);
    free(s->taken);
    free(s->seeds);
    free(s->wanted);
    free(s->inputs);
    free(s->outputs);
    memset(s, 0, sizeof(*s));
}

static int scratch_alloc(struct scratch *s, const batcher *b)
{
    size_t batch = (size_t)b->o.batch;
    s->reqs = calloc(batch, sizeof(*s->reqs));
    s->seeded = calloc(batch, sizeof(*s->seeded));
    s->tensored = calloc(batch, sizeof(*s->tensored));
    s->group = calloc(batch, sizeof(*s->group));
    s->group_tensors = calloc(batch, sizeof(*s->group_tensors));
    s->taken = calloc(batch, sizeof(*s->taken));
    s->seeds = calloc(batch, sizeof(*s->seeds));
    s->wanted = calloc(b->io->n_out + 1, sizeof(*s->wanted));
    s->inputs = calloc(b->io->n_in + 1, sizeof(*s->inputs));
    s->outputs = calloc(b->io->n_out + 1, sizeof(*s->outputs));
    if (s->reqs == NULL || s->seeded == NULL || s->tensored == NULL || s->group == NULL ||
        s->group_tensors == NULL || s->taken == NULL || s->seeds == NULL || s->wanted == NULL ||
        s->inputs == NULL || s->outputs == NULL) {
        scratch_free(s);
        return -1;
    }
    return 0;
}

/* ---- seed requests ---- */

/* One Run over seed requests, their inputs concatenated along dim 0. */
static void run_seeds_concatenated(batcher *b, struct scratch *s, fn_request **reqs, size_t n)
{
    const ort_io *io = b->io;
    tetris_error err = {0};
    int r;

    for (size_t j = 0; j < n; j++)
        s->seeds[j] = reqs[j]->seed;
    r = ort_inputs_make(s->m, io, s->seeds, n, s->inputs, &err);
    if (r == 0) {
        r = ort_io_run(s->m, io, s->inputs, s->outputs, &err);
        ort_values_release(s->m, s->inputs, io->n_in);
    }
    for (size_t j = 0; j < n; j++) {
        fn_request *req = reqs[j];
        if (r < 0)
            fail_request(req, &err);
        else if (ort_outputs_sha256(s->m, io, s->outputs, n, j, req->sha256, &req->output_bytes,
                                    &err) < 0)
            fail_request(req, &err);
    }
    if (r == 0)
        ort_values_release(s->m, s->outputs, io->n_out);
}

/* The model cannot take a batch dimension: one Run per seed request. */
static void run_seeds_sequentially(batcher *b, struct scratch *s, fn_request **reqs, size_t n)
{
    const ort_io *io = b->io;

    for (size_t j = 0; j < n; j++) {
        fn_request *req = reqs[j];
        tetris_error err = {0};
        int r = ort_inputs_make(s->m, io, &req->seed, 1, s->inputs, &err);
        if (r == 0) {
            r = ort_io_run(s->m, io, s->inputs, s->outputs, &err);
            ort_values_release(s->m, s->inputs, io->n_in);
        }
        if (r == 0) {
            r = ort_outputs_sha256(s->m, io, s->outputs, 1, 0, req->sha256, &req->output_bytes,
                                   &err);
            ort_values_release(s->m, s->outputs, io->n_out);
        }
        if (r < 0)
            fail_request(req, &err);
    }
}

/* ---- tensor requests ---- */

static void clear_outputs(const batcher *b, fn_request *req)
{
    for (size_t i = 0; i < b->io->n_out; i++)
        oip_tensor_clear(&req->outputs[i]);
}

/* Each request's rows of the outputs it asked for; -1 (and every output
 * cleared) when the outputs do not carry the batch as expected. */
static int split_outputs(batcher *b, struct scratch *s, fn_request **group, size_t n,
                         tetris_error *err)
{
    size_t total = 0, first = 0;
    for (size_t j = 0; n > 1 && j < n; j++)
        total += oip_ort_rows(group[j]->tensors);
    for (size_t j = 0; j < n; j++) {
        fn_request *req = group[j];
        size_t rows = n > 1 ? oip_ort_rows(req->tensors) : 0;
        for (size_t i = 0; i < b->io->n_out; i++) {
            if (!req->tensors->output_wanted[i])
                continue;
            if (oip_ort_output(s->m, b->io, i, s->outputs[i], first, rows, total, &req->outputs[i],
                               err) < 0) {
                for (size_t k = 0; k < n; k++)
                    clear_outputs(b, group[k]);
                return -1;
            }
        }
        first += rows;
    }
    return 0;
}

/* One Run over a group of tensor requests (concatenated when more than
 * one). A failure of a group of several runs each of them alone, so that
 * every request gets its own outcome. */
static void run_group(batcher *b, struct scratch *s, fn_request **group, size_t n)
{
    const ort_io *io = b->io;
    tetris_error err = {0};

    memset(s->wanted, 0, io->n_out * sizeof(*s->wanted));
    for (size_t j = 0; j < n; j++) {
        s->group_tensors[j] = group[j]->tensors;
        for (size_t i = 0; i < io->n_out; i++)
            s->wanted[i] |= group[j]->tensors->output_wanted[i];
    }
    int r = oip_ort_inputs(s->m, io, s->group_tensors, n, s->inputs, &err);
    if (r == 0) {
        r = ort_io_run_some(s->m, io, s->inputs, s->wanted, s->outputs, &err);
        ort_values_release(s->m, s->inputs, io->n_in);
    }
    if (r == 0) {
        r = split_outputs(b, s, group, n, &err);
        ort_values_release(s->m, s->outputs, io->n_out);
    }
    if (r < 0 && n > 1) {
        log_debug("event=batch-split requests=%zu msg=%s", n, LOG_Q(err.msg));
        for (size_t j = 0; j < n; j++)
            run_group(b, s, &group[j], 1);
    } else if (r < 0) {
        fail_request(group[0], &err);
    }
}

/* Groups the tensor requests that can be concatenated (batchable model,
 * equal dimensions but the first), in arrival order, and runs each group. */
static void run_tensor_requests(batcher *b, struct scratch *s, fn_request **reqs, size_t n)
{
    memset(s->taken, 0, n * sizeof(*s->taken));
    for (size_t j = 0; j < n; j++) {
        if (s->taken[j])
            continue;
        size_t g = 0;
        s->group[g++] = reqs[j];
        for (size_t k = j + 1; b->io->batchable && k < n; k++) {
            if (!s->taken[k] && oip_ort_concatenable(reqs[j]->tensors, reqs[k]->tensors)) {
                s->taken[k] = true;
                s->group[g++] = reqs[k];
            }
        }
        run_group(b, s, s->group, g);
    }
}

static void run_batch(batcher *b, struct scratch *s, size_t n, uint64_t id)
{
    fn_request **reqs = s->reqs;
    size_t n_seeded = 0, n_tensored = 0;
    double start = clock_now_ms();
    for (size_t j = 0; j < n; j++) {
        if (reqs[j]->tensors != NULL)
            s->tensored[n_tensored++] = reqs[j];
        else
            s->seeded[n_seeded++] = reqs[j];
    }
    if (n_seeded > 0 && b->io->batchable)
        run_seeds_concatenated(b, s, s->seeded, n_seeded);
    else if (n_seeded > 0)
        run_seeds_sequentially(b, s, s->seeded, n_seeded);
    if (n_tensored > 0)
        run_tensor_requests(b, s, s->tensored, n_tensored);
    double elapsed = clock_now_ms() - start;
    for (size_t j = 0; j < n; j++) {
        reqs[j]->batch_size = n;
        reqs[j]->batch_id = id;
        reqs[j]->queue_ms = start - reqs[j]->enqueued_ms;
        reqs[j]->inference_ms = elapsed;
        /* A tensor request's failure is most likely its inputs (its
         * client gets a 4xx); a seed request's is the function's. */
        if (reqs[j]->rc < 0 && reqs[j]->tensors != NULL)
            log_info("event=inference-failed batch=%llu request=tensors msg=%s",
                     (unsigned long long)id, LOG_Q(reqs[j]->error));
        else if (reqs[j]->rc < 0)
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
        w->s.m = b->m;
        pthread_mutex_unlock(&b->lock);
        run_batch(b, &w->s, n, id);
        pthread_mutex_lock(&b->lock);
        w->s.m = NULL;
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

/* Whether a worker's batch runs on m (lock held). */
static bool model_in_use(const batcher *b, const ort_model *m)
{
    for (int i = 0; i < b->n_workers; i++)
        if (b->workers[i].s.m == m)
            return true;
    return false;
}

void batcher_replace_model(batcher *b, const ort_model *m)
{
    pthread_mutex_lock(&b->lock);
    const ort_model *previous = b->m;
    b->m = m;
    while (model_in_use(b, previous))
        pthread_cond_wait(&b->done, &b->lock);
    pthread_mutex_unlock(&b->lock);
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
