/* tetris-bench-ort-format.c - ONNX Runtime's own ORT model format as a
 * start path, against the ONNX file at ONNX Runtime's defaults: one start
 * per process (bench/ort-format/run.sh runs one per mode and round).
 *
 * Why: tetris optimises a graph once per node and opens the result with
 * optimisation off (its derived form, ONNX with external data in the
 * store). ONNX Runtime has a format of its own for exactly that, a
 * FlatBuffers file that a session can read in place from a buffer the
 * caller keeps (session.use_ort_model_bytes_directly) and whose
 * initializers it can use where they lie
 * (session.use_ort_model_bytes_for_initializers). Whether that starts
 * faster, and whether the bytes used in place are shared between
 * processes, has to be measured, which is what this program does for one
 * start.
 *
 * Two jobs:
 *   --make OUT MODEL   optimises the ONNX file MODEL at level `all` and
 *                      writes the result to OUT in the ORT format
 *                      (SetOptimizedModelFilePath, session.save_model_format
 *                      = ORT); --save-prepacked also asks for the pre-packed
 *                      weights in an external file, as tetris's derived form
 *                      has them; one JSON line says what was written
 *   --mode M FILE      one start: a session on FILE, then one inference on
 *                      seeded inputs (agent/ort_inputs.h, the inputs
 *                      tetris-onnx-run makes for the same --seed and --dim),
 *                      one JSON line with the times and the outputs' SHA-256
 * Modes:
 *   stock     FILE is ONNX; ONNX Runtime's defaults: optimisation `all`,
 *             pre-packing on
 *   ort       FILE is ORT format, mapped read-only MAP_SHARED by this
 *             program and handed over as the session's bytes, used
 *             directly and for initializers; optimisation off
 *   ort-copy  the same mapping, used directly, initializers copied out of it
 *   ort-mmap  ONNX Runtime maps FILE itself
 *             (session.use_memory_mapped_ort_model), initializers in place
 *   ort-noprepack  as ort, without pre-packing (session.disable_prepacking):
 *             what a start costs when the ORT format's weights are all the
 *             kernels read, since it cannot hold pre-packed ones
 * Pre-packing is on in every other mode (ONNX Runtime's default, and
 * tetris's for its derived form).
 *
 * Times: session_ms from before the environment is created to the session
 * being ready, the mapping included; first_run_ms the first Run and the
 * outputs' hash; with --runs N, run_ms the mean of all N (each run's
 * outputs must hash alike): tetris-onnx-run's definitions, so that its
 * JSON and this one's compare. --outputs writes the outputs' bytes (those
 * hashed) to a file and --against compares them with such a file, element
 * by element, for modes whose outputs are not stock's byte for byte (not
 * timed: run.sh does it in starts of its own).
 *
 * Exit status: 0 ok, 1 ONNX Runtime or a file failed, 2 usage. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/hold.h"
#include "agent/ort_adapter.h"
#include "agent/ort_inputs.h"
#include "common/cleanup.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/options.h"

enum exit_code { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };

enum start_mode {
    MODE_NONE,
    MODE_STOCK,
    MODE_ORT,
    MODE_ORT_COPY,
    MODE_ORT_MMAP,
    MODE_ORT_NOPREPACK
};

static const char *const mode_names[] = {
    [MODE_STOCK] = "stock",
    [MODE_ORT] = "ort",
    [MODE_ORT_COPY] = "ort-copy",
    [MODE_ORT_MMAP] = "ort-mmap",
    [MODE_ORT_NOPREPACK] = "ort-noprepack",
};

struct bench_options {
    const char *make_out; /* --make: write the ORT format here */
    bool save_prepacked;
    enum start_mode mode;
    const char *file;
    uint64_t seed;
    int64_t dim;
    int threads;
    int runs;
    bool hold;
    const char *outputs; /* --outputs: write the outputs' bytes here */
    const char *against; /* --against: compare the outputs with this file's */
};

/* What one start's inferences answered. */
struct answer {
    char sha256[65];
    uint64_t bytes;
    struct ort_run_times times;
    /* With --against: elements (all outputs) and those whose bytes differ
     * from the file's; the largest |difference| of a float output's. */
    uint64_t elements, elements_differ;
    double max_abs_diff;
};

/* The runtime and what a start holds, released in reverse. */
struct start {
    const OrtApi *api;
    OrtEnv *env;
    OrtSessionOptions *so;
    OrtSession *session;
    void *map; /* the ORT file's bytes (ort, ort-copy, ort-noprepack), MAP_FAILED: none */
    size_t map_len;
};

static const char about[] =
    "Measures ONNX Runtime's ORT model format as a start path, one start per\n"
    "process. With --make, optimises the ONNX file MODEL at level all and writes\n"
    "it to OUT in the ORT format. With --mode, opens FILE as the mode says, runs\n"
    "it on seeded inputs and prints one JSON line: session_ms, first_run_ms, run_ms\n"
    "and the SHA-256 of the outputs (tetris-onnx-run's inputs and hash).\n";

static const char epilogue[] =
    "Modes: stock (FILE is ONNX, optimisation all, pre-packing on: ONNX Runtime's\n"
    "defaults); ort (FILE is ORT format, mapped read-only and shared by this\n"
    "program, its bytes and initializers used in place, optimisation off); ort-copy\n"
    "(the same, initializers copied); ort-mmap (ONNX Runtime maps FILE itself,\n"
    "initializers in place); ort-noprepack (as ort, pre-packing off). Pre-packing\n"
    "is on in every other mode.\n"
    "\n"
    "Exit status: 0 ok, 1 ONNX Runtime or a file failed, 2 usage.\n";

static int parse_mode(const struct opt_spec *spec, const char *label, const char *value,
                      tetris_error *err)
{
    for (size_t i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++)
        if (mode_names[i] != NULL && strcmp(value, mode_names[i]) == 0) {
            *(enum start_mode *)spec->dest = (enum start_mode)i;
            return 0;
        }
    return tetris_fail(err, TETRIS_E_INVAL, 0,
                       "%s: '%s' is not a mode (stock, ort, ort-copy, ort-mmap, ort-noprepack)",
                       label, value);
}

/* The options, checked together: --make or --mode, one file. Returns -1
 * after a usage error. */
static int parse_args(int argc, char **argv, struct bench_options *o)
{
    const struct opt_spec options[] = {
        {.name = "make",
         .type = OPT_TYPE_STRING,
         .dest = &o->make_out,
         .meta = "OUT",
         .help = "optimise the ONNX file at level all and write it to OUT in the ORT format"},
        {.name = "save-prepacked",
         .type = OPT_TYPE_FLAG,
         .dest = &o->save_prepacked,
         .help = "with --make: also ask for the pre-packed weights, in OUT.data "
                 "(session.save_external_prepacked_constant_initializers)"},
        {.name = "mode",
         .type = OPT_TYPE_CUSTOM,
         .dest = &o->mode,
         .parse = parse_mode,
         .meta = "M",
         .help = "one start of FILE: stock, ort, ort-copy, ort-mmap or ort-noprepack"},
        {.name = "seed",
         .type = OPT_TYPE_U64,
         .dest = &o->seed,
         .umin = 0,
         .umax = INT64_MAX,
         .meta = "N",
         .help = "PRNG seed for the inputs (default 1, tetris-onnx-run's)"},
        {.name = "dim",
         .type = OPT_TYPE_I64,
         .dest = &o->dim,
         .min = 1,
         .max = 1 << 20,
         .meta = "N",
         .help = "size of an input's dynamic dimensions after its first one (default: "
                 "tetris-onnx-run's)"},
        {.name = "threads",
         .type = OPT_TYPE_INT,
         .dest = &o->threads,
         .min = 0,
         .max = 1024,
         .meta = "N",
         .help = "ONNX Runtime intra-op threads (default 1, tetris-onnx-run's; 0 = one per core)"},
        {.name = "runs",
         .type = OPT_TYPE_INT,
         .dest = &o->runs,
         .min = 1,
         .max = 1000000,
         .meta = "N",
         .help = "run N times; every run must give the same hash; run_ms is the mean "
                 "(default 1)"},
        {.name = "hold",
         .type = OPT_TYPE_FLAG,
         .dest = &o->hold,
         .help = "after printing, keep the session until stdin closes or SIGTERM"},
        {.name = "outputs",
         .type = OPT_TYPE_STRING,
         .dest = &o->outputs,
         .meta = "OUT",
         .help = "also write the outputs' bytes, in output order (what sha256 covers), to OUT"},
        {.name = "against",
         .type = OPT_TYPE_STRING,
         .dest = &o->against,
         .meta = "REF",
         .help = "compare the outputs with REF (another start's --outputs): elements, "
                 "elements_differ and max_abs_diff (float outputs) in the JSON"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-bench-ort-format",
        .synopsis = "--make OUT [--save-prepacked] MODEL\n"
                    "--mode stock|ort|ort-copy|ort-mmap|ort-noprepack [--seed N]\n"
                    "  [--dim N] [--threads N] [--runs N] [--hold] [--outputs OUT]\n"
                    "  [--against REF] FILE",
        .about = about,
        .options = options,
        .epilogue = epilogue,
    };
    int first;

    *o = (struct bench_options){.seed = 1,
                                .dim = ORT_INPUTS_DEFAULT_DYNAMIC_DIM,
                                .threads = 1,
                                .runs = 1};
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return -1;
    if (first != argc - 1)
        return opt_usage_error(&prog, "expected exactly one FILE");
    if ((o->make_out != NULL) == (o->mode != MODE_NONE))
        return opt_usage_error(&prog, "expected one of --make and --mode");
    if (o->save_prepacked && o->make_out == NULL)
        return opt_usage_error(&prog, "--save-prepacked goes with --make");
    if ((o->hold || o->outputs != NULL || o->against != NULL || o->runs > 1) &&
        o->mode == MODE_NONE)
        return opt_usage_error(&prog, "--runs, --hold, --outputs and --against go with --mode");
    o->file = argv[first];
    return 0;
}

/* Sets one session config entry. */
static int config(const struct start *s, const char *key, const char *value, tetris_error *err)
{
    return ort_check(s->api, s->api->AddSessionConfigEntry(s->so, key, value), key, err);
}

/* The environment and the options every start and --make share:
 * tetris-onnx-run's (one inter-op thread, its intra-op threads). ONNX
 * Runtime logs at log_level on stderr: a start logs nothing (FATAL, as
 * tetris-onnx-run), --make its warnings, which say what it would not
 * write. */
static int start_runtime(struct start *s, OrtLoggingLevel log_level, int threads,
                         GraphOptimizationLevel level, tetris_error *err)
{
    const OrtApi *api = s->api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
    if (api == NULL)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0,
                           "onnxruntime %s does not provide API version %d",
                           OrtGetApiBase()->GetVersionString(), ORT_API_VERSION);
    int r = ort_check(api, api->CreateEnv(log_level, "tetris", &s->env), "create the environment",
                      err);
    if (r == 0)
        r = ort_check(api, api->CreateSessionOptions(&s->so), "create session options", err);
    if (r == 0 && threads > 0)
        r = ort_check(api, api->SetIntraOpNumThreads(s->so, threads), "set intra-op threads", err);
    if (r == 0)
        r = ort_check(api, api->SetInterOpNumThreads(s->so, 1), "set inter-op threads", err);
    if (r == 0)
        r = ort_check(api, api->SetSessionGraphOptimizationLevel(s->so, level),
                      "set graph optimization", err);
    return r;
}

static void start_release(struct start *s)
{
    if (s->api == NULL)
        return;
    if (s->session != NULL)
        s->api->ReleaseSession(s->session);
    /* The session read the mapping until now. */
    if (s->map != MAP_FAILED && s->map != NULL)
        munmap(s->map, s->map_len);
    if (s->so != NULL)
        s->api->ReleaseSessionOptions(s->so);
    if (s->env != NULL)
        s->api->ReleaseEnv(s->env);
}

/* Maps path read-only and shared: the page cache's pages (on tmpfs, the
 * file's own), as every process that maps it sees them. */
static int map_file(struct start *s, const char *path, tetris_error *err)
{
    struct stat st;
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "cannot open %s", path);
    if (fstat(fd, &st) < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "cannot stat %s", path);
    if (st.st_size <= 0)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s is empty", path);
    s->map_len = (size_t)st.st_size;
    s->map = mmap(NULL, s->map_len, PROT_READ, MAP_SHARED, fd, 0);
    if (s->map == MAP_FAILED)
        return tetris_fail(err, TETRIS_E_IO, errno, "cannot map %s", path);
    return 0;
}

/* Opens the session of one start, as its mode says (the file's header). */
static int open_session(struct start *s, const struct bench_options *o, tetris_error *err)
{
    bool ort = o->mode != MODE_STOCK;
    int r = start_runtime(s, ORT_LOGGING_LEVEL_FATAL, o->threads,
                          ort ? ORT_DISABLE_ALL : ORT_ENABLE_ALL, err);
    const OrtApi *api = s->api;
    if (r < 0)
        return r;
    if (!ort)
        return ort_check(api, api->CreateSession(s->env, o->file, s->so, &s->session),
                         "create the session", err);
    r = config(s, "session.load_model_format", "ORT", err);
    if (r == 0 && o->mode == MODE_ORT_NOPREPACK)
        r = config(s, "session.disable_prepacking", "1", err);
    if (r == 0 && o->mode != MODE_ORT_COPY)
        r = config(s, "session.use_ort_model_bytes_for_initializers", "1", err);
    if (o->mode == MODE_ORT_MMAP) {
        if (r == 0)
            r = config(s, "session.use_memory_mapped_ort_model", "1", err);
        if (r == 0)
            r = ort_check(api, api->CreateSession(s->env, o->file, s->so, &s->session),
                          "create the session", err);
        return r;
    }
    if (r == 0)
        r = config(s, "session.use_ort_model_bytes_directly", "1", err);
    if (r == 0)
        r = map_file(s, o->file, err);
    if (r == 0)
        r = ort_check(api,
                      api->CreateSessionFromArray(s->env, s->map, s->map_len, s->so, &s->session),
                      "create the session", err);
    return r;
}

/* The outputs' bytes in output order, into one malloc'd buffer; spans[i]
 * gets output i's length and element count. */
struct span {
    size_t len, count;
};

static int outputs_gather(const OrtApi *api, const ort_io *io, OrtValue *const *outputs,
                          uint8_t **buf, size_t *total, struct span *spans, tetris_error *err)
{
    *total = 0;
    for (size_t i = 0; i < io->n_out; i++) {
        OrtTensorTypeAndShapeInfo *tsi = NULL;
        int r = ort_check(api, api->GetTensorSizeInBytes(outputs[i], &spans[i].len), "output size",
                          err);
        if (r == 0)
            r = ort_check(api, api->GetTensorTypeAndShape(outputs[i], &tsi), "output shape", err);
        if (r == 0)
            r = ort_check(api, api->GetTensorShapeElementCount(tsi, &spans[i].count),
                          "output elements", err);
        if (tsi != NULL)
            api->ReleaseTensorTypeAndShapeInfo(tsi);
        if (r < 0)
            return r;
        *total += spans[i].len;
    }
    if ((*buf = malloc(*total + 1)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory for the outputs");
    size_t off = 0;
    for (size_t i = 0; i < io->n_out; i++) {
        const void *data = NULL;
        int r = ort_check(api, api->GetTensorData(outputs[i], &data), "output data", err);
        if (r < 0)
            return r;
        memcpy(*buf + off, data, spans[i].len);
        off += spans[i].len;
    }
    return 0;
}

/* Compares the outputs (buf, spans) with the file ref: elements whose
 * bytes differ, and for float outputs the largest |difference| (a NaN on
 * either side is a differing element without a difference). */
static int outputs_compare(const ort_io *io, const uint8_t *buf, size_t total,
                           const struct span *spans, const char *ref, struct answer *a,
                           tetris_error *err)
{
    cleanup_free char *want = NULL;
    size_t want_len = 0;
    int r = file_read_all(ref, total + 1, &want, &want_len, err);
    if (r < 0)
        return r;
    if (want_len != total)
        return tetris_fail(err, TETRIS_E_FORMAT, 0, "%s has %zu bytes, the outputs %zu", ref,
                           want_len, total);
    size_t off = 0;
    for (size_t i = 0; i < io->n_out; off += spans[i].len, i++) {
        size_t esize = spans[i].count > 0 ? spans[i].len / spans[i].count : 0;
        bool is_float = io->out[i].type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
        a->elements += spans[i].count;
        for (size_t e = 0; e < spans[i].count; e++) {
            const uint8_t *got = buf + off + e * esize;
            const uint8_t *exp = (const uint8_t *)want + off + e * esize;
            if (memcmp(got, exp, esize) == 0)
                continue;
            a->elements_differ++;
            if (is_float) {
                float x, y;
                memcpy(&x, got, sizeof(x));
                memcpy(&y, exp, sizeof(y));
                double d = fabs((double)x - (double)y);
                if (d > a->max_abs_diff) /* false for a NaN: counted above only */
                    a->max_abs_diff = d;
            }
        }
    }
    return 0;
}

/* --outputs and --against on the outputs of the first inference. */
static int outputs_keep(const OrtApi *api, const ort_io *io, OrtValue *const *outputs,
                        const struct bench_options *o, struct answer *a, tetris_error *err)
{
    cleanup_free uint8_t *buf = NULL;
    cleanup_free struct span *spans = calloc(io->n_out + 1, sizeof(*spans));
    size_t total = 0;
    if (spans == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    int r = outputs_gather(api, io, outputs, &buf, &total, spans, err);
    if (r == 0 && o->outputs != NULL)
        r = file_replace(o->outputs, buf, total, 0644, err);
    if (r == 0 && o->against != NULL)
        r = outputs_compare(io, buf, total, spans, o->against, a, err);
    return r;
}

/* o->runs runs on the seeded inputs (ort_io_run_repeated, as tetris-onnx-run
 * runs them); a gets the first SHA-256 and the times. The view is
 * the session as agent/ort_inputs.h takes it: it reads only the API and
 * the session, so this start's own session serves. */
static int first_answer(const struct start *s, const struct bench_options *o, struct answer *a,
                        tetris_error *err)
{
    const ort_model view = {.api = s->api, .session = s->session};
    ort_io *io = NULL;
    int r = ort_io_describe(&view, o->dim, &io, err);
    if (r < 0)
        return r;
    OrtValue **inputs = calloc(io->n_in + 1, sizeof(*inputs));
    OrtValue **outputs = calloc(io->n_out + 1, sizeof(*outputs));
    if (inputs == NULL || outputs == NULL)
        r = tetris_fail(err, TETRIS_E_NOMEM, 0, "out of memory");
    if (r == 0)
        r = ort_inputs_make(&view, io, &o->seed, 1, inputs, err);
    if (r == 0)
        r = ort_io_run_repeated(&view, io, inputs, outputs, o->runs, a->sha256, &a->bytes,
                                &a->times, err);
    if (r == 0 && (o->outputs != NULL || o->against != NULL))
        r = outputs_keep(s->api, io, outputs, o, a, err);
    if (outputs != NULL)
        ort_values_release(&view, outputs, io->n_out);
    if (inputs != NULL)
        ort_values_release(&view, inputs, io->n_in);
    free(outputs);
    free(inputs);
    ort_io_free(io);
    return r;
}

/* Whether path lies on a tmpfs: where tetris's store is, and where the
 * ORT file must be for its pages to be the file's own. */
static bool on_tmpfs(const char *path)
{
    struct statfs fs;
    return statfs(path, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

static off_t file_bytes(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

static int print_json(json_t *j, tetris_error *err)
{
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, 0, "cannot format the result");
    printf("%s\n", text);
    free(text);
    return fflush(stdout) == 0 ? 0 : tetris_fail(err, TETRIS_E_IO, errno, "cannot write stdout");
}

/* --make: the ORT format of MODEL at level `all`. ONNX Runtime writes it
 * while it creates the session; with --save-prepacked it is asked for the
 * pre-packed weights in OUT.data, and the line says whether it wrote one
 * (ONNX Runtime's own warning on stderr says why not). */
static int make_ort(const struct bench_options *o, tetris_error *err)
{
    struct start s = {.map = MAP_FAILED};
    char data[4096];
    const char *base = strrchr(o->make_out, '/');
    base = base != NULL ? base + 1 : o->make_out;
    if ((size_t)snprintf(data, sizeof(data), "%s.data", o->make_out) >= sizeof(data))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--make: path too long");
    char data_name[512];
    if ((size_t)snprintf(data_name, sizeof(data_name), "%s.data", base) >= sizeof(data_name))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--make: name too long");
    if (unlink(data) < 0 && errno != ENOENT)
        return tetris_fail(err, TETRIS_E_IO, errno, "cannot remove %s", data);

    double t0 = clock_now_ms();
    int r = start_runtime(&s, ORT_LOGGING_LEVEL_WARNING, o->threads, ORT_ENABLE_ALL, err);
    if (r == 0)
        r = ort_check(s.api, s.api->SetOptimizedModelFilePath(s.so, o->make_out),
                      "set the optimised model path", err);
    if (r == 0)
        r = config(&s, "session.save_model_format", "ORT", err);
    if (r == 0 && o->save_prepacked)
        r = config(&s, "session.optimized_model_external_initializers_file_name", data_name, err);
    if (r == 0 && o->save_prepacked)
        r = config(&s, "session.save_external_prepacked_constant_initializers", "1", err);
    if (r == 0)
        r = ort_check(s.api, s.api->CreateSession(s.env, o->file, s.so, &s.session),
                      "optimise and save", err);
    double make_ms = clock_now_ms() - t0;
    start_release(&s);
    if (r < 0)
        return r;
    off_t out = file_bytes(o->make_out), extra = file_bytes(data);
    if (out < 0)
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "ONNX Runtime wrote no %s", o->make_out);
    char runtime[64];
    ort_runtime_name(runtime, sizeof(runtime));
    return print_json(json_pack("{s:s, s:s, s:s, s:I, s:b, s:I, s:f}", "model", o->file, "ort",
                                o->make_out, "runtime", runtime, "bytes", (json_int_t)out,
                                "save_prepacked", o->save_prepacked, "data_bytes",
                                (json_int_t)(extra < 0 ? 0 : extra), "make_ms", make_ms),
                      err);
}

/* --mode: one start, timed as tetris-onnx-run times its own. */
static int one_start(const struct bench_options *o, tetris_error *err)
{
    struct start s = {.map = MAP_FAILED};
    struct answer a = {0};
    char runtime[64];

    if (o->hold)
        hold_block_signals();
    double t0 = clock_now_ms();
    int r = open_session(&s, o, err);
    double session_ms = clock_now_ms() - t0;
    if (r == 0)
        r = first_answer(&s, o, &a, err);
    json_t *j = NULL;
    if (r == 0) {
        ort_runtime_name(runtime, sizeof(runtime));
        j = json_pack("{s:s, s:s, s:s, s:I, s:b, s:I, s:i, s:i, s:f, s:f, s:f, s:f, s:s, s:I}",
                      "model", o->file, "mode", mode_names[o->mode], "runtime", runtime,
                      "file_bytes", (json_int_t)file_bytes(o->file), "tmpfs", on_tmpfs(o->file),
                      "seed", (json_int_t)o->seed, "threads", o->threads, "runs", o->runs,
                      "load_ms", 0.0, "session_ms", session_ms, "first_run_ms", a.times.first_ms,
                      "run_ms", a.times.mean_ms, "sha256", a.sha256, "output_bytes",
                      (json_int_t)a.bytes);
        if (j != NULL && o->against != NULL &&
            json_object_update_new(j,
                                   json_pack("{s:I, s:I, s:f}", "elements", (json_int_t)a.elements,
                                             "elements_differ", (json_int_t)a.elements_differ,
                                             "max_abs_diff", a.max_abs_diff)) < 0) {
            json_decref(j);
            j = NULL;
        }
        r = print_json(j, err);
    }
    if (r == 0 && o->hold)
        hold_until_released();
    start_release(&s);
    return r;
}

int main(int argc, char **argv)
{
    struct bench_options o;
    tetris_error err = {0};

    log_init(argv[0]);
    if (parse_args(argc, argv, &o) < 0)
        return EXIT_USAGE;
    int r = o.make_out != NULL ? make_ort(&o, &err) : one_start(&o, &err);
    if (r < 0) {
        log_error("event=error file=%s code=%s msg=%s", o.file, tetris_code_name(r),
                  LOG_Q(err.msg));
        return EXIT_FAILED;
    }
    return EXIT_OK;
}
