/* loadgen.h - HTTP load on tetris-function instances.
 *
 * Closed loop (rate 0): `clients` threads, each sending its next request
 * as soon as the previous one is answered; with enough clients the
 * function is saturated, which is how the profiler measures throughput.
 * Open loop (rate > 0): requests are due at fixed times (rate per second)
 * whatever the answers do; a pool of `clients` threads sends them, and a
 * request's latency counts from when it was due, so a backlog shows up as
 * latency instead of silently lowering the rate.
 *
 * Requests go to the targets in proportion to their weights (smooth
 * weighted round robin); the body is {"seed": N} with N counting up. Only
 * requests due after the warm-up are recorded. */
#ifndef TETRIS_LOADGEN_H
#define TETRIS_LOADGEN_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct load_target {
    const char *url; /* http://HOST:PORT */
    double weight;   /* > 0 */
};

struct load_options {
    const struct load_target *targets;
    size_t n_targets;
    int clients;       /* threads */
    double rate_rps;   /* 0: closed loop */
    double duration_s; /* measured time, after warmup_s */
    double warmup_s;
    int timeout_ms;    /* per request, default 30000 */
};

struct load_sample {
    double latency_ms;   /* client side: due (open) or sent (closed) .. answered */
    double inference_ms; /* the batch's run time, from the answer */
    uint64_t batch_id;
    uint32_t batch_size;
    uint16_t target;
    uint16_t status;     /* HTTP status, 0 = transport failure */
};

struct load_result {
    struct load_sample *samples; /* measured requests, in no particular order */
    size_t n_samples;
    size_t n_ok;                 /* status 200 */
    double elapsed_s;            /* the measured window (duration_s) */
};

int load_run(const struct load_options *o, struct load_result *out, tetris_error *err);
void load_result_free(struct load_result *r);

/* Percentile (0..100) of n values, which it sorts. */
double load_percentile(double *values, size_t n, double pct);

#endif
