/* tetris-agent - the agent's command line: index a model (manifest), load
 * it through the node's tensor store, verify a store, and inspect models
 * and stores. */
#include <errno.h>
#include <malloc.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/agent.h"
#include "tensorstore/gpu/gpu.h"
#include "agent/hold.h"
#include "agent/supervise.h"
#include "agent/view.h"
#include "common/log.h"
#include "common/options.h"
#include "model/manifest.h"
#include "protocol/names.h"
#include "protocol/oci.h"

enum exit_code {
    EXIT_OK = 0,
    EXIT_FAIL = 1,      /* verify found corrupt tensors; an operation failed */
    EXIT_USAGE = 2,
    EXIT_BAD_INPUT = 3, /* a model or manifest that is unreadable or malformed */
    EXIT_NO_STORE = 4,  /* the store given does not exist or is not a store */
};

static const char commands_text[] =
    "commands (COMMAND --help for each one's options):\n"
    "  index MODEL [-o MANIFEST]\n"
    "        parse MODEL (ONNX or safetensors), hash every tensor and write its\n"
    "        manifest as JSON to MANIFEST (default: stdout)\n"
    "  load [LOAD OPTIONS] [--hold] [--populate P] [--device cuda:N]\n"
    "       [--libcuda PATH] MODEL\n"
    "        map MODEL's tensors from the store (default " STORE_DEFAULT_DIR "); the\n"
    "        node daemon ingests missing ones (--direct: ingest them ourselves;\n"
    "        --private: no store, the baseline). Prints one JSON object as soon as\n"
    "        the model is loaded. MODEL may be oci://HOST:PORT/REPO[:TAG|@sha256:HEX]:\n"
    "        the node daemon pulls it (store mode only).\n"
    "  view [LOAD OPTIONS] MODEL DIR [--hold]\n"
    "        write MODEL's model view into DIR (new, or empty and ours): a\n"
    "        directory any runtime opens instead of MODEL to compute on the\n"
    "        store's pages (docs/PROTOCOLS.md, \"Model view\").\n"
    "  exec [LOAD OPTIONS] [--model MODEL] [--model-ref REF] [--view-dir DIR]\n"
    "       [--model-view DIR] -- CMD [ARGS...]\n"
    "        write the model view, run CMD with " TETRIS_ENV_MODEL_VIEW "=<view dir> in its\n"
    "        environment, hold the references while it runs, then remove the view\n"
    "        and exit with CMD's status. view and exec take a registry reference\n"
    "        as MODEL too (pulled by the node daemon). A view the platform gives\n"
    "        (--model-view, $" TETRIS_ENV_MODEL_VIEW ": tetris-csi's volume) is checked and\n"
    "        used as is: CMD replaces exec, nothing is loaded.\n"
    "  check-view [DIR]\n"
    "        check a model view (default $" TETRIS_ENV_MODEL_VIEW ") the way its reader must\n"
    "        before trusting it\n"
    "  verify [--store DIR] [--tenant T]\n"
    "        re-hash every stored tensor; list the ones that do not match\n"
    "  inspect MODEL | inspect [--store DIR] [--tenant T]\n"
    "        a model's tensors, or a store's tensors and holders, for humans\n"
    "\n"
    "LOAD OPTIONS (load, view, exec): --store, --tenant, --manifest, --direct,\n"
    "--private, --socket, --timeout-ms, --label, --workers, --digests.\n";

static const char exit_text[] =
    "Logs go to stderr as key=value lines (TETRIS_LOG_LEVEL=debug for more).\n"
    "Exit status: 0 ok; 1 failure (verify found corrupt tensors, a load failed, a\n"
    "view cannot be written: a --view-dir or DIR that is not empty or not ours);\n"
    "2 usage; 3 bad model or manifest (check-view, exec on a given view: a view not\n"
    "to trust); 4 no usable store at DIR. exec, once CMD started: CMD's status;\n"
    "126 CMD cannot be run, 127 CMD not found.\n";

struct cli {
    const char *store_dir;
    const char *tenant;
    const char *manifest;
    const char *output;
    const char *socket;
    const char *label;
    const char *device;
    const char *libcuda;
    int timeout_ms;
    int workers;
    enum agent_digests digests;
    enum store_populate populate;
    enum agent_mode mode; /* from direct and private_ */
    bool direct, private_;
    bool hold;
    const char *model;     /* --model */
    const char *model_ref; /* --model-ref */
    const char *view_dir; /* --view-dir */
    const char *given_view;   /* --model-view: a view the platform made */
    struct view_options view; /* --derived, --runtime */
    const char *arg;      /* the first operand, if any */
    const char *arg2;     /* the second (view: DIR) */
};

static const char *const mode_names[] = {"store", "direct", "private"};

/* What the command's options set: one command runs per process. */
static struct cli args;

static int parse_digests(const struct opt_spec *spec, const char *label, const char *value,
                         tetris_error *err)
{
    enum agent_digests *out = spec->dest;
    if (strcmp(value, "auto") == 0)
        *out = AGENT_DIGESTS_AUTO;
    else if (strcmp(value, "agent") == 0)
        *out = AGENT_DIGESTS_AGENT;
    else if (strcmp(value, "daemon") == 0)
        *out = AGENT_DIGESTS_DAEMON;
    else
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: want auto, agent or daemon, not '%s'",
                           label, value);
    return 0;
}

static int parse_view_derived(const struct opt_spec *spec, const char *label, const char *value,
                              tetris_error *err)
{
    return derived_mode_parse(label, value, spec->dest, err);
}

/* A view's derived form (view and exec): whether, and for which runtime. */
#define VIEW_OPTIONS(derived_env, runtime_env)                                                     \
    {.name = "derived",                                                                            \
     .type = OPT_TYPE_CUSTOM,                                                                      \
     .dest = &args.view.derived,                                                                   \
     .parse = parse_view_derived,                                                                  \
     .env = (derived_env),                                                                         \
     .meta = "off|use|auto|make",                                                                  \
     .help = "carry the store's derived form made by --runtime (optimised at all, pre-packed: "    \
             "stock ONNX Runtime's answers and speed) when there is one (use); ask the daemon "    \
             "for one in the background (auto) or wait for it (make) when there is none; default " \
             "off"},                                                                               \
    {                                                                                              \
        .name = "runtime", .type = OPT_TYPE_STRING, .dest = &args.view.runtime,                    \
        .env = (runtime_env), .meta = "\"onnxruntime VERSION\"",                                   \
        .help = "the runtime the view's reader runs (onnxruntime-node 1.22: \"onnxruntime "        \
                "1.22.0\"); only its forms are carried"                                            \
    }

/* The options of the store to use, and of how load, view and exec load a
 * model (LOAD OPTIONS); exec takes the store's from the environment. */
#define STORE_OPTION(env_)                                                                         \
    {                                                                                              \
        .name = "store", .type = OPT_TYPE_STRING, .dest = &args.store_dir, .env = (env_),          \
        .meta = "DIR", .help = "the tensor store (default " STORE_DEFAULT_DIR ")"                  \
    }
#define TENANT_OPTION(env_)                                                                        \
    {                                                                                              \
        .name = "tenant", .type = OPT_TYPE_STRING, .dest = &args.tenant, .env = (env_),            \
        .meta = "T", .help = "the dedicated store of tenant T"                                     \
    }
#define LOAD_OPTIONS(store_env, tenant_env, manifest_env)                                          \
    STORE_OPTION(store_env), TENANT_OPTION(tenant_env),                                            \
        {.name = "manifest",                                                                       \
         .type = OPT_TYPE_STRING,                                                                  \
         .dest = &args.manifest,                                                                   \
         .env = (manifest_env),                                                                    \
         .meta = "M",                                                                              \
         .help = "tensor identities from manifest M (no hashing)"},                                \
        {.name = "direct",                                                                         \
         .type = OPT_TYPE_FLAG,                                                                    \
         .dest = &args.direct,                                                                     \
         .help = "ingest missing tensors into the store ourselves (no daemon)"},                   \
        {.name = "private",                                                                        \
         .type = OPT_TYPE_FLAG,                                                                    \
         .dest = &args.private_,                                                                   \
         .help = "no store: a private load, the baseline"},                                        \
        {.name = "socket",                                                                         \
         .type = OPT_TYPE_STRING,                                                                  \
         .dest = &args.socket,                                                                     \
         .meta = "PATH",                                                                           \
         .help = "the node daemon's socket"},                                                      \
        {.name = "timeout-ms",                                                                     \
         .type = OPT_TYPE_INT,                                                                     \
         .dest = &args.timeout_ms,                                                                 \
         .min = 1,                                                                                 \
         .max = 86400000,                                                                          \
         .meta = "N",                                                                              \
         .help = "how long to wait for the node daemon"},                                          \
        {.name = "label",                                                                          \
         .type = OPT_TYPE_STRING,                                                                  \
         .dest = &args.label,                                                                      \
         .meta = "L",                                                                              \
         .help = "what the daemon's holders list calls us"},                                       \
        {.name = "workers",                                                                        \
         .type = OPT_TYPE_INT,                                                                     \
         .dest = &args.workers,                                                                    \
         .min = 1,                                                                                 \
         .max = 4096,                                                                              \
         .meta = "N",                                                                              \
         .help = "threads that hash (no manifest) and publish (--direct); default: the CPUs "      \
                 "this process may use (affinity, cgroup cpu.max)"},                               \
    {                                                                                              \
        .name = "digests", .type = OPT_TYPE_CUSTOM, .dest = &args.digests, .parse = parse_digests, \
        .meta = "auto|agent|daemon",                                                               \
        .help = "without a manifest, who hashes the model (daemon: it hashes while it "            \
                "ingests; agent: we hash first; auto, the default: one probe tensor decides, "     \
                "resident -> agent, missing -> daemon)"                                            \
    }
#define HOLD_OPTION(what_)                                                                         \
    {                                                                                              \
        .name = "hold", .type = OPT_TYPE_FLAG, .dest = &args.hold, .help = (what_)                 \
    }

static const struct opt_spec index_options[] = {
    {.name = "output",
     .short_name = 'o',
     .type = OPT_TYPE_STRING,
     .dest = &args.output,
     .meta = "MANIFEST",
     .help = "where to write the manifest (default: stdout)"},
    {0},
};

static const struct opt_spec load_options_[] = {
    LOAD_OPTIONS(NULL, NULL, NULL),
    HOLD_OPTION("keep the model loaded until stdin closes or SIGTERM"),
    {.name = "populate",
     .type = OPT_TYPE_CUSTOM,
     .dest = &args.populate,
     .parse = agent_populate_option,
     .meta = "none|map|madvise",
     .help = "how the store's mappings get their page tables (default madvise: at load, so the "
             "first request pays no page faults; none: on first touch)"},
    {.name = "device",
     .type = OPT_TYPE_STRING,
     .dest = &args.device,
     .env = "TETRIS_DEVICE",
     .meta = "cuda:N",
     .help = "also map the node daemon's shared read-only GPU copies of the tensors (store mode "
             "only; see docs/GPU.md); adds device, device_tensors, device_bytes and "
             "device_fallback to the JSON"},
    {.name = "libcuda",
     .type = OPT_TYPE_STRING,
     .dest = &args.libcuda,
     .meta = "PATH",
     .help = "the CUDA driver (default $TETRIS_LIBCUDA, else libcuda.so.1)"},
    {0},
};

static const struct opt_spec view_options[] = {
    LOAD_OPTIONS(NULL, NULL, NULL),
    VIEW_OPTIONS(NULL, NULL),
    HOLD_OPTION("keep the references until stdin closes or SIGTERM, then remove the view; "
                "without it the view stays and nothing holds its tensors (the daemon may reclaim "
                "them)"),
    {0},
};

static const struct opt_spec exec_options[] = {
    {.name = "model",
     .type = OPT_TYPE_STRING,
     .dest = &args.model,
     .env = TETRIS_ENV_MODEL,
     .meta = "MODEL",
     .help = "the model file, or a registry reference oci://... (one of the two is required)"},
    {.name = "model-ref",
     .type = OPT_TYPE_STRING,
     .dest = &args.model_ref,
     .env = TETRIS_ENV_MODEL_REF,
     .meta = "REF",
     .help = "the model's registry reference (oci://HOST:PORT/REPO[:TAG|@sha256:HEX]), pulled "
             "by the node daemon; a --model file is then used only if the pull fails"},
    {.name = "view-dir",
     .type = OPT_TYPE_STRING,
     .dest = &args.view_dir,
     .meta = "DIR",
     .help = "where to write the view (default: a new directory in ${TMPDIR:-/tmp})"},
    {.name = "model-view",
     .type = OPT_TYPE_STRING,
     .dest = &args.given_view,
     .env = TETRIS_ENV_MODEL_VIEW,
     .meta = "DIR",
     .help = "a view the platform made (tetris-csi's volume): checked, then CMD replaces exec "
             "with it; the model and load options are not used"},
    LOAD_OPTIONS(TETRIS_ENV_STORE, TETRIS_ENV_TENANT, TETRIS_ENV_MANIFEST),
    VIEW_OPTIONS(TETRIS_ENV_DERIVED, TETRIS_ENV_VIEW_RUNTIME),
    {0},
};

static const struct opt_spec store_options[] = {
    STORE_OPTION(NULL),
    TENANT_OPTION(NULL),
    {0},
};

static const struct opt_program agent_program = {
    .name = "tetris-agent",
    .synopsis = "COMMAND [OPTIONS]",
    .about = commands_text,
    .epilogue = exit_text,
    .options_first = true,
};

static const struct opt_program index_command = {
    .name = "tetris-agent index",
    .synopsis = "MODEL [-o MANIFEST]",
    .about = "Parses MODEL (ONNX or safetensors), hashes every tensor and writes its manifest\n"
             "as JSON.\n",
    .options = index_options,
    .epilogue = exit_text,
};

static const struct opt_program load_command = {
    .name = "tetris-agent load",
    .synopsis = "[OPTION]... MODEL",
    .about = "Maps MODEL's tensors from the store (default " STORE_DEFAULT_DIR
             "); the node daemon\n"
             "ingests missing ones (--direct: ingest them ourselves; --private: no store,\n"
             "the baseline). Prints one JSON object as soon as the model is loaded: tensors,\n"
             "bytes, mapped_bytes, ingested_bytes, private_bytes, load_ms, fell_back,\n"
             "fallback_reason.\n",
    .options = load_options_,
    .epilogue = exit_text,
};

static const struct opt_program view_command = {
    .name = "tetris-agent view",
    .synopsis = "[OPTION]... MODEL DIR",
    .about = "Writes MODEL's model view into DIR (new, or empty and ours): a directory any\n"
             "runtime opens instead of MODEL to compute on the store's pages\n"
             "(docs/PROTOCOLS.md, \"Model view\"). Prints one JSON object: view, model, mode,\n"
             "shared, fallback, tensors, shared_tensors, bytes, shared_bytes, load_ms. The\n"
             "references are held without page tables or copies.\n",
    .options = view_options,
    .epilogue = exit_text,
};

static const struct opt_program exec_command = {
    .name = "tetris-agent exec",
    .synopsis = "[OPTION]... -- CMD [ARGS...]",
    .about = "Writes the model view, runs CMD with " TETRIS_ENV_MODEL_VIEW "=<view dir> in its\n"
             "environment, holds the references while it runs, then removes the view and\n"
             "exits with CMD's status (128+N if signal N killed it). SIGTERM, SIGINT, SIGHUP,\n"
             "SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to CMD; CMD is killed if we die; as\n"
             "PID 1 we also reap orphans. No store, a full store or no daemon is no error:\n"
             "the view then names the original model (\"fallback\"). A model named by a\n"
             "registry reference (--model-ref, or --model oci://...) is pulled by the node\n"
             "daemon; if the pull fails, the --model file is used (one log line), and without\n"
             "one exec fails before CMD starts. --store, --tenant and --manifest default to\n"
             "$" TETRIS_ENV_STORE ", $" TETRIS_ENV_TENANT " and $" TETRIS_ENV_MANIFEST
             "; --model and --model-ref to\n"
             "$" TETRIS_ENV_MODEL " and $" TETRIS_ENV_MODEL_REF ".\n"
             "A view the platform made (--model-view, default $" TETRIS_ENV_MODEL_VIEW
             ": tetris-csi's\n"
             "volume, whose kept holder holds the tensors) is used as is: it is checked as\n"
             "check-view does, then CMD replaces exec (execvp), with nothing loaded or held.\n",
    .options = exec_options,
    .epilogue = exit_text,
};

static const struct opt_program check_view_command = {
    .name = "tetris-agent check-view",
    .synopsis = "[DIR]",
    .about = "Checks a model view (default $" TETRIS_ENV_MODEL_VIEW ") the way its reader must\n"
             "before trusting it: owners and modes, the index, every file in the store or the\n"
             "model's folder and long enough; prints a JSON summary.\n",
    .epilogue = exit_text,
};

static const struct opt_program verify_command = {
    .name = "tetris-agent verify",
    .synopsis = "[--store DIR] [--tenant T]",
    .about = "Re-hashes every stored tensor; lists the ones that do not match.\n",
    .options = store_options,
    .epilogue = exit_text,
};

static const struct opt_program inspect_command = {
    .name = "tetris-agent inspect",
    .synopsis = "MODEL\n[--store DIR] [--tenant T]",
    .about = "A model's tensors, or a store's tensors and holders, for humans.\n",
    .options = store_options,
    .epilogue = exit_text,
};

static int exit_code_for(int r)
{
    switch (-r) {
    case TETRIS_E_FORMAT:
    case TETRIS_E_IO:
    case TETRIS_E_NOTFOUND: return EXIT_BAD_INPUT;
    case TETRIS_E_INVAL: return EXIT_USAGE;
    default: return EXIT_FAIL;
    }
}

static int report(int r, const char *what, const tetris_error *err)
{
    log_error("event=error op=%s code=%s msg=%s", what, tetris_code_name(r), LOG_Q(err->msg));
    return exit_code_for(r);
}

/* A command's options and up to max_operands operands into *c (argv[0]
 * is the command's name). Returns EXIT_OK or EXIT_USAGE. */
static int parse_command(const struct opt_program *cmd, int argc, char **argv, int max_operands,
                         struct cli *c)
{
    int first;

    memset(&args, 0, sizeof(args));
    args.store_dir = STORE_DEFAULT_DIR;
    args.populate = AGENT_POPULATE_DEFAULT;
    if ((first = opt_parse(cmd, argc, argv)) < 0)
        return EXIT_USAGE;
    if (args.direct && args.private_)
        return opt_usage_error(cmd, "--direct and --private exclude each other"), EXIT_USAGE;
    args.mode = args.direct     ? AGENT_MODE_DIRECT
                : args.private_ ? AGENT_MODE_PRIVATE
                                : AGENT_MODE_STORE;
    if (first < argc && max_operands >= 1)
        args.arg = argv[first++];
    if (first < argc && max_operands >= 2)
        args.arg2 = argv[first++];
    if (first < argc)
        return opt_usage_error(cmd, "unexpected argument '%s'", argv[first]), EXIT_USAGE;
    *c = args;
    return EXIT_OK;
}

/* ---- index ---- */

static int cmd_index(int argc, char **argv)
{
    tetris_error err = {0};
    struct cli c;
    model *m = NULL;
    int r;

    if ((r = parse_command(&index_command, argc, argv, 1, &c)) != EXIT_OK)
        return r;
    if (c.arg == NULL)
        return opt_usage_error(&index_command, "expected a MODEL"), EXIT_USAGE;
    r = model_parse_file(c.arg, &m, &err);
    if (r == 0)
        r = model_sources_realpath(m, &err);
    if (r == 0)
        r = model_compute_digests(m, &err);
    if (r == 0)
        r = manifest_write_file(m, c.output != NULL ? c.output : "-", &err);
    if (r == 0)
        log_info("event=index model=%s tensors=%zu bytes=%" PRIu64 " manifest=%s", c.arg,
                 m->n_tensors, m->total_bytes, c.output != NULL ? c.output : "-");
    model_free(m);
    return r < 0 ? report(r, "index", &err) : EXIT_OK;
}

/* ---- load ---- */

/* Prints j (NULL: it could not be built) as one compact JSON line on
 * stdout and drops the reference: the summary line of a command. */
static int print_json_line(json_t *j)
{
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text == NULL)
        return -1;
    printf("%s\n", text);
    free(text);
    return fflush(stdout) == 0 ? 0 : -1;
}

static int print_load(const agent_model *am, const char *mode, const char *device)
{
    const struct agent_stats *s = &am->stats;
    json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:b, s:s}", "model",
                          am->model->path, "mode", mode, "tensors", (json_int_t)s->tensors,
                          "bytes", (json_int_t)s->bytes, "mapped_bytes",
                          (json_int_t)s->mapped_bytes, "ingested_bytes",
                          (json_int_t)s->ingested_bytes, "private_bytes",
                          (json_int_t)s->private_bytes, "load_ms", s->load_ms, "fell_back",
                          s->fell_back, "fallback_reason", s->fallback_reason);
    if (j != NULL && device != NULL &&
        json_object_update_new(j, json_pack("{s:s, s:I, s:I, s:s}", "device", device,
                                            "device_tensors", (json_int_t)s->device_tensors,
                                            "device_bytes", (json_int_t)s->device_bytes,
                                            "device_fallback", s->device_fallback)) < 0) {
        json_decref(j);
        j = NULL;
    }
    return print_json_line(j);
}

/* The agent's options from the load options of a command line. */
static void load_options(const struct cli *c, struct agent_options *o)
{
    agent_options_init(o);
    o->mode = c->mode;
    o->store_dir = c->store_dir;
    o->tenant = c->tenant;
    o->manifest_path = c->manifest;
    o->daemon_socket = c->socket;
    o->label = c->label;
    o->workers = (unsigned)c->workers;
    o->digests = c->digests;
    o->populate = c->populate;
    if (c->timeout_ms > 0)
        o->daemon_timeout_ms = c->timeout_ms;
}

static int cmd_load(int argc, char **argv)
{
    struct agent_options o;
    tetris_error err = {0};
    agent_model *am = NULL;
    struct cli c;
    int r;

    if ((r = parse_command(&load_command, argc, argv, 1, &c)) != EXIT_OK)
        return r;
    if (c.arg == NULL)
        return opt_usage_error(&load_command, "expected a MODEL"), EXIT_USAGE;
    load_options(&c, &o);
    o.device = c.device != NULL && c.device[0] != '\0' ? c.device : NULL;
    o.libcuda = c.libcuda;
    if (o.device != NULL) {
        int ordinal;
        if (gpu_device_parse(o.device, &ordinal, &err) < 0)
            return opt_usage_error(&load_command, "--device: %s", err.msg), EXIT_USAGE;
        if (c.mode != AGENT_MODE_STORE)
            return opt_usage_error(&load_command,
                                   "--device needs the node daemon (not --direct or --private)"),
                   EXIT_USAGE;
    }
    if ((r = agent_load(c.arg, &o, &am, &err)) < 0)
        return report(r, "load", &err);
    if (print_load(am, mode_names[c.mode], o.device) < 0) {
        log_error("event=error op=load msg=\"cannot write the result to stdout\"");
        agent_model_free(am);
        return EXIT_FAIL;
    }
    if (c.hold) {
        int sig = hold_until_released();
        log_info("event=release model=%s by=%s", c.arg, sig ? "signal" : "stdin-closed");
    }
    agent_model_free(am);
    return EXIT_OK;
}

/* ---- view and exec ---- */

/* The model a command names: a registry reference (model_ref, or a named
 * model that is one) and a file (named otherwise), either NULL. Returns
 * EXIT_OK, or EXIT_USAGE after saying why. */
static int model_names(const struct opt_program *cmd, const char *named, const char *model_ref,
                       const char **ref, const char **file)
{
    tetris_error err = {0};
    oci_ref parsed;

    *ref = model_ref;
    *file = named;
    if (named != NULL && oci_ref_is(named)) {
        /* The same reference twice (an image's TETRIS_MODEL_REF and a
         * deployment's TETRIS_MODEL) is one. */
        if (model_ref != NULL && strcmp(model_ref, named) != 0)
            return opt_usage_error(cmd, "two registry references: --model %s and --model-ref %s",
                                   named, model_ref),
                   EXIT_USAGE;
        *ref = named;
        *file = NULL;
    }
    if (*ref != NULL && oci_ref_parse(*ref, &parsed, &err) < 0)
        return opt_usage_error(cmd, "%s", err.msg), EXIT_USAGE;
    if (*ref == NULL && *file == NULL)
        return opt_usage_error(cmd, "no model: set " TETRIS_ENV_MODEL " or --model"), EXIT_USAGE;
    return EXIT_OK;
}

/* Loads the model only to hold its references (the view's readers map the
 * pages themselves): no page tables, no private copies, so holding costs
 * this process next to no memory. A reference is pulled, file loaded if
 * the pull fails; *loaded is the one loaded. */
static int load_for_view(const struct cli *c, const char *ref, const char *file, agent_model **am,
                         const char **loaded)
{
    struct agent_options o;
    tetris_error err = {0};
    int r;

    load_options(c, &o);
    o.populate = STORE_POPULATE_NONE;
    o.map_only = true;
    *loaded = file;
    r = ref != NULL ? agent_load_ref(ref, file, &o, am, loaded, &err)
                    : agent_load(file, &o, am, &err);
    if (r < 0)
        return report(r, "load", &err);
    return EXIT_OK;
}

static int write_view(const struct cli *c, const agent_model *am, const char *model_path,
                      const char *dir, model_view **v)
{
    tetris_error err = {0};
    int r = view_write(am, model_path, dir, &c->view, v, &err);
    if (r < 0) {
        log_error("event=error op=view code=%s msg=%s", tetris_code_name(r), LOG_Q(err.msg));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

static int print_view(const model_view *v, const agent_model *am, const struct cli *c)
{
    const struct view_stats *s = view_stats(v);
    json_t *j = json_pack("{s:s, s:s, s:s, s:b, s:o, s:o, s:I, s:I, s:I, s:I, s:f}", "view",
                          view_dir(v), "model", am->model->path, "mode", mode_names[c->mode],
                          "shared", s->shared, "fallback",
                          s->fallback != NULL ? json_string(s->fallback) : json_null(), "derived",
                          s->derived != NULL ? json_string(s->derived) : json_null(), "tensors",
                          (json_int_t)s->tensors, "shared_tensors", (json_int_t)s->shared_tensors,
                          "bytes", (json_int_t)s->bytes, "shared_bytes",
                          (json_int_t)s->shared_bytes, "load_ms", am->stats.load_ms);
    return print_json_line(j);
}

static int cmd_view(int argc, char **argv)
{
    agent_model *am = NULL;
    model_view *v = NULL;
    struct cli c;
    int r;

    if ((r = parse_command(&view_command, argc, argv, 2, &c)) != EXIT_OK)
        return r;
    if (c.arg == NULL || c.arg2 == NULL)
        return opt_usage_error(&view_command, "expected MODEL and DIR"), EXIT_USAGE;
    const char *ref, *file, *loaded;
    if ((r = model_names(&view_command, c.arg, NULL, &ref, &file)) != EXIT_OK)
        return r;
    /* Blocked before any thread starts, so that every thread leaves them
     * to hold_until_released. */
    if (c.hold)
        hold_block_signals();
    if ((r = load_for_view(&c, ref, file, &am, &loaded)) != EXIT_OK)
        return r;
    if ((r = write_view(&c, am, loaded, c.arg2, &v)) != EXIT_OK) {
        agent_model_free(am);
        return r;
    }
    if (print_view(v, am, &c) < 0) {
        log_error("event=error op=view msg=\"cannot write the result to stdout\"");
        r = EXIT_FAIL;
    } else if (c.hold) {
        int sig = hold_until_released();
        log_info("event=release view=%s by=%s", LOG_Q(view_dir(v)),
                 sig ? "signal" : "stdin-closed");
        view_remove(v);
    } else {
        /* The view stays for the caller; nothing holds its tensors now. */
        view_forget(v);
    }
    agent_model_free(am);
    return r;
}

/* A view carrying a derived form is read by CMD's runtime, which maps the
 * form's data itself and cannot be told to keep it on the 4 KiB pages the
 * daemon wrote it on: through such mappings khugepaged would move the form
 * onto 2 MiB pages, where pre-packed weights ran up to 1.35x slower
 * (BENCHMARKS.md, "Derived forms on 2 MiB store pages"). So CMD starts with
 * its unadvised mappings kept off them. Never a reason not to run CMD. */
static void keep_form_small_pages(const char *view)
{
    tetris_error err = {0};
    bool kept;
    if (store_keep_small_pages_inherited(&kept, &err) < 0)
        log_warn("event=form-pages-not-kept view=%s code=%s msg=%s", LOG_Q(view),
                 tetris_code_name(err.code), LOG_Q(err.msg));
    else if (!kept)
        log_info("event=form-pages-not-kept view=%s msg=\"this kernel cannot keep a runtime's "
                 "mappings off 2 MiB pages (Linux 6.18: PR_THP_DISABLE_EXCEPT_ADVISED); "
                 "khugepaged may move the form onto them\"",
                 LOG_Q(view));
}

/* CMD in place of exec, on a view the platform made and holds (a
 * tetris-csi volume: its kept holder keeps the tensors for the volume's
 * life): nothing is loaded or held here, so nothing needs this process.
 * The view is checked first, as its reader will: a view not to trust ends
 * exec before CMD starts. Returns only on failure. */
static int exec_given_view(const char *dir, char **cmd)
{
    struct view_check_result res;
    tetris_error err = {0};
    int r;

    if ((r = view_check(dir, &res, &err)) < 0) {
        log_error("event=view-invalid view=%s code=%s msg=%s", LOG_Q(dir), tetris_code_name(r),
                  LOG_Q(err.msg));
        return EXIT_BAD_INPUT;
    }
    if (setenv(TETRIS_ENV_MODEL_VIEW, dir, 1) < 0) {
        log_error("event=error op=exec msg=\"cannot set " TETRIS_ENV_MODEL_VIEW "\"");
        return EXIT_FAIL;
    }
    log_info("event=exec-given-view view=%s shared=%d tensors=%zu shared_files=%zu cmd=%s",
             LOG_Q(dir), res.shared, res.tensors, res.shared_files, LOG_Q(cmd[0]));
    if (res.derived[0] != '\0')
        keep_form_small_pages(dir);
    fflush(NULL);
    execvp(cmd[0], cmd);
    int e = errno;
    log_error("event=exec-failed cmd=%s errno=%d msg=%s", LOG_Q(cmd[0]), e, LOG_Q(strerror(e)));
    return e == ENOENT || e == ENOTDIR ? SUPERVISE_EXIT_NOT_FOUND : SUPERVISE_EXIT_CANNOT_RUN;
}

static int cmd_exec(int argc, char **argv)
{
    agent_model *am = NULL;
    model_view *v = NULL;
    tetris_error err = {0};
    struct cli c;
    int dashes = 1, r;

    while (dashes < argc && strcmp(argv[dashes], "--") != 0)
        dashes++;
    if ((r = parse_command(&exec_command, dashes, argv, 0, &c)) != EXIT_OK)
        return r;
    if (dashes + 1 >= argc)
        return opt_usage_error(&exec_command, "expected -- CMD [ARGS...]"), EXIT_USAGE;
    if (c.given_view != NULL && c.given_view[0] != '\0')
        return exec_given_view(c.given_view, argv + dashes + 1);
    const char *ref, *file, *loaded;
    if ((r = model_names(&exec_command, c.model, c.model_ref, &ref, &file)) != EXIT_OK)
        return r;
    /* Before the load starts threads: see supervise_block_signals. */
    supervise_block_signals();
    if ((r = load_for_view(&c, ref, file, &am, &loaded)) != EXIT_OK)
        return r;
    if ((r = write_view(&c, am, loaded, c.view_dir, &v)) != EXIT_OK) {
        agent_model_free(am);
        return r;
    }
    /* What the load and the rewrite freed goes back to the kernel: exec
     * stays resident for as long as CMD runs. */
    malloc_trim(0);
    if (view_stats(v)->derived != NULL)
        keep_form_small_pages(view_dir(v));
    int sig = supervise_take_termination();
    if (sig != 0) {
        log_info("event=exec-cancelled view=%s sig=%d", LOG_Q(view_dir(v)), sig);
        r = SUPERVISE_EXIT_SIGNAL_BASE + sig;
    } else if (setenv(TETRIS_ENV_MODEL_VIEW, view_dir(v), 1) < 0) {
        log_error("event=error op=exec msg=\"cannot set " TETRIS_ENV_MODEL_VIEW "\"");
        r = EXIT_FAIL;
    } else if ((r = supervise_run(argv + dashes + 1, &err)) < 0) {
        log_error("event=error op=exec code=%s msg=%s", tetris_code_name(r), LOG_Q(err.msg));
        r = EXIT_FAIL;
    } else {
        log_info("event=exec-exit cmd=%s status=%d view=%s", LOG_Q(argv[dashes + 1]), r,
                 LOG_Q(view_dir(v)));
    }
    /* The view goes first: no reader must find it once its references are. */
    view_remove(v);
    agent_model_free(am);
    return r;
}

static int cmd_check_view(int argc, char **argv)
{
    struct view_check_result res;
    tetris_error err = {0};
    struct cli c;
    int r;

    if ((r = parse_command(&check_view_command, argc, argv, 1, &c)) != EXIT_OK)
        return r;
    const char *dir = c.arg != NULL ? c.arg : getenv(TETRIS_ENV_MODEL_VIEW);
    if (dir == NULL || dir[0] == '\0')
        return opt_usage_error(&check_view_command, "no DIR and no " TETRIS_ENV_MODEL_VIEW),
               EXIT_USAGE;
    if ((r = view_check(dir, &res, &err)) < 0) {
        log_error("event=view-invalid view=%s code=%s msg=%s", LOG_Q(dir), tetris_code_name(r),
                  LOG_Q(err.msg));
        return EXIT_BAD_INPUT;
    }
    json_t *j = json_pack("{s:s, s:b, s:o, s:o, s:I, s:I, s:I}", "view", dir, "shared", res.shared,
                          "fallback", res.fallback[0] ? json_string(res.fallback) : json_null(),
                          "derived", res.derived[0] ? json_string(res.derived) : json_null(),
                          "tensors", (json_int_t)res.tensors, "files", (json_int_t)res.files,
                          "shared_files", (json_int_t)res.shared_files);
    return print_json_line(j) == 0 ? EXIT_OK : EXIT_FAIL;
}

/* ---- verify ---- */

struct digest_list {
    tensor_digest *d;
    size_t n, cap;
};

static int collect_digest(void *ctx, const struct store_entry *e)
{
    struct digest_list *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        tensor_digest *d = realloc(l->d, cap * sizeof(*d));
        if (d == NULL)
            return -1;
        l->d = d;
        l->cap = cap;
    }
    l->d[l->n++] = e->meta.digest;
    return 0;
}

static int open_store(const struct cli *c, store **s, tetris_error *err)
{
    struct store_options so = {.tenant = c->tenant, .read_only = true};
    int r = store_open(c->store_dir, &so, s, err);
    if (r < 0)
        log_error("event=error op=open-store store=%s code=%s msg=%s", LOG_Q(c->store_dir),
                  tetris_code_name(r), LOG_Q(err->msg));
    return r;
}

static int cmd_verify(int argc, char **argv)
{
    struct digest_list l = {0};
    tetris_error err = {0};
    size_t bad = 0, failed = 0;
    store *s = NULL;
    struct cli c;
    int r;

    if ((r = parse_command(&verify_command, argc, argv, 0, &c)) != EXIT_OK)
        return r;
    if (open_store(&c, &s, &err) < 0)
        return EXIT_NO_STORE;
    r = store_foreach_tensor(s, collect_digest, &l, &err);
    if (r < 0) {
        free(l.d);
        store_close(s);
        return report(r, "verify", &err);
    }
    for (size_t i = 0; i < l.n; i++) {
        char hex[TENSOR_DIGEST_HEX_LEN + 1];
        tensor_digest_to_hex(&l.d[i], hex);
        r = store_verify_tensor(s, &l.d[i], &err);
        if (r == -TETRIS_E_CORRUPT) {
            bad++;
            printf("corrupt sha256:%s\n", hex);
            log_error("event=corrupt digest=sha256:%s msg=%s", hex, LOG_Q(err.msg));
        } else if (r == -TETRIS_E_NOTFOUND) {
            continue; /* reclaimed since the listing */
        } else if (r < 0) {
            failed++;
            printf("unverified sha256:%s\n", hex);
            log_error("event=verify-failed digest=sha256:%s code=%s msg=%s", hex,
                      tetris_code_name(r), LOG_Q(err.msg));
        }
    }
    printf("verified %zu tensors in %s: %zu corrupt, %zu unreadable\n", l.n, store_root(s), bad,
           failed);
    log_info("event=verify store=%s tensors=%zu corrupt=%zu unreadable=%zu", store_root(s), l.n,
             bad, failed);
    free(l.d);
    store_close(s);
    return bad > 0 || failed > 0 ? EXIT_FAIL : EXIT_OK;
}

/* ---- inspect ---- */

struct store_totals {
    size_t tensors;
    uint64_t bytes;
    size_t holders, live_holders;
    uint64_t referenced_bytes; /* what live holders map, counted per holder */
};

static int print_tensor(void *ctx, const struct store_entry *e)
{
    struct store_totals *t = ctx;
    char hex[TENSOR_DIGEST_HEX_LEN + 1], shape[160];
    tensor_digest_to_hex(&e->meta.digest, hex);
    tensor_shape_format(e->meta.shape, (size_t)e->meta.ndim, shape, sizeof(shape));
    printf("  sha256:%.16s  %-10s %-22s %12" PRIu64 "\n", hex, e->meta.dtype, shape,
           e->meta.nbytes);
    t->tensors++;
    t->bytes += e->meta.nbytes;
    return 0;
}

static int print_holder(void *ctx, const struct store_holder_info *h)
{
    struct store_totals *t = ctx;
    uint64_t bytes = 0;
    for (size_t i = 0; i < h->n_refs; i++)
        bytes += h->ref_bytes[i];
    printf("  %-24s pid %-8d %-5s %6zu refs %12" PRIu64 " bytes  %s\n", h->id, (int)h->pid,
           h->alive ? "live" : "dead", h->n_refs, bytes, h->label ? h->label : "");
    t->holders++;
    if (h->alive) {
        t->live_holders++;
        t->referenced_bytes += bytes;
    }
    return 0;
}

static int inspect_store(const struct cli *c)
{
    struct store_totals t = {0};
    tetris_error err = {0};
    store *s = NULL;
    int r;

    if (open_store(c, &s, &err) < 0)
        return EXIT_NO_STORE;
    printf("store: %s\ncapacity: %" PRIu64 " bytes%s\n\ntensors:\n", store_root(s),
           store_capacity(s), store_capacity(s) == 0 ? " (unlimited)" : "");
    r = store_foreach_tensor(s, print_tensor, &t, &err);
    if (r == 0) {
        printf("\nholders:\n");
        r = store_foreach_holder(s, print_holder, &t, &err);
    }
    if (r == 0)
        printf("\n%zu tensors, %" PRIu64 " bytes resident; %zu holders (%zu live) map %" PRIu64
               " bytes: %" PRIu64 " bytes saved by sharing\n",
               t.tensors, t.bytes, t.holders, t.live_holders, t.referenced_bytes,
               t.referenced_bytes > t.bytes ? t.referenced_bytes - t.bytes : 0);
    store_close(s);
    return r < 0 ? report(r, "inspect", &err) : EXIT_OK;
}

static int cmd_inspect(int argc, char **argv)
{
    tetris_error err = {0};
    model *m = NULL;
    struct cli c;
    int r;

    if ((r = parse_command(&inspect_command, argc, argv, 1, &c)) != EXIT_OK)
        return r;
    if (c.arg == NULL)
        return inspect_store(&c);
    r = model_parse_file(c.arg, &m, &err);
    if (r == 0)
        r = model_sources_realpath(m, &err);
    if (r == 0)
        r = model_compute_digests(m, &err);
    if (r == 0)
        r = model_print(m, stdout, &err);
    model_free(m);
    return r < 0 ? report(r, "inspect", &err) : EXIT_OK;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } commands[] = {{"index", cmd_index},
                    {"load", cmd_load},
                    {"view", cmd_view},
                    {"exec", cmd_exec},
                    {"check-view", cmd_check_view},
                    {"verify", cmd_verify},
                    {"inspect", cmd_inspect}};

    int first;

    log_init(argv[0]);
    if ((first = opt_parse(&agent_program, argc, argv)) < 0)
        return EXIT_USAGE;
    if (first == argc)
        return opt_usage_error(&agent_program, "expected a COMMAND"), EXIT_USAGE;
    if (strcmp(argv[first], "help") == 0) {
        opt_print_help(&agent_program, stdout);
        return EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(argv[first], commands[i].name) == 0)
            return commands[i].fn(argc - first, argv + first);
    return opt_usage_error(&agent_program, "unknown command '%s'", argv[first]), EXIT_USAGE;
}
