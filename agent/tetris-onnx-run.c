/* tetris-onnx-run - run an ONNX model once (or N times) on deterministic
 * input through ONNX Runtime, with its weights mapped from the tensor store
 * or loaded privately, and print the SHA-256 of the output bytes. Equal
 * hashes in both modes show that sharing changes nothing the model
 * computes. With --oip-request it also writes those inputs as an Open
 * Inference Protocol request, so that any inference server can be sent the
 * same inputs and its outputs hashed the same way. Also the example of
 * using the agent and the ORT adapter. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agent/agent.h"
#include "common/cleanup.h"
#include "agent/hold.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/options.h"
#include "agent/ort_adapter.h"
#include "agent/ort_inputs.h"
#include "common/textbuf.h"
#include "protocol/names.h"
#include "protocol/oci.h"
#include "protocol/oip.h"

enum exit_code { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2, EXIT_BAD_INPUT = 3 };

struct run_options {
    const char *model;
    enum agent_mode mode;
    bool use_store; /* false: ORT loads the file itself (--private) */
    const char *store_dir;
    const char *tenant;
    const char *manifest;
    enum store_populate populate;
    uint64_t seed;
    int runs;
    int batch; /* requests per run, seeds seed, seed + 1, ... */
    int64_t dynamic_dim;
    bool hold;
    const char *oip_request; /* write the inputs here as an inference request */
    bool oip_request_failed; /* writing it failed (exit 1, not a bad model) */
    struct ort_adapter_options ort;
};

/* How long the runs took: the mean of all, and the first alone (it pays
 * the page faults of whatever the session maps and has not touched). */
static const char about[] =
    "Runs MODEL (ONNX) through ONNX Runtime on inputs built from its input\n"
    "metadata and a seeded PRNG, and prints one JSON object with the SHA-256 of\n"
    "all output bytes (outputs in model order, raw little-endian). MODEL may be\n"
    "oci://HOST:PORT/REPO[:TAG|@sha256:HEX]: the node daemon pulls it into the store.\n";

static const char epilogue[] =
    "Inputs: float types uniform in [-1, 1), integer types uniform in [0, 16),\n"
    "bool 0/1, from splitmix64(seed) in input order.\n"
    "sha256: SHA-256 over the outputs' bytes concatenated in the model's output\n"
    "order, each output's elements row-major, little-endian, without padding\n"
    "(what any client can compute from an inference response).\n"
    "\n"
    "Exit status: 0 ok, 1 runtime failure or non-deterministic output,\n"
    "2 usage, 3 bad model file.\n";

/* What the command line sets beyond struct run_options' own fields. */
struct run_args {
    const char *store_dir; /* --store, NULL when not given */
    bool direct, private_;
};

static int parse_graph_opt(const struct opt_spec *spec, const char *label, const char *value,
                           tetris_error *err)
{
    (void)label;
    return ort_parse_graph_optimization(value, spec->dest, err);
}

static void options_init(struct run_options *o)
{
    memset(o, 0, sizeof(*o));
    o->mode = AGENT_MODE_STORE;
    o->use_store = true;
    o->store_dir = STORE_DEFAULT_DIR;
    o->seed = 1;
    o->runs = 1;
    o->batch = 1;
    o->populate = AGENT_POPULATE_DEFAULT;
    o->dynamic_dim = ORT_INPUTS_DEFAULT_DYNAMIC_DIM;
    ort_adapter_options_init(&o->ort);
    o->ort.intra_op_threads = 1;
}

/* The options, checked together: one MODEL, --private alone. Returns -1
 * after a usage error. */
static int parse_args(int argc, char **argv, struct run_options *o)
{
    struct run_args a = {0};
    const struct opt_spec options[] = {
        {.name = "store",
         .type = OPT_TYPE_STRING,
         .dest = &a.store_dir,
         .meta = "DIR",
         .help = "map weights from the tensor store at DIR (default mode, DIR defaults "
                 "to " STORE_DEFAULT_DIR "); missing tensors are ingested by the node daemon, or a "
                 "private load is used if it is absent"},
        {.name = "direct",
         .type = OPT_TYPE_FLAG,
         .dest = &a.direct,
         .help = "ingest missing tensors into the store ourselves"},
        {.name = "tenant",
         .type = OPT_TYPE_STRING,
         .dest = &o->tenant,
         .meta = "T",
         .help = "use the dedicated store of tenant T"},
        {.name = "manifest",
         .type = OPT_TYPE_STRING,
         .dest = &o->manifest,
         .meta = "M",
         .help = "take tensor identities from manifest M (skip hashing)"},
        {.name = "private",
         .type = OPT_TYPE_FLAG,
         .dest = &a.private_,
         .help = "no store: ONNX Runtime loads the file (the baseline)"},
        {.name = "seed",
         .type = OPT_TYPE_U64,
         .dest = &o->seed,
         .umin = 0,
         .umax = INT64_MAX,
         .meta = "N",
         .help = "PRNG seed for the inputs (default 1)"},
        {.name = "runs",
         .type = OPT_TYPE_INT,
         .dest = &o->runs,
         .min = 1,
         .max = 1000000,
         .meta = "N",
         .help = "run N times; every run must give the same hash (default 1)"},
        {.name = "threads",
         .type = OPT_TYPE_INT,
         .dest = &o->ort.intra_op_threads,
         .min = 0,
         .max = 1024,
         .meta = "N",
         .help = "ONNX Runtime intra-op threads (default 1; 0 = one per core)"},
        {.name = "graph-opt",
         .type = OPT_TYPE_CUSTOM,
         .dest = &o->ort.graph_optimization,
         .parse = parse_graph_opt,
         .meta = "L",
         .help = "none|basic|extended|all (default none: fusions would fold shared weights into "
                 "private copies)"},
        {.name = "prepack",
         .type = OPT_TYPE_FLAG,
         .dest = &o->ort.prepack,
         .help = "let ONNX Runtime pre-pack weights (private copies)"},
        {.name = "save-optimized",
         .type = OPT_TYPE_STRING,
         .dest = &o->ort.save_optimized,
         .meta = "OUT",
         .help = "also write the optimised graph and its weights to OUT (ONNX): optimise once "
                 "at registration with --graph-opt all, then share OUT's fused weights"},
        {.name = "derived",
         .type = OPT_TYPE_CUSTOM,
         .dest = &o->ort.derived,
         .parse = ort_derived_option,
         .env = TETRIS_ENV_DERIVED,
         .meta = "MODE",
         .help = "the store's derived form (optimised graph, pre-packed weights made once per "
                 "node by the daemon): off (default); auto: use it when there is one for this "
                 "runtime and CPU, and without one ask the daemon for it in the background "
                 "once the session is open; use: use it, never ask; make: use it, and "
                 "without one ask the daemon after the session is open and wait"},
        {.name = "batch",
         .type = OPT_TYPE_INT,
         .dest = &o->batch,
         .min = 1,
         .max = 1024,
         .meta = "N",
         .help = "run N requests at once (seeds N, N+1, ...), concatenated along the batch "
                 "dimension: a model whose inputs and outputs all have a dynamic first one "
                 "(default 1)"},
        {.name = "dim",
         .type = OPT_TYPE_I64,
         .dest = &o->dynamic_dim,
         .min = 1,
         .max = 1 << 20,
         .meta = "N",
         .help = "size of an input's dynamic dimensions after its first one (the batch, or the "
                 "batch of a state tensor: always 1); default " TETRIS_STRINGIFY(
                     ORT_INPUTS_DEFAULT_DYNAMIC_DIM)},
        {.name = "populate",
         .type = OPT_TYPE_CUSTOM,
         .dest = &o->populate,
         .parse = agent_populate_option,
         .meta = "P",
         .help = "none|map|madvise: how the store's mappings get their page tables (default "
                 "madvise: at load, not in the first run)"},
        {.name = "hold",
         .type = OPT_TYPE_FLAG,
         .dest = &o->hold,
         .help = "after printing, keep the session until stdin closes or SIGTERM"},
        {.name = "oip-request",
         .type = OPT_TYPE_STRING,
         .dest = &o->oip_request,
         .meta = "FILE",
         .help = "also write the inputs as an Open Inference Protocol (KServe V2) infer "
                 "request, JSON, to FILE (not stdout: the result goes there)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-onnx-run",
        .synopsis = "MODEL [--store DIR [--direct] [--tenant T] [--manifest M]\n"
                    "       | --private] [--seed N] [--runs N] [--batch N] [--threads N]\n"
                    "      [--graph-opt LEVEL] [--prepack] [--save-optimized OUT]\n"
                    "      [--dim N] [--hold] [--oip-request FILE]",
        .about = about,
        .options = options,
        .epilogue = epilogue,
    };
    int first;

    options_init(o);
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return -1;
    if (first != argc - 1)
        return opt_usage_error(&prog, "expected exactly one MODEL");
    if (a.private_ && (a.store_dir != NULL || a.direct || o->tenant != NULL || o->manifest != NULL))
        return opt_usage_error(&prog, "--private excludes --store, --direct, --tenant, --manifest");
    if (oci_ref_is(argv[first]) && (a.private_ || a.direct || o->manifest != NULL))
        return opt_usage_error(&prog, "a MODEL oci://... is pulled by the node daemon: not with "
                                      "--private, --direct or --manifest");
    if (o->oip_request != NULL && strcmp(o->oip_request, "-") == 0)
        return opt_usage_error(&prog, "--oip-request needs a file (stdout carries the result)");
    if (o->oip_request != NULL && o->batch > 1)
        return opt_usage_error(&prog, "--oip-request writes one request: not with --batch");
    if (a.store_dir != NULL)
        o->store_dir = a.store_dir;
    if (a.direct)
        o->mode = AGENT_MODE_DIRECT;
    o->use_store = !a.private_;
    o->model = argv[first];
    return 0;
}

/* Runs once and hashes every output's bytes, in output order. */
static int print_result(const struct run_options *o, const agent_model *am, const ort_model *m,
                        const ort_io *io, const char *hex, uint64_t out_bytes, double load_ms,
                        double session_ms, const struct ort_run_times *times, tetris_error *err)
{
    const char *mode = !o->use_store ? "private" : o->mode == AGENT_MODE_DIRECT ? "direct" : "store";
    json_t *j = json_pack("{s:s, s:s, s:I, s:i, s:i, s:I, s:I, s:I, s:s, s:f, s:f, s:f, s:f, s:I, "
                          "s:I, s:I, s:I, s:b, s:b}",
                          "model", o->model, "mode", mode, "seed", (json_int_t)o->seed, "runs",
                          o->runs, "batch", o->batch, "inputs", (json_int_t)io->n_in, "outputs",
                          (json_int_t)io->n_out, "output_bytes", (json_int_t)out_bytes, "sha256",
                          hex, "load_ms", load_ms, "session_ms", session_ms, "run_ms",
                          times->mean_ms, "first_run_ms", times->first_ms, "shared_tensors",
                          (json_int_t)m->shared_tensors, "shared_bytes",
                          (json_int_t)m->shared_bytes, "inline_tensors",
                          (json_int_t)m->inline_tensors, "inline_bytes",
                          (json_int_t)m->inline_bytes, "derived", m->derived, "derived_ort",
                          m->derived_ort);
    if (j != NULL && am != NULL) {
        /* private_bytes: the model's bytes the store does not serve, which
         * the session holds from the model file (the agent copies none). */
        json_t *s = json_pack("{s:I, s:I, s:I, s:I, s:I, s:b, s:s}", "tensors",
                              (json_int_t)am->stats.tensors, "bytes",
                              (json_int_t)am->stats.bytes, "mapped_bytes",
                              (json_int_t)am->stats.mapped_bytes, "ingested_bytes",
                              (json_int_t)am->stats.ingested_bytes, "private_bytes",
                              (json_int_t)(am->stats.bytes - am->stats.mapped_bytes), "fell_back",
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
               : EXIT_FAILED;
}

/* The seeded inputs as an inference request: {"id", "inputs": [...]} with
 * each input's data in its JSON form (protocol/oip.h). */
static int write_oip_request(struct run_options *o, const ort_model *m, const ort_io *io,
                             OrtValue *const *inputs, tetris_error *err)
{
    textbuf t = {0};
    int r = 0;
    textbuf_printf(&t, "{\"id\":\"seed-%llu\",\"inputs\":[", (unsigned long long)o->seed);
    for (size_t i = 0; r == 0 && i < io->n_in; i++) {
        const struct ort_input_desc *d = &io->in[i];
        oip_tensor x = {.name = io->in_names[i],
                        .datatype = oip_datatype_from_onnx((int)d->type),
                        .ndim = d->ndim,
                        .count = d->sample_elements};
        memcpy(x.shape, d->dims, sizeof(x.shape));
        x.data_bytes = x.count * oip_datatype_size(x.datatype);
        r = ort_check(m->api, m->api->GetTensorMutableData(inputs[i], (void **)&x.data),
                      "input data", err);
        if (r == 0 && x.datatype == OIP_DATATYPE_NONE)
            r = tetris_fail(err, TETRIS_E_FORMAT, 0,
                            "input %s: element type %d has no protocol "
                            "datatype",
                            x.name, (int)d->type);
        if (r == 0) {
            textbuf_puts(&t, i > 0 ? "," : "");
            r = oip_write_tensor(&t, &x, false, err);
        }
    }
    textbuf_puts(&t, "]}\n");
    size_t len;
    char *text = textbuf_take(&t, &len);
    if (r == 0 && text == NULL)
        r = tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory for the request");
    FILE *f = r == 0 ? fopen(o->oip_request, "w") : NULL;
    if (r == 0 && f == NULL)
        r = tetris_fail(err, TETRIS_E_IO, errno, "cannot write %s", o->oip_request);
    if (f != NULL && (fwrite(text, 1, len, f) != len) + (fclose(f) != 0) > 0)
        r = tetris_fail(err, TETRIS_E_IO, errno, "cannot write %s", o->oip_request);
    free(text);
    o->oip_request_failed = r < 0;
    return r;
}

/* Prepares the inputs and runs o->runs times; every run must hash alike. */
static int run_all(struct run_options *o, const ort_model *m, const ort_io *io, char hex[65],
                   uint64_t *out_bytes, struct ort_run_times *times, tetris_error *err)
{
    cleanup_free OrtValue **inputs = calloc(io->n_in + 1, sizeof(*inputs));
    cleanup_free OrtValue **outputs = calloc(io->n_out + 1, sizeof(*outputs));
    int r;

    cleanup_free uint64_t *seeds = calloc((size_t)o->batch, sizeof(*seeds));
    if (inputs == NULL || outputs == NULL || seeds == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    for (int i = 0; i < o->batch; i++)
        seeds[i] = o->seed + (uint64_t)i;
    if (o->batch > 1 && !io->batchable)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "--batch %d: an input or output of the model has no dynamic first "
                           "dimension",
                           o->batch);
    if ((r = ort_inputs_make(m, io, seeds, (size_t)o->batch, inputs, err)) < 0)
        return r;
    if (o->oip_request != NULL && (r = write_oip_request(o, m, io, inputs, err)) < 0) {
        ort_values_release(m, inputs, io->n_in);
        return r;
    }
    r = ort_io_run_repeated(m, io, inputs, outputs, o->runs, hex, out_bytes, times, err);
    ort_values_release(m, outputs, io->n_out);
    ort_values_release(m, inputs, io->n_in);
    return r;
}

int main(int argc, char **argv)
{
    struct run_options o;
    struct agent_options ao;
    agent_model *am = NULL;
    ort_model *m = NULL;
    ort_io *io = NULL;
    tetris_error err = {0};
    char hex[65] = "";
    uint64_t out_bytes = 0;
    double t0, load_ms = 0, session_ms;
    struct ort_run_times times = {0};
    int r = 0, rc = EXIT_OK;

    log_init(argv[0]);
    ort_telemetry_default_off();
    if (parse_args(argc, argv, &o) < 0)
        return EXIT_USAGE;

    t0 = clock_now_ms();
    if (o.use_store) {
        agent_options_init(&ao);
        ao.mode = o.mode;
        ao.store_dir = o.store_dir;
        ao.tenant = o.tenant;
        ao.manifest_path = o.manifest;
        ao.populate = o.populate;
        ao.map_only = true;
        if ((r = agent_load(o.model, &ao, &am, &err)) < 0)
            goto fail;
        load_ms = clock_now_ms() - t0;
    }
    if ((r = ort_model_open(o.model, am, &o.ort, &m, &err)) < 0)
        goto fail;
    session_ms = clock_now_ms() - t0 - load_ms;
    if ((r = ort_io_describe(m, o.dynamic_dim, &io, &err)) < 0 ||
        (r = run_all(&o, m, io, hex, &out_bytes, &times, &err)) < 0 ||
        (r = print_result(&o, am, m, io, hex, out_bytes, load_ms, session_ms, &times, &err)) < 0)
        goto fail;
    fflush(stdout);
    if (o.hold)
        hold_until_released();
    goto done;
fail:
    log_error("event=error model=%s code=%s msg=%s", o.model, tetris_code_name(r), LOG_Q(err.msg));
    rc = o.oip_request_failed ? EXIT_FAILED : exit_code_for(r);
done:
    ort_io_free(io);
    ort_model_free(m);
    agent_model_free(am);
    return rc;
}
