/* batcher.h - the inference function's batching queue: requests wait until
 * `batch` of them are queued or the oldest has waited `max_wait_ms`, then
 * one of `concurrency` worker threads runs them as one batch.
 *
 * A request is either a decoded inference request (its tensors, from
 * POST /v2/models/NAME/infer) or a seed (POST /: inputs generated from it
 * exactly as tetris-onnx-run --seed does). All workers share one ONNX
 * Runtime session (Run is thread-safe), taken at each batch's start: a
 * session replaced meanwhile (batcher_replace_model) serves the batches
 * already running, the new one every later batch. When the model is batchable
 * (ort_inputs.h), the seed requests of a batch are one Run over their
 * inputs concatenated along dim 0, and so are the tensor requests that
 * agree on every dimension but the first (oip_ort.h); the others run one
 * after the other. Each request gets its own share of the outputs: a seed
 * request the SHA-256 of its output bytes, a tensor request its rows of the
 * outputs it asked for, which equal what a run of it alone gives (up to the
 * rounding of a model whose kernels differ with the batch size). When a
 * concatenated run fails, or its outputs do not carry the batch, each of
 * its requests runs again alone, so one request's bad input never fails
 * another's. */
#ifndef TETRIS_BATCHER_H
#define TETRIS_BATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "function/fn_metrics.h"
#include "function/oip_request.h"
#include "agent/ort_inputs.h"

struct batcher_options {
    int batch;          /* maximum requests per batch, >= 1 */
    int concurrency;    /* worker threads, >= 1 */
    double max_wait_ms; /* how long a partial batch waits for more, >= 0 */
};

typedef struct fn_request {
    /* What to run: a decoded request's tensors, or (NULL) inputs from seed. */
    const oip_request *tensors;
    uint64_t seed;
    /* Tensor requests: io->n_out zeroed entries, from the caller; the
     * batcher fills those tensors->output_wanted says (owned: the caller
     * clears them with oip_tensor_clear). */
    oip_tensor *outputs;
    /* filled by the batcher */
    int rc;              /* 0 or a negative tetris code */
    char error[512];
    char sha256[65]; /* seed requests: of its output bytes */
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

/* Queues req (tensors and outputs, or seed, set) and waits until it has
 * run; the outcome is in req.
 * -TETRIS_E_UNAVAILABLE when the batcher is draining. */
int batcher_run(batcher *b, fn_request *req, tetris_error *err);

/* From the next batch on the workers run on m, a session of the same
 * inputs and outputs (io) as the one it replaces; returns once no batch
 * runs on that one any more (the caller, its owner, may free it). */
void batcher_replace_model(batcher *b, const ort_model *m);

/* From now on partial batches do not wait and new requests are refused;
 * what is queued still runs. */
void batcher_drain(batcher *b);

/* Drains, runs what is queued, joins the workers and frees. */
void batcher_free(batcher *b);

#endif
