/* batcher.h - the inference function's batching queue: requests wait until
 * `batch` of them are queued or the oldest has waited `max_wait_ms`, then
 * one of `concurrency` worker threads runs them as one batch.
 *
 * All workers share one ONNX Runtime session (Run is thread-safe). When the
 * model is batchable (ort_inputs.h) the batch is one Run over the requests'
 * inputs concatenated along dim 0; otherwise the worker runs the requests of
 * its batch one after the other. Either way each request gets the SHA-256 of
 * its own share of the outputs, which equals what a run of that request alone
 * gives. */
#ifndef TETRIS_BATCHER_H
#define TETRIS_BATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "function/fn_metrics.h"
#include "agent/ort_inputs.h"

struct batcher_options {
    int batch;          /* maximum requests per batch, >= 1 */
    int concurrency;    /* worker threads, >= 1 */
    double max_wait_ms; /* how long a partial batch waits for more, >= 0 */
};

typedef struct fn_request {
    uint64_t seed;
    /* filled by the batcher */
    int rc;              /* 0 or a negative tetris code */
    char error[512];
    char sha256[65];
    uint64_t output_bytes;
    size_t batch_size;
    uint64_t batch_id;   /* batches are numbered from 1 */
    double queue_ms;     /* enqueue .. its batch started */
    double inference_ms; /* its batch's run time */
    /* the batcher's bookkeeping */
    double enqueued_ms;
    bool done;
    struct fn_request *next;
} fn_request;

typedef struct batcher batcher;

/* Starts the workers. m, io and metrics must outlive the batcher. */
int batcher_new(const ort_model *m, const ort_io *io, const struct batcher_options *o,
                fn_metrics *metrics, batcher **out, tetris_error *err);

/* Queues req (seed set) and waits until it has run; the outcome is in req.
 * -TETRIS_E_UNAVAILABLE when the batcher is draining. */
int batcher_run(batcher *b, fn_request *req, tetris_error *err);

/* From now on partial batches do not wait and new requests are refused;
 * what is queued still runs. */
void batcher_drain(batcher *b);

/* Drains, runs what is queued, joins the workers and frees. */
void batcher_free(batcher *b);

#endif
