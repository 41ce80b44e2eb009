/* function.h - what the files of tetris-function share: its settings, its
 * state, and the accounting of replies that draining waits for.
 *
 *   tetris-function.c  options, start-up, POST / (seeded inputs), health,
 *                      /metrics, draining and shutdown
 *   oip_api.c          the Open Inference Protocol's /v2 routes
 *   batcher.c          the batching queue and its workers (batcher.h)
 *   oip_ort.c          protocol tensors in and out of ONNX Runtime
 *   fn_metrics.c       the request metrics
 *
 * Life cycle: the HTTP server starts first, so that liveness answers while
 * the model loads; `loaded` is set once the model, its signature, the
 * metrics and the batcher exist (handlers that need them answer 503 until
 * then, and they are freed only after the server has stopped); `ready`
 * is loaded and not draining. */
#ifndef TETRIS_FUNCTION_H
#define TETRIS_FUNCTION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent.h"
#include "agent/ort_adapter.h"
#include "agent/ort_inputs.h"
#include "common/httpserver.h"
#include "function/batcher.h"
#include "function/fn_metrics.h"
#include "function/oip_request.h"

struct fn_options {
    const char *model;
    const char *model_name;    /* NULL: the model file's base name without .onnx */
    const char *model_version; /* NULL: unversioned */
    const char *store_dir;     /* NULL: private */
    enum agent_mode mode;
    const char *tenant;
    const char *manifest;
    char listen[300];
    struct batcher_options batch;
    int threads;
    int64_t dynamic_dim;
    uint64_t max_body_bytes;
};

struct fn {
    struct fn_options o;
    char *model_name; /* what the /v2 paths call the model */
    agent_model *am;
    ort_model *m;
    ort_io *io;
    oip_signature *sig;
    char *model_metadata; /* the /v2/models/NAME document */
    size_t model_metadata_len;
    fn_metrics *metrics;
    batcher *batcher;
    http_server *srv;
    atomic_bool loaded, ready;
    /* Inference replies not yet sent: draining waits for them, because
     * stopping the HTTP server drops what it has not written. */
    pthread_mutex_t replies_lock;
    pthread_cond_t replies_sent;
    unsigned replies_pending;
};

/* An inference reply is being prepared (counted until it has been sent)... */
void fn_reply_begin(struct fn *f);
/* ... and resp holds it: it counts as sent once the server released it. */
void fn_reply_guard(struct fn *f, http_response *resp);

/* Adds the /v2 routes to f->srv (before it starts). */
int fn_oip_routes(struct fn *f, tetris_error *err);

#endif
