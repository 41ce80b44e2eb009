/* function.h - what the files of tetris-function share: its settings, its
 * state, and the accounting of replies that draining waits for.
 *
 *   tetris-function.c  options, start-up, POST / (seeded inputs), health,
 *                      /metrics, draining and shutdown
 *   oip_api.c          the Open Inference Protocol's /v2 routes
 *   fn_replies.c       the replies draining waits for (below both)
 *   batcher.c          the batching queue and its workers (batcher.h)
 *   oip_ort.c          protocol tensors in and out of ONNX Runtime
 *   fn_metrics.c       the request metrics
 *   fn_view.c          a model view the platform made (tetris-csi's volume)
 *   fn_upgrade.c       the move to the store's derived form (--derived auto)
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

#include <jansson.h>

#include "agent/agent.h"
#include "agent/ort_adapter.h"
#include "agent/ort_inputs.h"
#include "common/httpserver.h"
#include "function/batcher.h"
#include "function/fn_metrics.h"
#include "function/oip_request.h"

struct fn_options {
    const char *model;         /* the model file; NULL: only model_ref */
    const char *model_ref;     /* its registry reference (oci://...), pulled by the
                                  node daemon; model is then the fallback */
    const char *model_view;    /* a model view the platform made (tetris-csi's
                                  volume): its graph instead of model and the
                                  store; NULL: none */
    const char *model_name;    /* NULL: the model file's base name without .onnx */
    const char *model_version; /* NULL: unversioned */
    const char *store_dir;     /* NULL: private */
    enum agent_mode mode;
    const char *tenant;
    const char *manifest;
    char listen[300];
    struct batcher_options batch;
    int threads;
    enum derived_mode derived; /* the store's derived form (ort_adapter.h) */
    int64_t dynamic_dim;
    uint64_t max_body_bytes;
};

/* What tetris-function takes from a view's index (docs/PROTOCOLS.md,
 * "Model view"). */
struct fn_view {
    char *dir;     /* the view, absolute, links resolved */
    char *graph;   /* the file a session opens: absolute, or in the view */
    char *model;   /* the original model's path, informational: its name */
    json_t *index; /* tensors.json */
};

struct fn {
    struct fn_options o;
    struct fn_view view; /* when o.model_view */
    double started_ms; /* clock_now_ms() at main(): the start metrics' zero */
    char *model_name; /* what the /v2 paths call the model */
    const char *model_path; /* what was loaded: o.model_ref, or o.model */
    agent_model *am;
    ort_model *m; /* replaced only by fn_upgrade.c's thread, joined before it is freed */
    ort_io *io;
    oip_signature *sig;
    char *model_metadata; /* the /v2/models/NAME document */
    size_t model_metadata_len;
    fn_metrics *metrics;
    batcher *batcher;
    http_server *srv;
    ort_upgrade *upgrade; /* NULL: none under way */
    pthread_t upgrade_thread;
    atomic_bool loaded, ready;
    /* Inference replies not yet sent: draining waits for them, because
     * stopping the HTTP server drops what it has not written. */
    pthread_mutex_t replies_lock;
    pthread_cond_t replies_sent;
    unsigned replies_pending;
};

/* ---- fn_view.c ---- */
/* Checks the view at dir as its reader must (view_check) and reads its
 * index into *out (fn_view_free). TETRIS_E_DENIED, TETRIS_E_FORMAT or
 * TETRIS_E_NOTFOUND for a view not to trust, TETRIS_E_FORMAT for one
 * without an ONNX graph. */
int fn_view_read(const char *dir, struct fn_view *out, tetris_error *err);
/* A session on the view's graph: ONNX Runtime maps its external data, the
 * store's files, itself; *out's shared counts are the store's tensors it
 * maps (/proc/self/maps). */
int fn_view_open(const struct fn_view *v, const struct ort_adapter_options *oo, ort_model **out,
                 tetris_error *err);
void fn_view_free(struct fn_view *v);

/* ---- fn_upgrade.c ---- */
/* With --derived auto and no form in the store, starts the thread that
 * waits for the daemon to make it and moves the batcher to a session on
 * it (once the function is ready); nothing to do otherwise. */
int fn_upgrade_start(struct fn *f, tetris_error *err);
/* Ends the wait and joins the thread (stop's first step, before the
 * batcher and the session are freed). */
void fn_upgrade_stop(struct fn *f);

/* ---- fn_replies.c ---- */
/* An inference handler's first step: false (and resp is a 503) while the
 * model loads; else its reply is counted until it has been sent, and its
 * request in the metrics... */
bool fn_inference_begin(struct fn *f, http_response *resp);
/* ... and its last, resp holding the reply (status, started at
 * start_ms): it counts as sent once the server has released it. */
void fn_inference_end(struct fn *f, http_response *resp, int status, double start_ms);
/* Waits until every inference reply has been sent, at most timeout_s. */
void fn_wait_replies_sent(struct fn *f, int timeout_s);

/* Adds the /v2 routes to f->srv (before it starts). */
int fn_oip_routes(struct fn *f, tetris_error *err);

#endif
