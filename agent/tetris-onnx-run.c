/* tetris-onnx-run - run an ONNX model once (or N times) on deterministic
 * input through ONNX Runtime, with its weights mapped from the tensor store
 * or loaded privately, and print the SHA-256 of the output bytes. Equal
 * hashes in both modes show that sharing changes nothing the model
 * computes. Also the example of using the agent and the ORT adapter. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "agent.h"
#include "hold.h"
#include "log.h"
#include "ort_adapter.h"

#define DEFAULT_DYNAMIC_DIM 256 /* size given to dynamic non-batch dimensions */

enum exit_code { EXIT_OK = 0, EXIT_FAILURE_ = 1, EXIT_USAGE = 2, EXIT_BAD_INPUT = 3 };

struct run_options {
    const char *model;
    enum agent_mode mode;
    bool use_store; /* false: ORT loads the file itself (--private) */
    const char *store_dir;
    const char *tenant;
    const char *manifest;
    uint64_t seed;
    int runs;
    int64_t dynamic_dim;
    bool hold;
    struct ort_adapter_options ort;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tetris-onnx-run MODEL [--store DIR [--direct] [--tenant T] [--manifest M]\n"
            "                              | --private] [--seed N] [--runs N] [--threads N]\n"
            "                              [--graph-opt LEVEL] [--prepack] [--dim N] [--hold]\n"
            "\n"
            "Runs MODEL (ONNX) through ONNX Runtime on inputs built from its input\n"
            "metadata and a seeded PRNG, and prints one JSON object with the SHA-256 of\n"
            "all output bytes (outputs in model order, raw little-endian).\n"
            "\n"
            "  --store DIR      map weights from the tensor store at DIR (default mode,\n"
            "                   DIR defaults to %s); missing tensors are ingested\n"
            "                   by the node daemon, or a private load is used if it is absent\n"
            "  --direct         ingest missing tensors into the store ourselves\n"
            "  --tenant T       use the dedicated store of tenant T\n"
            "  --manifest M     take tensor identities from manifest M (skip hashing)\n"
            "  --private        no store: ONNX Runtime loads the file (the baseline)\n"
            "  --seed N         PRNG seed for the inputs (default 1)\n"
            "  --runs N         run N times; every run must give the same hash (default 1)\n"
            "  --threads N      ONNX Runtime intra-op threads (default 1; 0 = one per core)\n"
            "  --graph-opt L    none|basic|extended|all (default none: fusions would\n"
            "                   fold shared weights into private copies)\n"
            "  --prepack        let ONNX Runtime pre-pack weights (private copies)\n"
            "  --dim N          size of an input's dynamic dimensions after its first one\n"
            "                   (the batch, or the batch of a state tensor: always 1);\n"
            "                   default %d\n"
            "  --hold           after printing, keep the session until stdin closes or\n"
            "                   SIGTERM\n"
            "\n"
            "Inputs: float types uniform in [-1, 1), integer types uniform in [0, 16),\n"
            "bool 0/1, from splitmix64(seed) in input order.\n"
            "\n"
            "Exit status: 0 ok, 1 runtime failure or non-deterministic output,\n"
            "2 usage, 3 bad model file.\n",
            STORE_DEFAULT_DIR, DEFAULT_DYNAMIC_DIM);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int parse_int(const char *s, long long min, long long max, long long *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct run_options *o)
{
    static const struct option longopts[] = {
        {"store", required_argument, NULL, 's'},   {"direct", no_argument, NULL, 'D'},
        {"tenant", required_argument, NULL, 't'},  {"manifest", required_argument, NULL, 'm'},
        {"private", no_argument, NULL, 'P'},       {"seed", required_argument, NULL, 'S'},
        {"runs", required_argument, NULL, 'r'},    {"threads", required_argument, NULL, 'j'},
        {"graph-opt", required_argument, NULL, 'g'}, {"dim", required_argument, NULL, 'd'},
        {"hold", no_argument, NULL, 'H'},          {"prepack", no_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},       {NULL, 0, NULL, 0}};
    bool store_given = false, private_given = false;
    tetris_error err = {0};
    long long v;
    int c;

    memset(o, 0, sizeof(*o));
    o->mode = AGENT_MODE_STORE;
    o->use_store = true;
    o->store_dir = STORE_DEFAULT_DIR;
    o->seed = 1;
    o->runs = 1;
    o->dynamic_dim = DEFAULT_DYNAMIC_DIM;
    ort_adapter_options_init(&o->ort);
    o->ort.intra_op_threads = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 's': o->store_dir = optarg; store_given = true; break;
        case 'D': o->mode = AGENT_MODE_DIRECT; break;
        case 't': o->tenant = optarg; break;
        case 'm': o->manifest = optarg; break;
        case 'P': private_given = true; o->use_store = false; break;
        case 'H': o->hold = true; break;
        case 'K': o->ort.prepack = true; break;
        case 'S':
            if (parse_int(optarg, 0, INT64_MAX, &v) < 0)
                goto bad_number;
            o->seed = (uint64_t)v;
            break;
        case 'r':
            if (parse_int(optarg, 1, 1000000, &v) < 0)
                goto bad_number;
            o->runs = (int)v;
            break;
        case 'j':
            if (parse_int(optarg, 0, 1024, &v) < 0)
                goto bad_number;
            o->ort.intra_op_threads = (int)v;
            break;
        case 'd':
            if (parse_int(optarg, 1, 1 << 20, &v) < 0)
                goto bad_number;
            o->dynamic_dim = v;
            break;
        case 'g':
            if (ort_parse_graph_optimization(optarg, &o->ort.graph_optimization, &err) < 0) {
                fprintf(stderr, "tetris-onnx-run: %s\n", err.msg);
                return -1;
            }
            break;
        case 'h': usage(stdout); exit(EXIT_OK);
        case 'V': printf("tetris-onnx-run %s\n", TETRIS_VERSION); exit(EXIT_OK);
        default: goto usage_error;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "tetris-onnx-run: expected exactly one MODEL\n");
        goto usage_error;
    }
    if (private_given && (store_given || o->mode == AGENT_MODE_DIRECT || o->tenant || o->manifest)) {
        fprintf(stderr, "tetris-onnx-run: --private excludes --store, --direct, --tenant, --manifest\n");
        goto usage_error;
    }
    o->model = argv[optind];
    return 0;
bad_number:
    fprintf(stderr, "tetris-onnx-run: bad number '%s'\n", optarg);
usage_error:
    fprintf(stderr, "Try 'tetris-onnx-run --help'.\n");
    return -1;
}

/* ---- deterministic inputs ---- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, man = x & 0x7fffff;
    if (exp < 113) /* |f| < 2^-14: flush to zero, our values never need subnormals */
        return (uint16_t)sign;
    return (uint16_t)(sign | ((exp - 112) << 10) | (man >> 13));
}

/* Fills n elements of type t. Returns -1 for a type we cannot generate. */
static int fill_values(ONNXTensorElementDataType t, void *data, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(rng);
        double u = (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0; /* [-1, 1) */
        int64_t k = (int64_t)(r % 16);
        switch (t) {
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: ((float *)data)[i] = (float)u; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: ((double *)data)[i] = u; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
            ((uint16_t *)data)[i] = float_to_half((float)u);
            break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: {
            float f = (float)u;
            uint32_t x;
            memcpy(&x, &f, sizeof(x));
            ((uint16_t *)data)[i] = (uint16_t)(x >> 16);
            break;
        }
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: ((int64_t *)data)[i] = k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: ((uint64_t *)data)[i] = (uint64_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: ((int32_t *)data)[i] = (int32_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: ((uint32_t *)data)[i] = (uint32_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: ((int16_t *)data)[i] = (int16_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: ((uint16_t *)data)[i] = (uint16_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: ((int8_t *)data)[i] = (int8_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: ((uint8_t *)data)[i] = (uint8_t)k; break;
        case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: ((uint8_t *)data)[i] = (uint8_t)(r & 1); break;
        default: return -1;
        }
    }
    return 0;
}

struct io {
    size_t n_in, n_out;
    char **in_names, **out_names;
    OrtValue **inputs, **outputs;
    OrtAllocator *alloc;
};

static void io_free(const OrtApi *api, struct io *io)
{
    for (size_t i = 0; i < io->n_in; i++) {
        if (io->in_names != NULL && io->in_names[i] != NULL)
            ort_check(api, api->AllocatorFree(io->alloc, io->in_names[i]), "free", NULL);
        if (io->inputs != NULL && io->inputs[i] != NULL)
            api->ReleaseValue(io->inputs[i]);
    }
    for (size_t i = 0; i < io->n_out; i++) {
        if (io->out_names != NULL && io->out_names[i] != NULL)
            ort_check(api, api->AllocatorFree(io->alloc, io->out_names[i]), "free", NULL);
        if (io->outputs != NULL && io->outputs[i] != NULL)
            api->ReleaseValue(io->outputs[i]);
    }
    free(io->in_names);
    free(io->out_names);
    free(io->inputs);
    free(io->outputs);
}

/* Creates input i from the session's metadata. */
static int make_input(const ort_model *m, struct io *io, size_t i, const struct run_options *o,
                      uint64_t *rng, tetris_error *err)
{
    const OrtApi *api = m->api;
    OrtTypeInfo *ti = NULL;
    const OrtTensorTypeAndShapeInfo *tsi;
    enum ONNXType kind;
    ONNXTensorElementDataType et;
    int64_t dims[TENSOR_MAX_DIMS];
    size_t ndim = 0, count = 1;
    void *data;
    int r;

    r = ort_check(api, api->SessionGetInputTypeInfo(m->session, i, &ti), "input type", err);
    if (r == 0)
        r = ort_check(api, api->GetOnnxTypeFromTypeInfo(ti, &kind), "input kind", err);
    if (r == 0 && kind != ONNX_TYPE_TENSOR)
        r = tetris_fail(err, TETRIS_E_FORMAT, 0, "input %s is not a tensor", io->in_names[i]);
    if (r == 0)
        r = ort_check(api, api->CastTypeInfoToTensorInfo(ti, &tsi), "input tensor info", err);
    if (r == 0)
        r = ort_check(api, api->GetTensorElementType(tsi, &et), "input element type", err);
    if (r == 0)
        r = ort_check(api, api->GetDimensionsCount(tsi, &ndim), "input rank", err);
    if (r == 0 && ndim > TENSOR_MAX_DIMS)
        r = tetris_fail(err, TETRIS_E_FORMAT, 0, "input %s has rank %zu", io->in_names[i], ndim);
    if (r == 0)
        r = ort_check(api, api->GetDimensions(tsi, dims, ndim), "input dims", err);
    if (ti != NULL)
        api->ReleaseTypeInfo(ti);
    if (r < 0)
        return r;
    bool batch_seen = false;
    for (size_t d = 0; d < ndim; d++) {
        if (dims[d] < 0) {
            dims[d] = batch_seen ? o->dynamic_dim : 1;
            batch_seen = true;
        }
        count *= (size_t)dims[d];
    }
    r = ort_check(api, api->CreateTensorAsOrtValue(io->alloc, dims, ndim, et, &io->inputs[i]),
                  "create input", err);
    if (r == 0)
        r = ort_check(api, api->GetTensorMutableData(io->inputs[i], &data), "input data", err);
    if (r == 0 && fill_values(et, data, count, rng) < 0)
        r = tetris_fail(err, TETRIS_E_FORMAT, 0, "input %s: element type %d not supported",
                        io->in_names[i], (int)et);
    return r;
}

static int io_prepare(const ort_model *m, const struct run_options *o, struct io *io,
                      tetris_error *err)
{
    const OrtApi *api = m->api;
    uint64_t rng = o->seed;
    int r;

    memset(io, 0, sizeof(*io));
    r = ort_check(api, api->GetAllocatorWithDefaultOptions(&io->alloc), "allocator", err);
    if (r == 0)
        r = ort_check(api, api->SessionGetInputCount(m->session, &io->n_in), "inputs", err);
    if (r == 0)
        r = ort_check(api, api->SessionGetOutputCount(m->session, &io->n_out), "outputs", err);
    if (r < 0)
        return r;
    io->in_names = calloc(io->n_in + 1, sizeof(char *));
    io->inputs = calloc(io->n_in + 1, sizeof(OrtValue *));
    io->out_names = calloc(io->n_out + 1, sizeof(char *));
    io->outputs = calloc(io->n_out + 1, sizeof(OrtValue *));
    if (!io->in_names || !io->inputs || !io->out_names || !io->outputs)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    for (size_t i = 0; r == 0 && i < io->n_in; i++) {
        r = ort_check(api, api->SessionGetInputName(m->session, i, io->alloc, &io->in_names[i]),
                      "input name", err);
        if (r == 0)
            r = make_input(m, io, i, o, &rng, err);
    }
    for (size_t i = 0; r == 0 && i < io->n_out; i++)
        r = ort_check(api, api->SessionGetOutputName(m->session, i, io->alloc, &io->out_names[i]),
                      "output name", err);
    return r;
}

/* Runs once and hashes every output's bytes in order. */
static int run_once(const ort_model *m, struct io *io, char hex[65], uint64_t *out_bytes,
                    tetris_error *err)
{
    const OrtApi *api = m->api;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;
    int r;

    for (size_t i = 0; i < io->n_out; i++) {
        if (io->outputs[i] != NULL)
            api->ReleaseValue(io->outputs[i]);
        io->outputs[i] = NULL;
    }
    r = ort_check(api,
                  api->Run(m->session, NULL, (const char *const *)io->in_names,
                           (const OrtValue *const *)io->inputs, io->n_in,
                           (const char *const *)io->out_names, io->n_out, io->outputs),
                  "run", err);
    if (r < 0)
        return r;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "cannot set up SHA-256");
    }
    *out_bytes = 0;
    for (size_t i = 0; r == 0 && i < io->n_out; i++) {
        int is_tensor = 0;
        size_t size = 0;
        const void *data = NULL;
        r = ort_check(api, api->IsTensor(io->outputs[i], &is_tensor), "output kind", err);
        if (r == 0 && !is_tensor)
            r = tetris_fail(err, TETRIS_E_RUNTIME, 0, "output %s is not a tensor",
                            io->out_names[i]);
        if (r == 0)
            r = ort_check(api, api->GetTensorSizeInBytes(io->outputs[i], &size), "output size",
                          err);
        if (r == 0)
            r = ort_check(api, api->GetTensorData(io->outputs[i], &data), "output data", err);
        if (r == 0 && size > 0)
            EVP_DigestUpdate(ctx, data, size);
        *out_bytes += size;
    }
    if (r == 0)
        EVP_DigestFinal_ex(ctx, md, &md_len);
    EVP_MD_CTX_free(ctx);
    for (unsigned i = 0; i < md_len && r == 0; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return r;
}

static int print_result(const struct run_options *o, const agent_model *am, const ort_model *m,
                        const struct io *io, const char *hex, uint64_t out_bytes, double load_ms,
                        double session_ms, double run_ms, tetris_error *err)
{
    const char *mode = !o->use_store ? "private" : o->mode == AGENT_MODE_DIRECT ? "direct" : "store";
    json_t *j = json_pack("{s:s, s:s, s:I, s:i, s:I, s:I, s:I, s:s, s:f, s:f, s:f, s:I, s:I, "
                          "s:I, s:I}",
                          "model", o->model, "mode", mode, "seed", (json_int_t)o->seed,
                          "runs", o->runs, "inputs", (json_int_t)io->n_in,
                          "outputs", (json_int_t)io->n_out, "output_bytes", (json_int_t)out_bytes,
                          "sha256", hex, "load_ms", load_ms, "session_ms", session_ms,
                          "run_ms", run_ms, "shared_tensors", (json_int_t)m->shared_tensors,
                          "shared_bytes", (json_int_t)m->shared_bytes,
                          "inline_tensors", (json_int_t)m->inline_tensors,
                          "inline_bytes", (json_int_t)m->inline_bytes);
    if (j != NULL && am != NULL) {
        json_t *s = json_pack("{s:I, s:I, s:I, s:b, s:s}", "mapped_bytes",
                              (json_int_t)am->stats.mapped_bytes, "ingested_bytes",
                              (json_int_t)am->stats.ingested_bytes, "private_bytes",
                              (json_int_t)am->stats.private_bytes, "fell_back",
                              am->stats.fell_back, "fallback_reason", am->stats.fallback_reason);
        if (s == NULL || json_object_update(j, s) < 0) {
            json_decref(j);
            j = NULL;
        }
        json_decref(s);
    }
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "cannot format the result");
    printf("%s\n", text);
    free(text);
    return 0;
}

static int exit_code_for(int r)
{
    return r == -TETRIS_E_FORMAT || r == -TETRIS_E_NOTFOUND || r == -TETRIS_E_IO
               ? EXIT_BAD_INPUT
               : EXIT_FAILURE_;
}

int main(int argc, char **argv)
{
    struct run_options o;
    struct agent_options ao;
    agent_model *am = NULL;
    ort_model *m = NULL;
    struct io io = {0};
    tetris_error err = {0};
    char hex[65] = "", first[65] = "", quoted[1100];
    uint64_t out_bytes = 0;
    double t0, load_ms = 0, session_ms, run_ms = 0;
    int r = 0, rc = EXIT_OK;

    log_init(argv[0]);
    if (parse_args(argc, argv, &o) < 0)
        return EXIT_USAGE;

    t0 = now_ms();
    if (o.use_store) {
        agent_options_init(&ao);
        ao.mode = o.mode;
        ao.store_dir = o.store_dir;
        ao.tenant = o.tenant;
        ao.manifest_path = o.manifest;
        if ((r = agent_load(o.model, &ao, &am, &err)) < 0)
            goto fail;
        load_ms = now_ms() - t0;
    }
    if ((r = ort_model_open(o.model, am, &o.ort, &m, &err)) < 0)
        goto fail;
    session_ms = now_ms() - t0 - load_ms;
    if ((r = io_prepare(m, &o, &io, &err)) < 0)
        goto fail;
    for (int i = 0; i < o.runs; i++) {
        double t = now_ms();
        if ((r = run_once(m, &io, hex, &out_bytes, &err)) < 0)
            goto fail;
        run_ms += now_ms() - t;
        if (i == 0)
            memcpy(first, hex, sizeof(first));
        else if (strcmp(first, hex) != 0) {
            r = tetris_fail(&err, TETRIS_E_RUNTIME, 0, "run %d gave %s, run 1 gave %s", i + 1,
                            hex, first);
            goto fail;
        }
    }
    if ((r = print_result(&o, am, m, &io, hex, out_bytes, load_ms, session_ms,
                          run_ms / o.runs, &err)) < 0)
        goto fail;
    fflush(stdout);
    if (o.hold)
        hold_until_released();
    goto done;
fail:
    log_error("event=error model=%s code=%s msg=%s", o.model, tetris_code_name(r),
              log_quote(err.msg, quoted, sizeof(quoted)));
    rc = exit_code_for(r);
done:
    if (m != NULL)
        io_free(m->api, &io);
    ort_model_free(m);
    agent_model_free(am);
    return rc;
}
