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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "function/function.h"
#include "agent/ort_adapter.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/daemon_run.h"
#include "common/httpserver.h"
#include "common/log.h"
#include "common/options.h"
#include "function/oip_ort.h"
#include "function/oip_response.h"
#include "protocol/names.h"
#include "protocol/oci.h"

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

/* ---- configuration: the environment, then options ---- */

static const char about[] =
    "Serves an ONNX model over HTTP like an OpenFaaS of-watchdog (HTTP mode)\n"
    "function, through the Open Inference Protocol (KServe V2 REST). Every\n"
    "option but --direct, --private and --listen has an environment variable;\n"
    "options win.\n";

static const char epilogue[] =
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
    "  POST /          body {\"seed\": N} (or empty: seed " TETRIS_STRINGIFY(
        DEFAULT_SEED) ").\n"
                      "                  Runs the model on inputs generated from the seed exactly "
                      "as\n"
                      "                  tetris-onnx-run --seed N does, and answers {\"seed\", "
                      "\"sha256\"\n"
                      "                  (of this request's output bytes), \"output_bytes\",\n"
                      "                  \"batch_size\", \"batch_id\", \"batching\", "
                      "\"queue_ms\",\n"
                      "                  \"inference_ms\", \"latency_ms\"}. A bad body is 400 "
                      "with\n"
                      "                  {\"error\": ...}.\n"
                      "  GET /_/health   200 once loaded (of-watchdog's health path); /healthz "
                      "too\n"
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
                      "listen, inference setup), 2 usage, 3 bad or missing model file.\n";

/* What the command line sets beyond struct fn_options' own fields. */
struct fn_args {
    const char *listen; /* NULL: the environment's port, else DEFAULT_LISTEN */
    bool direct, private_;
};

/* --store "" is no store, as an empty TETRIS_STORE. */
static int parse_store(const struct opt_spec *spec, const char *label, const char *value,
                       tetris_error *err)
{
    (void)label;
    (void)err;
    *(const char **)spec->dest = value[0] != '\0' ? value : NULL;
    return 0;
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

static void options_init(struct fn_options *o)
{
    const char *port;
    memset(o, 0, sizeof(*o));
    o->mode = AGENT_MODE_STORE;
    snprintf(o->listen, sizeof(o->listen), "%s", DEFAULT_LISTEN);
    if ((port = cli_env(TETRIS_ENV_WATCHDOG_PORT)) != NULL ||
        (port = cli_env(TETRIS_ENV_PORT)) != NULL)
        snprintf(o->listen, sizeof(o->listen), ":%s", port);
    o->batch.batch = 1;
    o->batch.concurrency = 1;
    o->batch.max_wait_ms = DEFAULT_MAX_WAIT_MS;
    o->threads = 1;
    o->dynamic_dim = ORT_INPUTS_DEFAULT_DYNAMIC_DIM;
    o->max_body_bytes = DEFAULT_MAX_BODY_BYTES;
}

/* The options, checked together: a model, a name and version fit for a
 * path. Returns -1 after a usage error. */
static int parse_args(int argc, char **argv, struct fn_options *o)
{
    struct fn_args a = {0};
    const struct opt_spec options[] = {
        {.name = "model",
         .type = OPT_TYPE_STRING,
         .dest = &o->model,
         .env = TETRIS_ENV_MODEL,
         .meta = "FILE",
         .help = "the ONNX model: a file, or a registry reference oci://... (this or "
                 "--model-ref is required)"},
        {.name = "model-ref",
         .type = OPT_TYPE_STRING,
         .dest = &o->model_ref,
         .env = TETRIS_ENV_MODEL_REF,
         .meta = "REF",
         .help = "the model's registry reference (oci://HOST:PORT/REPO[:TAG|@sha256:HEX]), "
                 "pulled by the node daemon into the store; a --model FILE is then used only "
                 "if the pull fails"},
        {.name = "model-view",
         .type = OPT_TYPE_STRING,
         .dest = &o->model_view,
         .env = TETRIS_ENV_MODEL_VIEW,
         .meta = "DIR",
         .help = "a model view the platform made (tetris-csi's volume, mounted by the webhook "
                 "at " TETRIS_MODEL_VIEW_MOUNT_DIR "): its graph is served, its weights the "
                 "store's pages; --model, --model-ref and --store are then not used"},
        {.name = "name",
         .type = OPT_TYPE_STRING,
         .dest = &o->model_name,
         .env = TETRIS_ENV_MODEL_NAME,
         .meta = "NAME",
         .help = "the model's name in /v2/models/NAME (default: FILE's base name without .onnx, "
                 "or the last component of REF's repository; with a view, its model's)"},
        {.name = "model-version",
         .type = OPT_TYPE_STRING,
         .dest = &o->model_version,
         .env = TETRIS_ENV_MODEL_VERSION,
         .meta = "V",
         .help = "its version (default: none)"},
        {.name = "store",
         .type = OPT_TYPE_CUSTOM,
         .dest = &o->store_dir,
         .parse = parse_store,
         .env = TETRIS_ENV_STORE,
         .meta = "DIR",
         .help = "map weights from the tensor store at DIR; missing tensors are ingested by the "
                 "node daemon, and a private load is used if the store cannot serve. Unset or "
                 "empty: private (ONNX Runtime loads the file)"},
        {.name = "direct",
         .type = OPT_TYPE_FLAG,
         .dest = &a.direct,
         .help = "ingest missing tensors into the store ourselves (no daemon)"},
        {.name = "tenant",
         .type = OPT_TYPE_STRING,
         .dest = &o->tenant,
         .env = TETRIS_ENV_TENANT,
         .meta = "T",
         .help = "the dedicated store of tenant T"},
        {.name = "manifest",
         .type = OPT_TYPE_STRING,
         .dest = &o->manifest,
         .env = TETRIS_ENV_MANIFEST,
         .meta = "M",
         .help = "tensor identities from manifest M"},
        {.name = "private",
         .type = OPT_TYPE_FLAG,
         .dest = &a.private_,
         .help = "no store, whatever " TETRIS_ENV_STORE " says"},
        {.name = "listen",
         .type = OPT_TYPE_STRING,
         .dest = &a.listen,
         .meta = "ADDR:PORT",
         .help = "where to listen; else \":$" TETRIS_ENV_WATCHDOG_PORT
                 "\" (OpenFaaS) or \":$" TETRIS_ENV_PORT "\" when set; default " DEFAULT_LISTEN
                 "; port 0 picks a free port"},
        {.name = "batch",
         .type = OPT_TYPE_INT,
         .dest = &o->batch.batch,
         .min = 1,
         .max = 1024,
         .env = TETRIS_ENV_BATCH,
         .meta = "B",
         .help = "most requests per batch (default 1)"},
        {.name = "concurrency",
         .type = OPT_TYPE_INT,
         .dest = &o->batch.concurrency,
         .min = 1,
         .max = 256,
         .env = TETRIS_ENV_CONCURRENCY,
         .meta = "P",
         .help = "inference worker threads (default 1)"},
        {.name = "max-wait-ms",
         .type = OPT_TYPE_DOUBLE,
         .dest = &o->batch.max_wait_ms,
         .dmin = 0,
         .dmax = 60000,
         .env = TETRIS_ENV_MAX_WAIT_MS,
         .meta = "MS",
         .help = "how long a partial batch waits for more requests (default 10)"},
        {.name = "threads",
         .type = OPT_TYPE_INT,
         .dest = &o->threads,
         .min = 0,
         .max = 256,
         .env = TETRIS_ENV_THREADS,
         .meta = "N",
         .help = "ONNX Runtime intra-op threads per run (default 1)"},
        {.name = "derived",
         .type = OPT_TYPE_CUSTOM,
         .dest = &o->derived,
         .parse = ort_derived_option,
         .env = TETRIS_ENV_DERIVED,
         .meta = "MODE",
         .help = "the store's derived form of the model (optimised graph and pre-packed "
                 "weights, made once per node by the daemon; its answers are stock ONNX "
                 "Runtime's at level all): off (default): the plain weights only; auto: use "
                 "it when there is one for this runtime and CPU, and without one ask the "
                 "daemon for it in the background once the session is open (no start waits) "
                 "and move to it between batches once it is made; use: use it, never ask; "
                 "make: ask and wait before serving"},
        {.name = "dim",
         .type = OPT_TYPE_I64,
         .dest = &o->dynamic_dim,
         .min = 1,
         .max = 1 << 20,
         .env = TETRIS_ENV_DYNAMIC_DIM,
         .meta = "N",
         .help = "size of dynamic input dimensions after the batch in seeded requests "
                 "(default " TETRIS_STRINGIFY(
                     ORT_INPUTS_DEFAULT_DYNAMIC_DIM) ", as tetris-onnx-run)"},
        {.name = "max-body-bytes",
         .type = OPT_TYPE_BYTES,
         .dest = &o->max_body_bytes,
         .umin = SEED_BODY_MAX_BYTES,
         .umax = MAX_BODY_BYTES_LIMIT,
         .env = TETRIS_ENV_MAX_BODY_BYTES,
         .meta = "N",
         .help = "largest request body, 4096 to 16Gi (default 64Mi = 67108864); a larger one is "
                 "413"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-function",
        .synopsis = "[--model FILE] [--model-ref REF] [--model-view DIR] [--name NAME]\n"
                    "[--model-version V]\n"
                    "[--store DIR [--direct] [--tenant T]\n"
                    "[--manifest M] | --private] [--listen ADDR:PORT]\n"
                    "[--batch B] [--concurrency P] [--max-wait-ms MS]\n"
                    "[--threads N] [--dim N] [--max-body-bytes N]",
        .about = about,
        .options = options,
        .epilogue = epilogue,
    };
    int first;

    options_init(o);
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return -1;
    if (first != argc)
        return opt_usage_error(&prog, "unexpected argument '%s'", argv[first]);
    /* --private is the baseline: the model file, whatever the platform
     * mounted. */
    if (a.private_ || (o->model_view != NULL && o->model_view[0] == '\0'))
        o->model_view = NULL;
    if (o->model_view != NULL) {
        if (a.direct)
            return opt_usage_error(&prog, "--direct needs the store, not a model view");
    } else if (o->model != NULL && oci_ref_is(o->model)) {
        /* The same reference twice (an image's TETRIS_MODEL_REF and a
         * deployment's TETRIS_MODEL) is one. */
        if (o->model_ref != NULL && strcmp(o->model_ref, o->model) != 0)
            return opt_usage_error(&prog, "two registry references: --model %s and --model-ref %s",
                                   o->model, o->model_ref);
        o->model_ref = o->model;
        o->model = NULL;
    }
    if (o->model_view == NULL && o->model == NULL && o->model_ref == NULL)
        return opt_usage_error(&prog, "no model: set " TETRIS_ENV_MODEL " or --model");
    tetris_error err = {0};
    oci_ref ref;
    if (o->model_ref != NULL && oci_ref_parse(o->model_ref, &ref, &err) < 0)
        return opt_usage_error(&prog, "%s", err.msg);
    if (o->model_view == NULL && o->model_ref != NULL && o->model == NULL &&
        (a.private_ || a.direct || o->store_dir == NULL))
        return opt_usage_error(&prog, "a model named by reference is pulled by the node daemon: "
                                      "it needs " TETRIS_ENV_STORE " (not --private or --direct), "
                                      "or a --model FILE to use instead");
    if (!path_segment_valid(o->model_name) || !path_segment_valid(o->model_version))
        return opt_usage_error(&prog, "a model name or version must be 1 to 255 bytes without "
                                      "'/', control characters or spaces");
    if (a.listen != NULL)
        snprintf(o->listen, sizeof(o->listen), "%s", a.listen);
    if (a.direct)
        o->mode = AGENT_MODE_DIRECT;
    if (a.private_)
        o->store_dir = NULL;
    return 0;
}

static const char *mode_name(const struct fn_options *o)
{
    return o->model_view != NULL          ? "view"
           : o->store_dir == NULL         ? "private"
           : o->mode == AGENT_MODE_DIRECT ? "direct"
                                          : "store";
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

static void handle_invoke(void *ctx, const http_request *req, http_response *resp)
{
    struct fn *f = ctx;
    fn_request r = {0};
    tetris_error err = {0};
    double start = clock_now_ms();
    int status;

    if (!fn_inference_begin(f, resp))
        return;
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
    fn_inference_end(f, resp, status, start);
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

/* Loads the model; *session_ms: the time ONNX Runtime's session took. */
static int load_model(struct fn *f, double *session_ms, tetris_error *err)
{
    struct agent_options ao;
    struct ort_adapter_options oo;
    int r;

    ort_adapter_options_init(&oo);
    oo.intra_op_threads = f->o.threads;
    f->model_path = f->o.model_ref != NULL ? f->o.model_ref : f->o.model;
    if (f->o.model_view != NULL) {
        double t0 = clock_now_ms();
        f->model_path = f->view.graph;
        r = fn_view_open(&f->view, &oo, &f->m, err);
        *session_ms = clock_now_ms() - t0;
        if (r < 0)
            return r;
    } else if (f->o.store_dir != NULL) {
        agent_options_init(&ao);
        ao.mode = f->o.mode;
        ao.store_dir = f->o.store_dir;
        ao.tenant = f->o.tenant;
        ao.manifest_path = f->o.manifest;
        ao.map_only = true;
        r = f->o.model_ref != NULL
                ? agent_load_ref(f->o.model_ref, f->o.model, &ao, &f->am, &f->model_path, err)
                : agent_load(f->o.model, &ao, &f->am, err);
        if (r < 0)
            return r;
    } else if (f->o.model_ref != NULL) {
        /* parse_args let a reference without a store through only with a file. */
        tetris_error why = {0};
        tetris_fail(&why, TETRIS_E_INVAL, 0, "no store to pull into (private)");
        agent_log_pull_fallback(f->o.model_ref, f->o.model, &why);
        f->model_path = f->o.model;
    }
    if (f->m == NULL) {
        oo.derived = f->o.derived;
        /* A server lives on: it moves to a form made after its start. */
        oo.upgrade = true;
        double t0 = clock_now_ms();
        r = ort_model_open(f->model_path, f->am, &oo, &f->m, err);
        *session_ms = clock_now_ms() - t0;
        if (r < 0)
            return r;
    }
    if ((r = ort_io_describe(f->m, f->o.dynamic_dim, &f->io, err)) < 0 ||
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

/* The model file's base name without ".onnx" (a view's: its original
 * model's), or the last component of the reference's repository (the
 * same whether or not the pull works), unless named. */
static int name_model(struct fn *f, tetris_error *err)
{
    oci_ref ref;
    const char *file = f->o.model_view != NULL ? f->view.model : f->o.model;
    if (f->o.model_name == NULL && f->o.model_ref != NULL && f->o.model_view == NULL) {
        if (oci_ref_parse(f->o.model_ref, &ref, err) < 0)
            return -err->code;
        const char *last = strrchr(ref.repo, '/');
        f->model_name = strdup(last != NULL ? last + 1 : ref.repo);
        return f->model_name != NULL ? 0 : tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    }
    const char *base = strrchr(file, '/');
    base = base != NULL ? base + 1 : file;
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
    json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s, s:s, s:i, s:i, s:f, s:I, s:b, s:s, s:b}",
                          "event", "ready", "listen", listen, "port", (int)http_server_port(f->srv),
                          "model", f->model_path, "name", f->model_name, "mode", mode_name(&f->o),
                          "batching", f->io->batchable ? "concat" : "sequential", "batch",
                          f->o.batch.batch, "concurrency", f->o.batch.concurrency, "max_wait_ms",
                          f->o.batch.max_wait_ms, "shared_bytes", (json_int_t)f->m->shared_bytes,
                          "fell_back", f->am != NULL && f->am->stats.fell_back, "fallback_reason",
                          f->am != NULL ? f->am->stats.fallback_reason : "", "derived",
                          f->m->derived);
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
    struct fn_metrics_info mi = {0};
    int r;

    /* A missing model (or a view not to trust) is said as such before
     * anything else (a file that is only the fallback of a reference may
     * be missing); then serving, so that liveness answers while the model
     * loads. */
    if ((f->o.model_view != NULL && (r = fn_view_read(f->o.model_view, &f->view, err)) < 0) ||
        (f->o.model_view == NULL && f->o.model_ref == NULL &&
         (r = model_readable(f->o.model, err)) < 0) ||
        (r = name_model(f, err)) < 0 || (r = serve(f, err)) < 0 ||
        (r = load_model(f, &mi.steps_ms.session, err)) < 0)
        return r;
    const char *base = strrchr(f->model_path, '/');
    mi.model = base != NULL ? base + 1 : f->model_path;
    mi.mode = mode_name(&f->o);
    mi.batching = f->io->batchable ? "concat" : "sequential";
    mi.shared_bytes = f->m->shared_bytes;
    mi.derived = f->m->derived;
    mi.started_ms = f->started_ms;
    mi.store = agent_store_result_name(f->am != NULL ? f->am->stats.store_result
                                                     : AGENT_STORE_NONE);
    if (f->am != NULL) {
        const struct agent_steps *s = &f->am->stats.steps;
        mi.steps_ms.read = s->read_ms;
        mi.steps_ms.store = s->store_ms;
        mi.steps_ms.digests = s->digests_ms;
        mi.steps_ms.connect = s->connect_ms;
        mi.steps_ms.register_ = s->register_ms;
        mi.steps_ms.watch = s->watch_ms;
        mi.steps_ms.map = s->map_ms;
        mi.steps_ms.private_ = s->private_ms;
    }
    if ((r = fn_metrics_new(&mi, &f->metrics, err)) < 0 ||
        (r = batcher_new(f->m, f->io, &f->o.batch, f->metrics, &f->batcher, err)) < 0)
        return r;
    fn_metrics_ready(f->metrics);
    atomic_store(&f->loaded, true);
    atomic_store(&f->ready, true);
    if ((r = fn_upgrade_start(f, err)) < 0)
        return r;
    log_info("event=ready model=%s name=%s mode=%s batching=%s batch=%d concurrency=%d "
             "max_wait_ms=%g threads=%d port=%u shared_bytes=%llu max_body_bytes=%llu "
             "store=%s derived=%d session_ms=%.3f start_ms=%.3f",
             LOG_Q(f->model_path), LOG_Q(f->model_name), mi.mode, mi.batching, f->o.batch.batch,
             f->o.batch.concurrency, f->o.batch.max_wait_ms, f->o.threads,
             (unsigned)http_server_port(f->srv), (unsigned long long)f->m->shared_bytes,
             (unsigned long long)f->o.max_body_bytes, mi.store, f->m->derived, mi.steps_ms.session,
             clock_now_ms() - f->started_ms);
    if (f->am != NULL && f->am->stats.fell_back)
        log_warn("event=private-fallback model=%s reason=%s", LOG_Q(f->model_path),
                 LOG_Q(f->am->stats.fallback_reason));
    return print_ready(f, err);
}

/* Draining order: partial batches stop waiting and new requests get 503,
 * the replies of everything accepted are sent, then the HTTP server and the
 * workers stop. */
static void stop(struct fn *f)
{
    atomic_store(&f->ready, false);
    fn_upgrade_stop(f);
    if (f->batcher != NULL)
        batcher_drain(f->batcher);
    if (f->srv != NULL)
        fn_wait_replies_sent(f, DRAIN_TIMEOUT_S);
    http_server_free(f->srv);
    batcher_free(f->batcher);
    fn_metrics_free(f->metrics);
    free(f->model_metadata);
    oip_ort_signature_free(f->sig);
    free(f->model_name);
    fn_view_free(&f->view);
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

/* daemon_run's steps. */
static int run_start(void *ctx, tetris_error *err)
{
    return start(ctx, err);
}

static void run_stop(void *ctx)
{
    stop(ctx);
}

static int run_start_failed(void *ctx, int r, const tetris_error *err)
{
    const struct fn *f = ctx;
    log_error("event=error model=%s code=%s msg=%s",
              LOG_Q(f->o.model_ref != NULL ? f->o.model_ref
                    : f->o.model != NULL   ? f->o.model
                                           : ""),
              tetris_code_name(r), LOG_Q(err->msg));
    return exit_code_for(r);
}

int main(int argc, char **argv)
{
    struct fn f = {.started_ms = clock_now_ms()};

    log_init(argv[0]);
    ort_telemetry_default_off();
    if (parse_args(argc, argv, &f.o) < 0)
        return EXIT_USAGE;
    pthread_mutex_init(&f.replies_lock, NULL);
    pthread_cond_init(&f.replies_sent, NULL);
    return daemon_run(&(struct daemon_run){.ctx = &f,
                                           .start = run_start,
                                           .stop = run_stop,
                                           .start_failed = run_start_failed,
                                           .stop_event = "draining"});
}
