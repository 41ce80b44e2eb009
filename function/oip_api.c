/* oip_api.c - tetris-function's Open Inference Protocol (KServe V2 REST)
 * routes: health, server and model metadata, and inference, which decodes
 * the request (oip_request.h), queues it with the batcher (batcher.h) and
 * encodes the answer (oip_response.h).
 *
 *   GET  /v2, /v2/                             server metadata
 *   GET  /v2/health/live                       200 {"live": true}
 *   GET  /v2/health/ready                      200 {"ready": true}, 503 while
 *                                              loading or draining
 *   GET  /v2/models/NAME[/versions/V]          model metadata
 *   GET  /v2/models/NAME[/versions/V]/ready    {"name", "ready"}, 200 or 503
 *   POST /v2/models/NAME[/versions/V]/infer    inference
 *
 * Errors are {"error": "..."}: 400 for a request that is wrong (the
 * decoder's message, or the runtime's when it refuses the inputs), 404 for
 * a model or version this function does not serve, 405 for a method the
 * path does not take, 413 for a body over --max-body-bytes (the HTTP
 * server's), 503 while loading or draining, 500 when the function itself
 * fails. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "function/function.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/textbuf.h"
#include "function/oip_response.h"
#include "protocol/oip.h"

#define MODELS_PREFIX "/v2/models/"

enum model_action { ACTION_METADATA, ACTION_READY, ACTION_INFER };

static void handle_server_metadata(void *ctx, const http_request *req, http_response *resp)
{
    size_t len;
    (void)ctx;
    (void)req;
    char *body = oip_response_server_metadata(TETRIS_VERSION, &len);
    if (body == NULL)
        http_response_error(resp, 500, "out of memory");
    else
        http_response_take_body(resp, 200, "application/json", body, len);
}

static void handle_live(void *ctx, const http_request *req, http_response *resp)
{
    static const char live[] = "{\"live\":true}";
    (void)ctx;
    (void)req;
    http_response_set_body(resp, 200, "application/json", live, sizeof(live) - 1);
}

static void handle_ready(void *ctx, const http_request *req, http_response *resp)
{
    static const char ready[] = "{\"ready\":true}", not_ready[] = "{\"ready\":false}";
    struct fn *f = ctx;
    (void)req;
    if (atomic_load(&f->ready))
        http_response_set_body(resp, 200, "application/json", ready, sizeof(ready) - 1);
    else
        http_response_set_body(resp, 503, "application/json", not_ready, sizeof(not_ready) - 1);
}

/* Splits off the next path segment of *path (up to '/' or the end). */
static void segment(const char **path, const char **seg, size_t *len)
{
    *seg = *path;
    *len = strcspn(*path, "/");
    *path += *len;
}

static bool segment_is(const char *seg, size_t len, const char *s)
{
    return len == strlen(s) && memcmp(seg, s, len) == 0;
}

/* MODELS_PREFIX NAME [/versions/V] [/ready | /infer]: the action, once NAME
 * and V are this function's; otherwise resp gets the 404 and -1. */
static int parse_model_path(const struct fn *f, const char *path, enum model_action *action,
                            http_response *resp)
{
    const char *rest = path + strlen(MODELS_PREFIX), *name, *version = NULL, *verb = NULL;
    size_t name_len, version_len = 0, verb_len = 0;

    segment(&rest, &name, &name_len);
    if (strncmp(rest, "/versions/", 10) == 0) {
        rest += 10;
        segment(&rest, &version, &version_len);
    }
    if (*rest == '/') {
        rest++;
        segment(&rest, &verb, &verb_len);
    }
    if (*rest != '\0' || (verb_len > 0 && !segment_is(verb, verb_len, "ready") &&
                          !segment_is(verb, verb_len, "infer"))) {
        http_response_error(resp, 404, "no such path: %.200s", path);
        return -1;
    }
    if (!segment_is(name, name_len, f->model_name)) {
        http_response_error(resp, 404, "unknown model \"%.*s\" (this function serves \"%s\")",
                            (int)(name_len < 200 ? name_len : 200), name, f->model_name);
        return -1;
    }
    if (version != NULL && f->o.model_version == NULL) {
        http_response_error(resp, 404, "model \"%s\" has no versions", f->model_name);
        return -1;
    }
    if (version != NULL && !segment_is(version, version_len, f->o.model_version)) {
        http_response_error(resp, 404, "model \"%s\" has no version \"%.*s\" (it has \"%s\")",
                            f->model_name, (int)(version_len < 200 ? version_len : 200), version,
                            f->o.model_version);
        return -1;
    }
    *action = verb_len == 0                         ? ACTION_METADATA
              : segment_is(verb, verb_len, "ready") ? ACTION_READY
                                                    : ACTION_INFER;
    return 0;
}

static void method_not_allowed(http_response *resp, const char *allow)
{
    http_response_error(resp, 405, "method not allowed");
    http_response_add_header(resp, "Allow", allow);
}

static void handle_model_get(void *ctx, const http_request *req, http_response *resp)
{
    struct fn *f = ctx;
    enum model_action action;

    if (parse_model_path(f, req->path, &action, resp) < 0)
        return;
    if (action == ACTION_INFER) {
        method_not_allowed(resp, "POST");
    } else if (action == ACTION_READY) {
        bool ready = atomic_load(&f->ready);
        textbuf t = {0};
        tetris_error err;
        size_t len;
        textbuf_puts(&t, "{\"name\":");
        if (oip_write_json_string(&t, f->model_name, strlen(f->model_name), &err) < 0)
            t.failed = true; /* cannot be: the metadata's name was written alike */
        textbuf_puts(&t, ready ? ",\"ready\":true}" : ",\"ready\":false}");
        char *body = textbuf_take(&t, &len);
        if (body == NULL)
            http_response_error(resp, 500, "out of memory");
        else
            http_response_take_body(resp, ready ? 200 : 503, "application/json", body, len);
    } else if (!atomic_load(&f->loaded)) {
        http_response_error(resp, 503, "the model is loading");
    } else {
        http_response_set_shared(resp, 200, "application/json", f->model_metadata,
                                 f->model_metadata_len, NULL, NULL);
    }
}

static void clear_outputs(oip_tensor *outputs, size_t n)
{
    for (size_t i = 0; outputs != NULL && i < n; i++)
        oip_tensor_clear(&outputs[i]);
    free(outputs);
}

/* The answer to a decoded request, or the status and err of a failure. */
static int run_request(struct fn *f, oip_request *oreq, http_response *resp, tetris_error *err)
{
    fn_request r = {.tensors = oreq};
    struct oip_response out;
    char header_len[32];
    int status = 200;

    if ((r.outputs = calloc(f->io->n_out + 1, sizeof(*r.outputs))) == NULL) {
        tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
        return 500;
    }
    if (batcher_run(f->batcher, &r, err) < 0) {
        status = 503;
    } else if (r.rc < 0) {
        status = r.rc == -TETRIS_E_NOMEM ? 500 : 400;
        tetris_fail(err, -r.rc, 0, "inference failed: %s", r.error);
    } else if (oip_response_infer(f->model_name, f->o.model_version, oreq, r.outputs, &out, err) <
               0) {
        status = err->code == TETRIS_E_NOMEM ? 500 : 400;
    } else {
        http_response_take_body(resp, 200,
                                out.binary ? "application/octet-stream" : "application/json",
                                out.body, out.body_len);
        snprintf(header_len, sizeof(header_len), "%zu", out.header_len);
        if (out.binary)
            http_response_add_header(resp, OIP_HEADER_LENGTH_HEADER, header_len);
    }
    clear_outputs(r.outputs, f->io->n_out);
    return status;
}

static void infer(struct fn *f, const http_request *req, http_response *resp)
{
    oip_request *oreq = NULL;
    tetris_error err = {0};
    double start = clock_now_ms();
    int status;

    if (!atomic_load(&f->loaded)) {
        http_response_error(resp, 503, "the model is loading");
        return;
    }
    fn_reply_begin(f);
    fn_metrics_request_begin(f->metrics);
    if (oip_request_decode(f->sig, req->body, req->body_len,
                           http_request_header(req, OIP_HEADER_LENGTH_HEADER), &oreq, &err) < 0)
        status = err.code == TETRIS_E_NOMEM ? 500 : 400;
    else
        status = run_request(f, oreq, resp, &err);
    if (status != 200) {
        http_response_error(resp, status, "%s", err.msg);
        log_debug("event=infer-refused status=%d msg=%s", status, LOG_Q(err.msg));
    }
    oip_request_free(oreq);
    fn_reply_guard(f, resp);
    fn_metrics_request_end(f->metrics, status, (clock_now_ms() - start) / 1e3);
}

static void handle_model_post(void *ctx, const http_request *req, http_response *resp)
{
    struct fn *f = ctx;
    enum model_action action;
    if (parse_model_path(f, req->path, &action, resp) < 0)
        return;
    if (action != ACTION_INFER)
        method_not_allowed(resp, "GET");
    else
        infer(f, req, resp);
}

int fn_oip_routes(struct fn *f, tetris_error *err)
{
    int r;
    if ((r = http_server_route(f->srv, "GET", "/v2", handle_server_metadata, f, err)) < 0 ||
        (r = http_server_route(f->srv, "GET", "/v2/", handle_server_metadata, f, err)) < 0 ||
        (r = http_server_route(f->srv, "GET", "/v2/health/live", handle_live, f, err)) < 0 ||
        (r = http_server_route(f->srv, "GET", "/v2/health/ready", handle_ready, f, err)) < 0 ||
        (r = http_server_route(f->srv, "GET", MODELS_PREFIX "*", handle_model_get, f, err)) < 0 ||
        (r = http_server_route(f->srv, "POST", MODELS_PREFIX "*", handle_model_post, f, err)) < 0)
        return r;
    return 0;
}
