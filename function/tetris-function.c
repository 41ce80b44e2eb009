/* tetris-function - an inference function for OpenFaaS (of-watchdog HTTP
 * mode): an HTTP server that runs an ONNX model through ONNX Runtime on the
 * inputs its clients send (the Open Inference Protocol's
 * POST /v2/models/NAME/infer, oip_api.c) or on inputs generated from a seed
 * (POST /, what the profiler and the benchmarks drive), with the model's
 * weights mapped from the node's tensor store by the agent, requests
 * batched (up to TETRIS_BATCH, TETRIS_MAX_WAIT_MS) and run by
 * TETRIS_CONCURRENCY worker threads. The autoscaler sets those through the
 * environment; the profiler measures each setting. The program's files:
 * function.h. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "function/function.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/httpserver.h"
#include "common/log.h"
#include "function/oip_ort.h"
#include "function/oip_response.h"
#include "protocol/names.h"

enum exit_code { EXIT_OK = 0, EXIT_FAILURE_ = 1, EXIT_USAGE = 2, EXIT_BAD_MODEL = 3 };

#define DEFAULT_LISTEN "127.0.0.1:" TETRIS_STRINGIFY(TETRIS_FUNCTION_PORT)
#define DEFAULT_MAX_WAIT_MS 10.0
#define DEFAULT_SEED 1
#define SEED_BODY_MAX_BYTES 4096
/* Real models' inputs in JSON (an image of 3x640x640 floats is some 15
 * MiB of text); larger ones go as binary data or need the option. */
#define DEFAULT_MAX_BODY_BYTES (64ULL << 20)
#define MAX_BODY_BYTES_LIMIT (1ULL << 34)
#define DRAIN_TIMEOUT_S 30

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tetris-function [--model FILE] [--name NAME] [--model-version V]\n"
            "                       [--store DIR [--direct] [--tenant T]\n"
            "                       [--manifest M] | --private] [--listen ADDR:PORT]\n"
            "                       [--batch B] [--concurrency P] [--max-wait-ms MS]\n"
            "                       [--threads N] [--dim N] [--max-body-bytes N]\n"
            "\n"
            "Serves an ONNX model over HTTP like an OpenFaaS of-watchdog (HTTP mode)\n"
            "function, through the Open Inference Protocol (KServe V2 REST). Every\n"
            "option has an environment variable; options win.\n"
            "\n"
            "  --model FILE        " TETRIS_ENV_MODEL ": the ONNX model (required)\n"
            "  --name NAME         " TETRIS_ENV_MODEL_NAME ": the model's name in /v2/models/NAME\n"
            "                      (default: FILE's base name without .onnx)\n"
            "  --model-version V   " TETRIS_ENV_MODEL_VERSION ": its version (default: none)\n"
            "  --store DIR         " TETRIS_ENV_STORE
            ": map weights from the tensor store at DIR;\n"
            "                      missing tensors are ingested by the node daemon, and a\n"
            "                      private load is used if the store cannot serve. Unset\n"
            "                      or empty: private (ONNX Runtime loads the file)\n"
            "  --direct            ingest missing tensors into the store ourselves (no daemon)\n"
            "  --tenant T          " TETRIS_ENV_TENANT ": the dedicated store of tenant T\n"
            "  --manifest M        " TETRIS_ENV_MANIFEST ": tensor identities from manifest M\n"
            "  --private           no store, whatever " TETRIS_ENV_STORE " says\n"
            "  --listen ADDR:PORT  where to listen; else \":$" TETRIS_ENV_WATCHDOG_PORT
            "\" (OpenFaaS) or\n"
            "                      \":$" TETRIS_ENV_PORT "\" when set; default %s;\n"
            "                      port 0 picks a free port\n"
            "  --batch B           " TETRIS_ENV_BATCH ": most requests per batch (default 1)\n"
            "  --concurrency P     " TETRIS_ENV_CONCURRENCY
            ": inference worker threads (default 1)\n"
            "  --max-wait-ms MS    " TETRIS_ENV_MAX_WAIT_MS ": how long a partial batch waits for\n"
            "                      more requests (default %g)\n"
            "  --threads N         " TETRIS_ENV_THREADS ": ONNX Runtime intra-op threads per run\n"
            "                      (default 1)\n"
            "  --dim N             " TETRIS_ENV_DYNAMIC_DIM ": size of dynamic input dimensions\n"
            "                      after the batch in seeded requests (default %d, as\n"
            "                      tetris-onnx-run)\n"
            "  --max-body-bytes N  " TETRIS_ENV_MAX_BODY_BYTES ": largest request body (default\n"
            "                      %llu); a larger one is 413\n"
            "\n"
            "HTTP (the Open Inference Protocol, docs/programs/tetris-function.md):\n"
            "  GET /v2                            server metadata\n"
            "  GET /v2/health/live, /v2/health/ready   200, or 503 while loading or\n"
            "                                     draining (ready)\n"
            "  GET /v2/models/NAME[/versions/V]   the model's inputs and outputs\n"
            "  GET /v2/models/NAME[/versions/V]/ready\n"
            "  POST /v2/models/NAME[/versions/V]/infer   an inference request (JSON, or\n"
            "                  JSON and binary tensor data); 400 with {\"error\": ...}\n"
            "                  naming what is wrong with a bad one, 404 for another model\n"
            "Benchmark mode:\n"
            "  POST /          body {\"seed\": N} (or empty: seed %d). Runs the model on\n"
            "                  inputs generated from the seed exactly as tetris-onnx-run\n"
            "                  --seed N does, and answers {\"seed\", \"sha256\" (of this\n"
            "                  request's output bytes), \"output_bytes\", \"batch_size\",\n"
            "                  \"batch_id\", \"batching\", \"queue_ms\", \"inference_ms\",\n"
            "                  \"latency_ms\"}. A bad body is 400 with {\"error\": ...}.\n"
            "  GET /_/health   200 once loaded (of-watchdog's health path); /healthz too\n"
            "  GET /metrics    request metrics, Prometheus text format\n"
            "\n"
            "Batching: when every input and output of the model has a dynamic first\n"
            "dimension, a batch is one ONNX Runtime run over the requests' inputs\n"
            "concatenated (\"concat\"); otherwise the requests of a batch run one after\n"
            "the other (\"sequential\"), which the ready line and /metrics say.\n"
            "\n"
            "When ready it prints one JSON line on stdout (listen address, mode,\n"
            "batching, shared bytes). SIGTERM or SIGINT: stop accepting, answer what is\n"
            "queued, exit 0.\n"
            "\n"
            "Exit status: 0 drained after SIGTERM/SIGINT, 1 runtime failure (cannot\n"
            "listen, inference setup), 2 usage, 3 bad or missing model file.\n",
            DEFAULT_LISTEN, DEFAULT_MAX_WAIT_MS, ORT_INPUTS_DEFAULT_DYNAMIC_DIM,
            (unsigned long long)DEFAULT_MAX_BODY_BYTES, DEFAULT_SEED);
}

/* ---- configuration: environment, then options ---- */

/* Settings from the environment; the matching options may override them. */
static int options_from_env(struct fn_options *o, tetris_error *err)
{
    const char *port, *v;
    int r = 0;

    struct agent_env ae;
    agent_env_read(&ae);
    o->model = ae.model;
    o->store_dir = ae.store_dir;
    o->tenant = ae.tenant;
    o->manifest = ae.manifest;
    o->model_name = cli_env(TETRIS_ENV_MODEL_NAME);
    o->model_version = cli_env(TETRIS_ENV_MODEL_VERSION);
    if ((port = cli_env(TETRIS_ENV_WATCHDOG_PORT)) != NULL ||
        (port = cli_env(TETRIS_ENV_PORT)) != NULL)
        snprintf(o->listen, sizeof(o->listen), ":%s", port);
    if ((v = cli_env(TETRIS_ENV_BATCH)) != NULL)
        r = cli_parse_int(TETRIS_ENV_BATCH, v, 1, 1024, &o->batch.batch, err);
    if (r == 0 && (v = cli_env(TETRIS_ENV_CONCURRENCY)) != NULL)
        r = cli_parse_int(TETRIS_ENV_CONCURRENCY, v, 1, 256, &o->batch.concurrency, err);
    if (r == 0 && (v = cli_env(TETRIS_ENV_THREADS)) != NULL)
        r = cli_parse_int(TETRIS_ENV_THREADS, v, 0, 256, &o->threads, err);
    if (r == 0 && (v = cli_env(TETRIS_ENV_MAX_WAIT_MS)) != NULL)
        r = cli_parse_double(TETRIS_ENV_MAX_WAIT_MS, v, 0, 60000, &o->batch.max_wait_ms, err);
    if (r == 0 && (v = cli_env(TETRIS_ENV_DYNAMIC_DIM)) != NULL)
        r = cli_parse_i64(TETRIS_ENV_DYNAMIC_DIM, v, 1, 1 << 20, &o->dynamic_dim, err);
    if (r == 0 && (v = cli_env(TETRIS_ENV_MAX_BODY_BYTES)) != NULL)
        r = cli_parse_u64(TETRIS_ENV_MAX_BODY_BYTES, v, SEED_BODY_MAX_BYTES, MAX_BODY_BYTES_LIMIT,
                          &o->max_body_bytes, err);
    return r;
}

/* A name or version that can be one segment of a /v2 path (NULL: unset). */
static bool path_segment_valid(const char *s)
{
    size_t len = s != NULL ? strlen(s) : 1;
    if (len == 0 || len > 255)
        return false;
    for (size_t i = 0; s != NULL && i < len; i++)
        if (s[i] == '/' || (unsigned char)s[i] <= ' ' || s[i] == 0x7f)
            return false;
    return true;
}

static int parse_args(int argc, char **argv, struct fn_options *o)
{
    static const struct option longopts[] = {{"model", required_argument, NULL, 'm'},
                                             {"store", required_argument, NULL, 's'},
                                             {"direct", no_argument, NULL, 'D'},
                                             {"tenant", required_argument, NULL, 't'},
                                             {"manifest", required_argument, NULL, 'M'},
                                             {"private", no_argument, NULL, 'P'},
                                             {"listen", required_argument, NULL, 'l'},
                                             {"batch", required_argument, NULL, 'b'},
                                             {"concurrency", required_argument, NULL, 'p'},
                                             {"max-wait-ms", required_argument, NULL, 'w'},
                                             {"threads", required_argument, NULL, 'j'},
                                             {"dim", required_argument, NULL, 'd'},
                                             {"name", required_argument, NULL, 'n'},
                                             {"model-version", required_argument, NULL, 'v'},
                                             {"max-body-bytes", required_argument, NULL, 'B'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},
                                             {NULL, 0, NULL, 0}};
    bool private_given = false;
    tetris_error err = {0};
    int c;

    memset(o, 0, sizeof(*o));
    o->mode = AGENT_MODE_STORE;
    snprintf(o->listen, sizeof(o->listen), "%s", DEFAULT_LISTEN);
    o->batch.batch = 1;
    o->batch.concurrency = 1;
    o->batch.max_wait_ms = DEFAULT_MAX_WAIT_MS;
    o->threads = 1;
    o->dynamic_dim = ORT_INPUTS_DEFAULT_DYNAMIC_DIM;
    o->max_body_bytes = DEFAULT_MAX_BODY_BYTES;
    if (options_from_env(o, &err) < 0)
        goto bad_value;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'n': o->model_name = optarg; break;
        case 'v': o->model_version = optarg; break;
        case 'B':
            if (cli_parse_u64("--max-body-bytes", optarg, SEED_BODY_MAX_BYTES, MAX_BODY_BYTES_LIMIT,
                              &o->max_body_bytes, &err) < 0)
                goto bad_value;
            break;
        case 's': o->store_dir = optarg[0] != '\0' ? optarg : NULL; break;
        case 'D': o->mode = AGENT_MODE_DIRECT; break;
        case 't': o->tenant = optarg; break;
        case 'M': o->manifest = optarg; break;
        case 'P': private_given = true; break;
        case 'l': snprintf(o->listen, sizeof(o->listen), "%s", optarg); break;
        case 'b':
            if (cli_parse_int("--batch", optarg, 1, 1024, &o->batch.batch, &err) < 0)
                goto bad_value;
            break;
        case 'p':
            if (cli_parse_int("--concurrency", optarg, 1, 256, &o->batch.concurrency, &err) < 0)
                goto bad_value;
            break;
        case 'j':
            if (cli_parse_int("--threads", optarg, 0, 256, &o->threads, &err) < 0)
                goto bad_value;
            break;
        case 'w':
            if (cli_parse_double("--max-wait-ms", optarg, 0, 60000, &o->batch.max_wait_ms,
                                 &err) < 0)
                goto bad_value;
            break;
        case 'd':
            if (cli_parse_i64("--dim", optarg, 1, 1 << 20, &o->dynamic_dim, &err) < 0)
                goto bad_value;
            break;
        case 'h': usage(stdout); exit(EXIT_OK);
        case 'V': printf("tetris-function %s\n", TETRIS_VERSION); exit(EXIT_OK);
        default: goto usage_error;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "tetris-function: unexpected argument '%s'\n", argv[optind]);
        goto usage_error;
    }
    if (o->model == NULL) {
        fprintf(stderr, "tetris-function: no model: set " TETRIS_ENV_MODEL " or --model\n");
        goto usage_error;
    }
    if (private_given)
        o->store_dir = NULL;
    if (!path_segment_valid(o->model_name) || !path_segment_valid(o->model_version)) {
        fprintf(stderr, "tetris-function: a model name or version must be 1 to 255 bytes "
                        "without '/', control characters or spaces\n");
        goto usage_error;
    }
    return 0;
bad_value:
    fprintf(stderr, "tetris-function: %s\n", err.msg);
usage_error:
    fprintf(stderr, "Try 'tetris-function --help'.\n");
    return -1;
}

static const char *mode_name(const struct fn_options *o)
{
    return o->store_dir == NULL ? "private" : o->mode == AGENT_MODE_DIRECT ? "direct" : "store";
}

/* ---- HTTP ---- */

/* The request body: empty, or {"seed": N} with 0 <= N < 2^63. */
static int parse_body(const http_request *req, uint64_t *seed, tetris_error *err)
{
    json_t *j = NULL, *v;
    const char *key;
    size_t i = 0;
    int r = 0;

    *seed = DEFAULT_SEED;
    while (i < req->body_len && strchr(" \t\r\n", req->body[i]) != NULL)
        i++;
    if (i == req->body_len)
        return 0;
    if ((r = http_request_json(req, &j, err)) < 0)
        return r;
    if (!json_is_object(j))
        r = tetris_fail(err, TETRIS_E_FORMAT, 0, "body must be a JSON object like {\"seed\": 1}");
    json_object_foreach(j, key, v)
    {
        if (r < 0)
            break;
        if (strcmp(key, "seed") != 0)
            r = tetris_fail(err, TETRIS_E_FORMAT, 0, "unknown field \"%s\" (only \"seed\")",
                            key);
        else if (!json_is_integer(v) || json_integer_value(v) < 0)
            r = tetris_fail(err, TETRIS_E_FORMAT, 0,
                            "\"seed\" must be an integer in [0, 2^63)");
        else
            *seed = (uint64_t)json_integer_value(v);
    }
    json_decref(j);
    return r;
}

/* Wraps a reply's release so that the function learns when it was sent. */
struct reply_guard {
    struct fn *f;
    void (*release)(void *ctx);
    void *release_ctx;
};

void fn_reply_begin(struct fn *f)
{
    pthread_mutex_lock(&f->replies_lock);
    f->replies_pending++;
    pthread_mutex_unlock(&f->replies_lock);
}

static void reply_end(struct fn *f)
{
    pthread_mutex_lock(&f->replies_lock);
    f->replies_pending--;
    pthread_cond_broadcast(&f->replies_sent);
    pthread_mutex_unlock(&f->replies_lock);
}

static void reply_released(void *ctx)
{
    struct reply_guard *g = ctx;
    if (g->release != NULL)
        g->release(g->release_ctx);
    reply_end(g->f);
    free(g);
}

void fn_reply_guard(struct fn *f, http_response *resp)
{
    struct reply_guard *g = malloc(sizeof(*g));
    if (g == NULL) {
        reply_end(f); /* untracked: draining may cut this one reply short */
        return;
    }
    g->f = f;
    g->release = resp->release;
    g->release_ctx = resp->release_ctx;
    resp->release = reply_released;
    resp->release_ctx = g;
}

/* Waits until every inference reply has been sent, at most timeout_s. */
static void wait_replies_sent(struct fn *f, int timeout_s)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_s;
    pthread_mutex_lock(&f->replies_lock);
    while (f->replies_pending > 0 &&
           pthread_cond_timedwait(&f->replies_sent, &f->replies_lock, &deadline) == 0)
        ;
    if (f->replies_pending > 0)
        log_warn("event=drain-timeout unsent_replies=%u", f->replies_pending);
    pthread_mutex_unlock(&f->replies_lock);
}

static void handle_invoke(void *ctx, const http_request *req, http_response *resp)
{
    struct fn *f = ctx;
    fn_request r = {0};
    tetris_error err = {0};
    double start = clock_now_ms();
    int status;

    if (!atomic_load(&f->loaded)) {
        http_response_error(resp, 503, "the model is loading");
        return;
    }
    fn_reply_begin(f);
    fn_metrics_request_begin(f->metrics);
    if (req->body_len > SEED_BODY_MAX_BYTES) {
        status = 413;
        http_response_error(resp, status, "request body too large: POST / takes at most %d bytes",
                            SEED_BODY_MAX_BYTES);
    } else if (parse_body(req, &r.seed, &err) < 0) {
        status = 400;
        http_response_error(resp, status, "%s", err.msg);
    } else if (!f->io->seedable) {
        status = 400;
        http_response_error(resp, status,
                            "this model's inputs cannot be generated from a seed: send them "
                            "to /v2/models/%s/infer",
                            f->model_name);
    } else if (batcher_run(f->batcher, &r, &err) < 0) {
        status = 503;
        http_response_error(resp, status, "%s", err.msg);
    } else if (r.rc < 0) {
        status = 500;
        http_response_error(resp, status, "inference failed: %s", r.error);
    } else {
        status = 200;
        json_t *j = json_pack("{s:I, s:s, s:I, s:I, s:I, s:s, s:f, s:f, s:f}", "seed",
                              (json_int_t)r.seed, "sha256", r.sha256, "output_bytes",
                              (json_int_t)r.output_bytes, "batch_size", (json_int_t)r.batch_size,
                              "batch_id", (json_int_t)r.batch_id, "batching",
                              f->io->batchable ? "concat" : "sequential", "queue_ms", r.queue_ms,
                              "inference_ms", r.inference_ms, "latency_ms", clock_now_ms() - start);
        if (j == NULL || http_response_json(resp, status, j) < 0) {
            status = 500;
            http_response_error(resp, status, "out of memory");
        }
        json_decref(j);
    }
    fn_reply_guard(f, resp);
    fn_metrics_request_end(f->metrics, status, (clock_now_ms() - start) / 1e3);
}

/* of-watchdog's health path: the autoscaler's readiness probe, so not
 * before the model is loaded. */
static void handle_health(void *ctx, const http_request *req, http_response *resp)
{
    struct fn *f = ctx;
    (void)req;
    if (atomic_load(&f->loaded))
        http_response_set_body(resp, 200, "text/plain", "OK\n", 3);
    else
        http_response_set_body(resp, 503, "text/plain", "loading\n", 8);
}

static void handle_metrics(void *ctx, const http_request *req, http_response *resp)
{
    struct fn *f = ctx;
    size_t len = 0;
    (void)req;
    if (!atomic_load(&f->loaded)) {
        http_response_error(resp, 503, "the model is loading");
        return;
    }
    char *text = fn_metrics_render(f->metrics, &len);
    if (text == NULL)
        http_response_error(resp, 500, "out of memory");
    else
        http_response_take_body(resp, 200, "text/plain; version=0.0.4", text, len);
}

static int serve(struct fn *f, tetris_error *err)
{
    struct http_server_options ho;
    int r;

    http_server_options_init(&ho);
    ho.listen = f->o.listen;
    ho.max_body_bytes = (size_t)f->o.max_body_bytes;
    if ((r = http_server_new(&ho, &f->srv, err)) < 0)
        return r;
    if ((r = http_server_route(f->srv, "POST", "/", handle_invoke, f, err)) < 0 ||
        (r = http_server_route(f->srv, "GET", TETRIS_FUNCTION_HEALTH_PATH, handle_health, f, err)) <
            0 ||
        (r = http_server_route(f->srv, "GET", "/healthz", handle_health, f, err)) < 0 ||
        (r = http_server_route(f->srv, "GET", "/metrics", handle_metrics, f, err)) < 0 ||
        (r = fn_oip_routes(f, err)) < 0)
        return r;
    return http_server_start(f->srv, err);
}

/* ---- start-up and shutdown ---- */

static int load_model(struct fn *f, tetris_error *err)
{
    struct agent_options ao;
    struct ort_adapter_options oo;
    int r;

    if (f->o.store_dir != NULL) {
        agent_options_init(&ao);
        ao.mode = f->o.mode;
        ao.store_dir = f->o.store_dir;
        ao.tenant = f->o.tenant;
        ao.manifest_path = f->o.manifest;
        if ((r = agent_load(f->o.model, &ao, &f->am, err)) < 0)
            return r;
    }
    ort_adapter_options_init(&oo);
    oo.intra_op_threads = f->o.threads;
    if ((r = ort_model_open(f->o.model, f->am, &oo, &f->m, err)) < 0 ||
        (r = ort_io_describe(f->m, f->o.dynamic_dim, &f->io, err)) < 0 ||
        (r = oip_ort_signature(f->io, &f->sig, err)) < 0)
        return r;
    f->model_metadata = oip_response_model_metadata(f->model_name, f->o.model_version, f->sig,
                                                    &f->model_metadata_len);
    if (f->model_metadata == NULL)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "the model's name or its tensors' names are not UTF-8");
    return 0;
}

static int model_readable(const char *path, tetris_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_FORMAT, errno,
                           "cannot open %s", path);
    close(fd);
    return 0;
}

/* The model file's base name without ".onnx", unless named. */
static int name_model(struct fn *f, tetris_error *err)
{
    const char *base = strrchr(f->o.model, '/');
    base = base != NULL ? base + 1 : f->o.model;
    size_t len = strlen(base);
    if (f->o.model_name != NULL)
        f->model_name = strdup(f->o.model_name);
    else if (len > 5 && strcmp(base + len - 5, ".onnx") == 0)
        f->model_name = strndup(base, len - 5);
    else
        f->model_name = strdup(base[0] != '\0' ? base : "model");
    return f->model_name != NULL ? 0 : tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
}

static int print_ready(const struct fn *f, tetris_error *err)
{
    char listen[300];
    const char *colon = strrchr(f->o.listen, ':');
    size_t host_len = colon != NULL ? (size_t)(colon - f->o.listen) : 0;
    snprintf(listen, sizeof(listen), "%.*s:%u", (int)host_len, f->o.listen,
             (unsigned)http_server_port(f->srv));
    json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s, s:s, s:i, s:i, s:f, s:I, s:b, s:s}",
                          "event", "ready", "listen", listen, "port", (int)http_server_port(f->srv),
                          "model", f->o.model, "name", f->model_name, "mode", mode_name(&f->o),
                          "batching", f->io->batchable ? "concat" : "sequential", "batch",
                          f->o.batch.batch, "concurrency", f->o.batch.concurrency, "max_wait_ms",
                          f->o.batch.max_wait_ms, "shared_bytes", (json_int_t)f->m->shared_bytes,
                          "fell_back", f->am != NULL && f->am->stats.fell_back, "fallback_reason",
                          f->am != NULL ? f->am->stats.fallback_reason : "");
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    printf("%s\n", text);
    free(text);
    if (fflush(stdout) != 0 && errno != EPIPE)
        return tetris_fail(err, TETRIS_E_IO, errno, "stdout");
    return 0;
}

static int start(struct fn *f, tetris_error *err)
{
    struct fn_metrics_info mi;
    const char *base = strrchr(f->o.model, '/');
    int r;

    /* A missing model is said as such before anything else; then serving,
     * so that liveness answers while the model loads. */
    if ((r = model_readable(f->o.model, err)) < 0 || (r = name_model(f, err)) < 0 ||
        (r = serve(f, err)) < 0 || (r = load_model(f, err)) < 0)
        return r;
    mi.model = base != NULL ? base + 1 : f->o.model;
    mi.mode = mode_name(&f->o);
    mi.batching = f->io->batchable ? "concat" : "sequential";
    mi.shared_bytes = f->m->shared_bytes;
    if ((r = fn_metrics_new(&mi, &f->metrics, err)) < 0 ||
        (r = batcher_new(f->m, f->io, &f->o.batch, f->metrics, &f->batcher, err)) < 0)
        return r;
    atomic_store(&f->loaded, true);
    atomic_store(&f->ready, true);
    log_info("event=ready model=%s name=%s mode=%s batching=%s batch=%d concurrency=%d "
             "max_wait_ms=%g threads=%d port=%u shared_bytes=%llu max_body_bytes=%llu",
             f->o.model, LOG_Q(f->model_name), mi.mode, mi.batching, f->o.batch.batch,
             f->o.batch.concurrency, f->o.batch.max_wait_ms, f->o.threads,
             (unsigned)http_server_port(f->srv), (unsigned long long)f->m->shared_bytes,
             (unsigned long long)f->o.max_body_bytes);
    if (f->am != NULL && f->am->stats.fell_back)
        log_warn("event=private-fallback model=%s reason=%s", LOG_Q(f->o.model),
                 LOG_Q(f->am->stats.fallback_reason));
    return print_ready(f, err);
}

/* Draining order: partial batches stop waiting and new requests get 503,
 * the replies of everything accepted are sent, then the HTTP server and the
 * workers stop. */
static void stop(struct fn *f)
{
    atomic_store(&f->ready, false);
    if (f->batcher != NULL)
        batcher_drain(f->batcher);
    if (f->srv != NULL)
        wait_replies_sent(f, DRAIN_TIMEOUT_S);
    http_server_free(f->srv);
    batcher_free(f->batcher);
    fn_metrics_free(f->metrics);
    free(f->model_metadata);
    oip_ort_signature_free(f->sig);
    free(f->model_name);
    ort_io_free(f->io);
    ort_model_free(f->m);
    agent_model_free(f->am);
    pthread_cond_destroy(&f->replies_sent);
    pthread_mutex_destroy(&f->replies_lock);
}

static int exit_code_for(int r)
{
    return r == -TETRIS_E_FORMAT || r == -TETRIS_E_NOTFOUND ? EXIT_BAD_MODEL : EXIT_FAILURE_;
}

int main(int argc, char **argv)
{
    struct fn f = {0};
    tetris_error err = {0};
    sigset_t stop_signals;
    char quoted[1100];
    int r, sig = 0, rc = EXIT_OK;

    log_init(argv[0]);
    if (parse_args(argc, argv, &f.o) < 0)
        return EXIT_USAGE;
    pthread_mutex_init(&f.replies_lock, NULL);
    pthread_cond_init(&f.replies_sent, NULL);
    /* Blocked before any thread starts, so every thread inherits the mask
     * and only sigwait() below sees them. */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    if ((r = start(&f, &err)) < 0) {
        log_error("event=error model=%s code=%s msg=%s", f.o.model ? f.o.model : "",
                  tetris_code_name(r), log_quote(err.msg, quoted, sizeof(quoted)));
        rc = exit_code_for(r);
    } else {
        sigwait(&stop_signals, &sig);
        log_info("event=draining signal=%d", sig);
    }
    stop(&f);
    if (rc == EXIT_OK)
        log_info("event=stopped");
    return rc;
}
