/* fn_metrics.h - the inference function's own request metrics, served at
 * GET /metrics in the Prometheus text format:
 *
 *   tetris_function_requests_total{code}             counter
 *   tetris_function_request_duration_seconds         histogram (enqueue..reply)
 *   tetris_function_batch_size                       histogram (requests per batch)
 *   tetris_function_batch_duration_seconds           histogram (inference of a batch)
 *   tetris_function_queue_depth                      gauge (waiting for a worker)
 *   tetris_function_inflight_requests                gauge (accepted, not answered)
 *   tetris_function_shared_tensor_bytes              gauge (weights from the store)
 *   tetris_function_derived_form                     gauge (1: on the derived form)
 *   tetris_function_info{model,mode,batching}        1
 *   tetris_function_start_seconds{start,store}       histogram (main() to ready)
 *   tetris_function_first_answer_seconds{start,store} histogram (main() to the
 *                                                    first 200 answer)
 *   tetris_function_start_step_seconds{step}         gauge (this start's steps)
 *
 * One process starts once, so each start histogram holds at most one
 * observation: the histograms are for Prometheus to sum over a function's
 * instances (sum by (le) (rate(..._bucket[5m]))). start is "warm" when
 * the node's store held every tensor (store="hit"), "cold" otherwise;
 * store is the daemon's answer (agent.h, enum agent_store_result) or
 * "none" without a store.
 *
 * Every update takes one mutex: updates happen a few times per request,
 * next to an inference that costs milliseconds. */
#ifndef TETRIS_FN_METRICS_H
#define TETRIS_FN_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef struct fn_metrics fn_metrics;

struct fn_metrics_info {
    const char *model;    /* model file name */
    const char *mode;     /* "store", "direct", "private" */
    const char *batching; /* "concat" or "sequential" */
    uint64_t shared_bytes;
    bool derived;      /* the session is on the store's derived form */
    double started_ms; /* clock_now_ms() at main() */
    const char *store; /* agent_store_result_name() */
    struct fn_start_steps {
        double read, store, digests, connect, register_, watch, map, private_, session;
    } steps_ms;
};

int fn_metrics_new(const struct fn_metrics_info *info, fn_metrics **out, tetris_error *err);
void fn_metrics_free(fn_metrics *m);

/* A request entered / left the handler (inflight gauge). */
void fn_metrics_request_begin(fn_metrics *m);
/* ... and was answered with HTTP status code after seconds. */
void fn_metrics_request_end(fn_metrics *m, int code, double seconds);
void fn_metrics_queue_depth(fn_metrics *m, size_t depth);
void fn_metrics_batch(fn_metrics *m, size_t size, double seconds);

/* The session was replaced (fn_upgrade.c): what it now shares. */
void fn_metrics_session(fn_metrics *m, uint64_t shared_bytes, bool derived);

/* The model is loaded and served: observes the start (now - started_ms). */
void fn_metrics_ready(fn_metrics *m);

/* The exposition text (malloc'd, NUL-terminated). */
char *fn_metrics_render(fn_metrics *m, size_t *len);

#endif
