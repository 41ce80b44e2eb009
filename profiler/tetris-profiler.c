/* tetris-profiler - a model's registration data: its tensor manifest
 * (`index`) and its latency profile over instance configs <c, b, p>
 * (`profile`), measured on real tetris-function processes; `job` prints the
 * Kubernetes Job that does both on a node and stores the results as
 * ConfigMaps; `load` drives functions at a fixed rate (benchmarks). Each
 * command's options are one table (common/options.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/cli.h"
#include "common/options.h"
#include "profiler/fn_process.h"
#include "profiler/job.h"
#include "profiler/loadgen.h"
#include "common/log.h"
#include "model/manifest.h"
#include "model/model.h"
#include "protocol/profile.h"
#include "profiler/profile_run.h"
#include "protocol/names.h"
#include "tensorstore/store.h"

enum exit_code { EXIT_OK = 0, EXIT_FAILURE_ = 1, EXIT_USAGE = 2, EXIT_BAD_MODEL = 3 };

static const char commands_text[] =
    "Commands (COMMAND --help lists its options):\n"
    "  profile MODEL  runs tetris-function under every config <c, b, p> of a grid and\n"
    "                 writes the model's latency profile (YAML)\n"
    "  index MODEL    writes MODEL's tensor manifest (JSON)\n"
    "  job MODEL      prints a Kubernetes Job that runs `profile --store-configmaps`\n"
    "                 on a node\n"
    "  load URL...    drives functions at a fixed rate; prints a JSON summary\n";

static const char exit_text[] = "Exit status: 0 ok, 1 failure (a function or the API failed), "
                                "2 usage,\n3 bad or missing model file.\n";

/* What the command's options set: one command runs per process. */
static struct {
    struct profile_run_options run;
    const char *output, *name, *function_bin;
    bool private_, store_configmaps;
    struct configmap_target cm;
    struct job_options job;
    struct load_options load;
    double slo_ms;
} args;

/* --grid SPEC into the profile's grid: each dimension named replaces its
 * default. */
static int parse_grid(const struct opt_spec *spec, const char *label, const char *value,
                      tetris_error *err)
{
    (void)label;
    return grid_parse(spec->dest, value, err);
}

/* job's --grid: checked as profile would read it, passed on as text. */
static int parse_job_grid(const struct opt_spec *spec, const char *label, const char *value,
                          tetris_error *err)
{
    struct grid g;
    (void)label;
    grid_default(&g);
    if (grid_parse(&g, value, err) < 0)
        return -err->code;
    *(const char **)spec->dest = value;
    return 0;
}

#define DURATION_OPTION(dest_, help_)                                                              \
    {                                                                                              \
        .name = "duration", .type = OPT_TYPE_DOUBLE, .dest = (dest_), .dmin = 0.001,               \
        .dmax = 86400, .meta = "S", .help = (help_)                                                \
    }
#define WARMUP_OPTION(dest_, help_)                                                                \
    {                                                                                              \
        .name = "warmup", .type = OPT_TYPE_DOUBLE, .dest = (dest_), .dmin = 0, .dmax = 86400,      \
        .meta = "S", .help = (help_)                                                               \
    }

static const struct opt_spec profile_options[] = {
    {.name = "grid",
     .type = OPT_TYPE_CUSTOM,
     .dest = &args.run.grid,
     .parse = parse_grid,
     .meta = "SPEC",
     .help = "the configs, \"c=LIST b=LIST p=LIST\" (default c=1,2 b=1,2,4 p=1,2,3,4); the "
             "words may also follow MODEL"},
    DURATION_OPTION(&args.run.duration_s, "measured seconds per config (default 5)"),
    WARMUP_OPTION(&args.run.warmup_s, "seconds before measuring (default 1)"),
    {.name = "output",
     .short_name = 'o',
     .type = OPT_TYPE_STRING,
     .dest = &args.output,
     .meta = "FILE",
     .help = "write the profile to FILE (default stdout)"},
    {.name = "name",
     .type = OPT_TYPE_STRING,
     .dest = &args.name,
     .meta = "N",
     .help = "the model's name (default MODEL's file name without its extension)"},
    {.name = "store",
     .type = OPT_TYPE_STRING,
     .dest = &args.run.store_dir,
     .meta = "DIR",
     .help = "weights from the store at DIR (default " STORE_DEFAULT_DIR
             "), through its node daemon"},
    {.name = "direct",
     .type = OPT_TYPE_FLAG,
     .dest = &args.run.direct,
     .help = "ingest into the store ourselves (no node daemon)"},
    {.name = "private",
     .type = OPT_TYPE_FLAG,
     .dest = &args.private_,
     .help = "private weights, no store (excludes --direct)"},
    {.name = "max-wait-ms",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.run.max_wait_ms,
     .dmin = 0,
     .dmax = 86400,
     .meta = "MS",
     .help = "the functions' TETRIS_MAX_WAIT_MS (default 10)"},
    {.name = "clients-per-slot",
     .type = OPT_TYPE_INT,
     .dest = &args.run.clients_per_slot,
     .min = 1,
     .max = 64,
     .meta = "K",
     .help = "a closed loop of K*b*p clients per config (default 2)"},
    {.name = "function",
     .type = OPT_TYPE_STRING,
     .dest = &args.function_bin,
     .meta = "PATH",
     .help = "the tetris-function to run (default the one next to this program)"},
    {.name = "log-dir",
     .type = OPT_TYPE_STRING,
     .dest = &args.run.log_dir,
     .meta = "DIR",
     .help = "the functions log to DIR/function-N.log (default our stderr, not on a "
             "terminal, where the progress bar is)"},
    {.name = "store-configmaps",
     .type = OPT_TYPE_FLAG,
     .dest = &args.store_configmaps,
     .help = "also store the profile and the model's manifest as ConfigMaps (see job)"},
    {.name = "namespace",
     .type = OPT_TYPE_STRING,
     .dest = &args.cm.namespace_,
     .meta = "NS",
     .help = "the ConfigMaps' namespace (default the kubeconfig's or the service account's)"},
    {.name = "kubeconfig",
     .type = OPT_TYPE_STRING,
     .dest = &args.cm.kubeconfig,
     .meta = "F",
     .help = "reach the API through kubeconfig F"},
    {.name = "kube-server",
     .type = OPT_TYPE_STRING,
     .dest = &args.cm.server,
     .meta = "URL",
     .help = "or through the API at URL, with --kube-sa-dir"},
    {.name = "kube-sa-dir",
     .type = OPT_TYPE_STRING,
     .dest = &args.cm.sa_dir,
     .meta = "D",
     .help = "the service account's token, ca.crt and namespace in D"},
    {0},
};

static const struct opt_spec index_options[] = {
    {.name = "output",
     .short_name = 'o',
     .type = OPT_TYPE_STRING,
     .dest = &args.output,
     .meta = "MANIFEST",
     .help = "write the manifest to MANIFEST (default stdout)"},
    {0},
};

static const struct opt_spec job_options_[] = {
    {.name = "name",
     .type = OPT_TYPE_STRING,
     .dest = &args.job.name,
     .meta = "N",
     .help = "the model's name (default MODEL's file name without its extension)"},
    {.name = "namespace",
     .type = OPT_TYPE_STRING,
     .dest = &args.job.namespace_,
     .meta = "NS",
     .help = "the Job's and ConfigMaps' namespace (default " TETRIS_NAMESPACE ")"},
    {.name = "image",
     .type = OPT_TYPE_STRING,
     .dest = &args.job.image,
     .meta = "I",
     .help = "the container image (default tetris:latest)"},
    {.name = "model-dir",
     .type = OPT_TYPE_STRING,
     .dest = &args.job.model_dir,
     .meta = "DIR",
     .help = "the node's model directory, MODEL is a file in it (default " TETRIS_MODEL_HOST_DIR
             ")"},
    {.name = "store",
     .type = OPT_TYPE_STRING,
     .dest = &args.job.store_dir,
     .meta = "DIR",
     .help = "the node's store (default " STORE_DEFAULT_DIR ")"},
    {.name = "grid",
     .type = OPT_TYPE_CUSTOM,
     .dest = &args.job.grid,
     .parse = parse_job_grid,
     .meta = "SPEC",
     .help = "profile's --grid"},
    DURATION_OPTION(&args.job.duration_s, "profile's --duration"),
    WARMUP_OPTION(&args.job.warmup_s, "profile's --warmup"),
    {.name = "node",
     .type = OPT_TYPE_STRING,
     .dest = &args.job.node,
     .meta = "NODE",
     .help = "run on node NODE (kubernetes.io/hostname)"},
    {.name = "api-server",
     .type = OPT_TYPE_STRING,
     .dest = &args.job.api_server,
     .meta = "URL",
     .help = "the API's address for the pod, where the service account has no token"},
    {.name = "sa-secret",
     .type = OPT_TYPE_STRING,
     .dest = &args.job.sa_secret,
     .meta = "SECRET",
     .help = "a Secret with token, ca.crt and namespace, in place of the service account's "
             "own token"},
    {0},
};

static const struct opt_spec load_options_[] = {
    {.name = "rate",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.load.rate_rps,
     .dmin = 0.001,
     .dmax = 86400,
     .meta = "R",
     .help = "requests per second (required)"},
    DURATION_OPTION(&args.load.duration_s, "measured seconds (required)"),
    WARMUP_OPTION(&args.load.warmup_s, "seconds before measuring (default 0)"),
    {.name = "clients",
     .type = OPT_TYPE_INT,
     .dest = &args.load.clients,
     .min = 1,
     .max = 4096,
     .meta = "N",
     .help = "client threads (default 64)"},
    {.name = "slo-ms",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.slo_ms,
     .dmin = 0.001,
     .dmax = 86400,
     .meta = "T",
     .help = "also count the requests over T ms (and the failed ones)"},
    {0},
};

static const struct opt_program profiler_program = {
    .name = "tetris-profiler",
    .synopsis = "COMMAND [OPTIONS]",
    .about = commands_text,
    .epilogue = exit_text,
    .options_first = true,
};

static const struct opt_program profile_command = {
    .name = "tetris-profiler profile",
    .synopsis = "MODEL [c=LIST b=LIST p=LIST] [OPTION]...",
    .about = "Runs tetris-function (next to this program, or --function) under every config of\n"
             "the grid: limited to c CPUs by a cgroup CPU quota (a child of our own cpu\n"
             "cgroup; without a writable one it warns and runs unlimited), batch b, p workers\n"
             "with max(1, c/p) intra-op threads each, saturated by a closed loop of 2*b*p\n"
             "clients. Records per config the latency of a batch (mean, p95, p99 over distinct\n"
             "batches), throughput, peak private memory (smaps, store mappings excluded) and\n"
             "the bytes mapped from the store, and writes the profile YAML (stdout or -o\n"
             "FILE). Weights come from the store (through its node daemon; --direct: ingest\n"
             "ourselves) or are private (--private). A progress bar is drawn when stderr is a\n"
             "terminal.\n",
    .options = profile_options,
    .epilogue = exit_text,
};

static const struct opt_program index_command = {
    .name = "tetris-profiler index",
    .synopsis = "MODEL [-o MANIFEST]",
    .about = "Writes MODEL's tensor manifest (JSON) to stdout or MANIFEST.\n",
    .options = index_options,
    .epilogue = exit_text,
};

static const struct opt_program job_command = {
    .name = "tetris-profiler job",
    .synopsis = "MODEL [OPTION]...",
    .about = "Prints a Kubernetes Job (with its ServiceAccount and Role) that runs\n"
             "`profile --store-configmaps` for MODEL, a file in the node's --model-dir,\n"
             "storing ConfigMaps " TETRIS_MANIFEST_CONFIGMAP_PREFIX
             "<name> (label " TETRIS_LABEL_MODEL ", key " TETRIS_MANIFEST_CONFIGMAP_KEY
             ":\nwhat the scheduler extender reads) and " TETRIS_PROFILE_CONFIGMAP_PREFIX
             "<name> (label " TETRIS_LABEL_PROFILE ",\nkey " TETRIS_PROFILE_CONFIGMAP_KEY
             ").\nApply with: tetris-profiler job MODEL | kubectl apply -f -\n",
    .options = job_options_,
    .epilogue = exit_text,
};

static const struct opt_program load_command = {
    .name = "tetris-profiler load",
    .synopsis = "URL[=WEIGHT]... --rate R --duration S [OPTION]...",
    .about = "Sends {\"seed\": N} requests to the functions at URL (weighted) at a fixed rate R\n"
             "(open loop, latency counted from when a request was due) and prints a JSON\n"
             "summary; with --slo-ms the requests over T.\n",
    .options = load_options_,
    .epilogue = exit_text,
};

static int report(int r, const char *what, const tetris_error *err)
{
    log_error("event=error command=%s code=%s msg=%s", what, tetris_code_name(r), LOG_Q(err->msg));
    return r == -TETRIS_E_FORMAT || r == -TETRIS_E_NOTFOUND ? EXIT_BAD_MODEL : EXIT_FAILURE_;
}

/* The model's name: its file name without the extension. */
static void default_name(const char *model_path, char *buf, size_t len)
{
    const char *base = strrchr(model_path, '/');
    snprintf(buf, len, "%s", base != NULL ? base + 1 : model_path);
    char *dot = strrchr(buf, '.');
    if (dot != NULL && dot != buf)
        *dot = '\0';
}

/* ---- index ---- */

static int manifest_of(const char *path, char **json, tetris_error *err)
{
    model *m = NULL;
    int r = model_parse_file(path, &m, err);
    if (r == 0)
        r = model_compute_digests(m, err);
    if (r == 0 && (*json = manifest_to_json(m, err)) == NULL)
        r = -err->code;
    model_free(m);
    return r;
}

/* A command's options into args, after its defaults. Returns the index of
 * its first operand, or -1 after a usage error. */
static int parse_command(const struct opt_program *cmd, int argc, char **argv)
{
    memset(&args, 0, sizeof(args));
    grid_default(&args.run.grid);
    args.run.store_dir = STORE_DEFAULT_DIR;
    args.run.duration_s = 5;
    args.run.warmup_s = 1;
    args.run.max_wait_ms = 10;
    args.run.clients_per_slot = 2;
    job_options_init(&args.job);
    args.load.clients = 64;
    return opt_parse(cmd, argc, argv);
}

static int cmd_index(int argc, char **argv)
{
    tetris_error err = {0};
    model *m = NULL;
    int first, r;

    if ((first = parse_command(&index_command, argc, argv)) < 0)
        return EXIT_USAGE;
    if (first != argc - 1)
        return opt_usage_error(&index_command, "expected exactly one MODEL"), EXIT_USAGE;
    const char *output = args.output != NULL ? args.output : "-";
    r = model_parse_file(argv[first], &m, &err);
    if (r == 0)
        r = model_sources_realpath(m, &err); /* same manifest as tetris-agent index */
    if (r == 0)
        r = model_compute_digests(m, &err);
    if (r == 0)
        r = manifest_write_file(m, output, &err);
    if (r == 0)
        log_info("event=index model=%s tensors=%zu bytes=%llu manifest=%s", argv[first],
                 m->n_tensors, (unsigned long long)m->total_bytes, output);
    model_free(m);
    return r < 0 ? report(r, "index", &err) : EXIT_OK;
}

/* ---- profile ---- */

struct profile_cli {
    struct profile_run_options run;
    const char *output;
    bool store_configmaps;
    struct configmap_target cm;
    char name[256], function_bin[PATH_MAX], store_real[PATH_MAX];
};

/* profile's options, then its operands: MODEL and the grid's words
 * ("c=1,2"), in any order. */
static int parse_profile_args(int argc, char **argv, struct profile_cli *cli)
{
    const struct opt_program *cmd = &profile_command;
    struct profile_run_options *o = &cli->run;
    const char *model_path = NULL;
    tetris_error err = {0};
    int first;

    memset(cli, 0, sizeof(*cli));
    if ((first = parse_command(cmd, argc, argv)) < 0)
        return EXIT_USAGE;
    *o = args.run;
    for (int i = first; i < argc; i++) {
        if (strchr(argv[i], '=') != NULL) {
            if (grid_parse(&o->grid, argv[i], &err) < 0)
                return opt_usage_error(cmd, "%s", err.msg), EXIT_USAGE;
        } else if (model_path == NULL) {
            model_path = argv[i];
        } else {
            return opt_usage_error(cmd, "unexpected argument '%s'", argv[i]), EXIT_USAGE;
        }
    }
    if (model_path == NULL)
        return opt_usage_error(cmd, "expected a MODEL"), EXIT_USAGE;
    o->model = model_path;
    if (args.private_ && o->direct)
        return opt_usage_error(cmd, "--private excludes --direct"), EXIT_USAGE;
    if (args.private_)
        o->store_dir = NULL;
    cli->output = args.output;
    cli->store_configmaps = args.store_configmaps;
    cli->cm = args.cm;
    if (args.name != NULL)
        snprintf(cli->name, sizeof(cli->name), "%s", args.name);
    else
        default_name(model_path, cli->name, sizeof(cli->name));
    o->name = cli->name;
    if (args.function_bin != NULL)
        snprintf(cli->function_bin, sizeof(cli->function_bin), "%s", args.function_bin);
    else if (fn_process_default_bin(cli->function_bin, sizeof(cli->function_bin), &err) < 0)
        return opt_usage_error(cmd, "%s", err.msg), EXIT_USAGE;
    o->function_bin = cli->function_bin;
    /* smaps names store files by their real path. */
    if (o->store_dir != NULL && realpath(o->store_dir, cli->store_real) != NULL)
        o->store_dir = cli->store_real;
    return EXIT_OK;
}

static int store_results(const struct profile_cli *cli, const profile *p, tetris_error *err)
{
    cleanup_free char *manifest = NULL;
    char *yaml = NULL;
    size_t yaml_len = 0;
    int r;

    if ((r = manifest_of(cli->run.model, &manifest, err)) < 0)
        return r;
    FILE *mem = open_memstream(&yaml, &yaml_len);
    if (mem == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "open_memstream");
    r = profile_write(mem, p, err);
    if (fclose(mem) != 0 && r == 0)
        r = tetris_fail(err, TETRIS_E_IO, errno, "profile text");
    if (r == 0)
        r = job_store_configmaps(&cli->cm, cli->run.name, manifest, yaml, err);
    free(yaml);
    return r;
}

static int cmd_profile(int argc, char **argv)
{
    struct profile_cli cli;
    tetris_error err = {0};
    profile *p = NULL;
    int r;

    if ((r = parse_profile_args(argc, argv, &cli)) != EXIT_OK)
        return r;
    if (access(cli.run.model, R_OK) < 0) {
        r = tetris_fail(&err, TETRIS_E_NOTFOUND, errno, "model %s", cli.run.model);
        return report(r, "profile", &err);
    }
    if (access(cli.run.function_bin, X_OK) < 0) {
        r = tetris_fail(&err, TETRIS_E_UNAVAILABLE, errno, "tetris-function at %s (--function)",
                        cli.run.function_bin);
        return report(r, "profile", &err);
    }
    cli.run.progress = log_is_tty();
    log_info("event=profile-start model=%s name=%s configs=%zu duration_s=%g store=%s",
             cli.run.model, cli.run.name, grid_size(&cli.run.grid), cli.run.duration_s,
             cli.run.store_dir != NULL ? cli.run.store_dir : "private");
    r = profile_run(&cli.run, &p, &err);
    if (r == 0)
        r = cli.output != NULL ? profile_save(cli.output, p, &err) : profile_write(stdout, p, &err);
    if (r == 0 && cli.store_configmaps)
        r = store_results(&cli, p, &err);
    if (r == 0)
        log_info("event=profile-done model=%s configs=%zu output=%s", cli.run.model, p->n_configs,
                 cli.output != NULL ? cli.output : "-");
    profile_free(p);
    return r < 0 ? report(r, "profile", &err) : EXIT_OK;
}

/* ---- job ---- */

static int cmd_job(int argc, char **argv)
{
    tetris_error err = {0};
    char name[256];
    int first, r;

    if ((first = parse_command(&job_command, argc, argv)) < 0)
        return EXIT_USAGE;
    if (first != argc - 1)
        return opt_usage_error(&job_command, "expected exactly one MODEL"), EXIT_USAGE;
    struct job_options o = args.job;
    o.model = argv[first];
    if (o.name == NULL) {
        default_name(o.model, name, sizeof(name));
        o.name = name;
    }
    r = job_write_manifest(stdout, &o, &err);
    if (r == -TETRIS_E_INVAL)
        return opt_usage_error(&job_command, "%s", err.msg), EXIT_USAGE;
    return r < 0 ? report(r, "job", &err) : EXIT_OK;
}

/* ---- load ---- */

static json_t *load_summary(const struct load_options *o, const struct load_result *lr,
                            double slo_ms)
{
    double *lat = malloc((lr->n_samples + 1) * sizeof(*lat));
    double sum = 0;
    size_t over = 0;
    if (lat == NULL)
        return NULL;
    for (size_t i = 0; i < lr->n_samples; i++) {
        lat[i] = lr->samples[i].latency_ms;
        sum += lat[i];
        /* A failed request misses any SLO. */
        if (lr->samples[i].status != 200 || (slo_ms > 0 && lat[i] > slo_ms))
            over++;
    }
    size_t n = lr->n_samples;
    json_t *j = json_pack(
        "{s:f, s:f, s:I, s:I, s:I, s:f, s:{s:f, s:f, s:f, s:f, s:f}, s:f, s:I, s:f}", "rate_rps",
        o->rate_rps, "duration_s", o->duration_s, "requests", (json_int_t)n, "ok",
        (json_int_t)lr->n_ok, "failed", (json_int_t)(n - lr->n_ok), "throughput_rps",
        (double)lr->n_ok / lr->elapsed_s, "latency_ms", "mean", n ? sum / (double)n : 0.0, "p50",
        load_percentile(lat, n, 50), "p95", load_percentile(lat, n, 95), "p99",
        load_percentile(lat, n, 99), "max", load_percentile(lat, n, 100), "slo_ms", slo_ms,
        "slo_violations", (json_int_t)over, "slo_violation_ratio",
        n ? (double)over / (double)n : 0.0);
    free(lat);
    return j;
}

static int cmd_load(int argc, char **argv)
{
    const struct opt_program *cmd = &load_command;
    struct load_result lr;
    tetris_error err = {0};
    int first, r;

    if ((first = parse_command(cmd, argc, argv)) < 0)
        return EXIT_USAGE;
    struct load_options o = args.load;
    if (first == argc || o.rate_rps <= 0 || o.duration_s <= 0)
        return opt_usage_error(cmd, "needs URL..., --rate and --duration"), EXIT_USAGE;
    size_t n = (size_t)(argc - first);
    cleanup_free struct load_target *targets = calloc(n, sizeof(*targets));
    if (targets == NULL)
        return report(tetris_fail(&err, TETRIS_E_NOMEM, 0, "out of memory"), "load", &err);
    for (size_t i = 0; i < n; i++) {
        char *arg = argv[first + (int)i], *eq = strrchr(arg, '=');
        targets[i].weight = 1;
        if (eq != NULL) {
            *eq = '\0';
            if (cli_parse_double(arg, eq + 1, 0.000001, 86400, &targets[i].weight, &err) < 0)
                return opt_usage_error(cmd, "%s", err.msg), EXIT_USAGE;
        }
        if (strncmp(arg, "http://", 7) != 0)
            return opt_usage_error(cmd, "'%s' is not an http:// URL", arg), EXIT_USAGE;
        targets[i].url = arg;
    }
    o.targets = targets;
    o.n_targets = n;
    if ((r = load_run(&o, &lr, &err)) < 0)
        return report(r, "load", &err);
    json_t *j = load_summary(&o, &lr, args.slo_ms);
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    load_result_free(&lr);
    if (text == NULL)
        return report(tetris_fail(&err, TETRIS_E_NOMEM, 0, "out of memory"), "load", &err);
    printf("%s\n", text);
    free(text);
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } commands[] = {{"profile", cmd_profile}, {"index", cmd_index}, {"job", cmd_job},
                    {"load", cmd_load}};
    int first;

    log_init(argv[0]);
    if ((first = opt_parse(&profiler_program, argc, argv)) < 0)
        return EXIT_USAGE;
    if (first == argc)
        return opt_usage_error(&profiler_program,
                               "expected a command: profile, index, job or load"),
               EXIT_USAGE;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(argv[first], commands[i].name) == 0)
            return commands[i].fn(argc - first, argv + first);
    return opt_usage_error(&profiler_program, "unknown command '%s'", argv[first]), EXIT_USAGE;
}
