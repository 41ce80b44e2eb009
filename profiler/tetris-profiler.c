/* tetris-profiler - a model's registration data: its tensor manifest
 * (`index`) and its latency profile over instance configs <c, b, p>
 * (`profile`), measured on real tetris-function processes; `job` prints the
 * Kubernetes Job that does both on a node and stores the results as
 * ConfigMaps; `load` drives functions at a fixed rate (benchmarks). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/cli.h"
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

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tetris-profiler profile MODEL [--grid SPEC] [c=LIST b=LIST p=LIST]\n"
            "                               [--duration S] [--warmup S] [-o FILE] [--name N]\n"
            "                               [--store DIR [--direct] | --private]\n"
            "                               [--max-wait-ms MS] [--clients-per-slot K]\n"
            "                               [--function PATH] [--log-dir DIR]\n"
            "                               [--store-configmaps [--namespace NS]\n"
            "                                [--kubeconfig F | --kube-server URL --kube-sa-dir D]]\n"
            "       tetris-profiler index MODEL [-o MANIFEST]\n"
            "       tetris-profiler job MODEL [--name N] [--namespace NS] [--image I]\n"
            "                               [--model-dir DIR] [--store DIR] [--grid SPEC]\n"
            "                               [--duration S] [--warmup S] [--node NODE]\n"
            "                               [--api-server URL] [--sa-secret SECRET]\n"
            "       tetris-profiler load URL[=WEIGHT]... --rate R --duration S [--warmup S]\n"
            "                               [--clients N] [--slo-ms T]\n"
            "\n"
            "profile  runs tetris-function (next to this program, or --function) under every\n"
            "         config of the grid (default c=1,2 b=1,2,4 p=1,2,3,4): limited to c CPUs\n"
            "         by a cgroup CPU quota (a child of our own cpu cgroup; without a writable\n"
            "         one it warns and runs unlimited), batch b, p workers with max(1, c/p)\n"
            "         intra-op threads each, saturated by a closed loop of 2*b*p clients.\n"
            "         Records per config the latency of a batch (mean, p95, p99 over\n"
            "         distinct batches), throughput, peak private memory (smaps, store\n"
            "         mappings excluded) and the bytes mapped from the store, and writes the\n"
            "         profile YAML (stdout or -o FILE). Weights come from the store at DIR\n"
            "         (default %s, through its node daemon; --direct: ingest\n"
            "         ourselves) or are private (--private). --duration S (default 5) is\n"
            "         measured after --warmup S (default 1). A progress bar is drawn when\n"
            "         stderr is a terminal. The functions log to our stderr (not on a\n"
            "         terminal, where the bar is), or with --log-dir to DIR/function-N.log.\n"
            "         --store-configmaps also stores the profile and the model's manifest\n"
            "         as ConfigMaps (see job).\n"
            "index    writes MODEL's tensor manifest (JSON) to stdout or MANIFEST.\n"
            "job      prints a Kubernetes Job (with its ServiceAccount and Role) that runs\n"
            "         `profile --store-configmaps` for MODEL, a file in the node's\n"
            "         --model-dir (default %s), in namespace NS (default\n"
            "         " TETRIS_NAMESPACE "), storing ConfigMaps "
            TETRIS_MANIFEST_CONFIGMAP_PREFIX "<name> (label\n"
            "         " TETRIS_LABEL_MODEL ", key " TETRIS_MANIFEST_CONFIGMAP_KEY
            ": what the scheduler extender reads)\n"
            "         and " TETRIS_PROFILE_CONFIGMAP_PREFIX "<name> (label " TETRIS_LABEL_PROFILE
            ", key " TETRIS_PROFILE_CONFIGMAP_KEY ").\n"
            "         Apply with: tetris-profiler job MODEL | kubectl apply -f -\n"
            "         --api-server and --sa-secret (a Secret with token, ca.crt, namespace)\n"
            "         replace the in-cluster service account where it has no token.\n"
            "load     sends {\"seed\": N} requests to the functions at URL (weighted) at a\n"
            "         fixed rate R (open loop, latency counted from when a request was\n"
            "         due) and prints a JSON summary; with --slo-ms the requests over T.\n"
            "\n"
            "Exit status: 0 ok, 1 failure (a function or the API failed), 2 usage,\n"
            "3 bad or missing model file.\n",
            STORE_DEFAULT_DIR, TETRIS_MODEL_HOST_DIR);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "tetris-profiler: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'tetris-profiler --help'.\n");
    return EXIT_USAGE;
}

static int report(int r, const char *what, const tetris_error *err)
{
    char quoted[1100];
    log_error("event=error command=%s code=%s msg=%s", what, tetris_code_name(r),
              log_quote(err->msg, quoted, sizeof(quoted)));
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

static int cmd_index(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {NULL, 0, NULL, 0}};
    const char *output = "-";
    tetris_error err = {0};
    model *m = NULL;
    int c, r;

    optind = 1;
    while ((c = getopt_long(argc, argv, "o:", longopts, NULL)) != -1) {
        if (c != 'o')
            return usage_error("%s", "index: bad option");
        output = optarg;
    }
    if (optind != argc - 1)
        return usage_error("%s", "index: expected exactly one MODEL");
    r = model_parse_file(argv[optind], &m, &err);
    if (r == 0)
        r = model_sources_realpath(m, &err); /* same manifest as tetris-agent index */
    if (r == 0)
        r = model_compute_digests(m, &err);
    if (r == 0)
        r = manifest_write_file(m, output, &err);
    if (r == 0)
        log_info("event=index model=%s tensors=%zu bytes=%llu manifest=%s", argv[optind],
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

enum {
    OPT_GRID = 256, OPT_DURATION, OPT_WARMUP, OPT_NAME, OPT_STORE, OPT_DIRECT, OPT_PRIVATE,
    OPT_MAX_WAIT, OPT_CLIENTS, OPT_FUNCTION, OPT_LOG_DIR, OPT_CONFIGMAPS, OPT_NAMESPACE,
    OPT_KUBECONFIG, OPT_KUBE_SERVER, OPT_KUBE_SA_DIR, OPT_IMAGE, OPT_MODEL_DIR, OPT_NODE,
    OPT_API_SERVER, OPT_SA_SECRET, OPT_RATE, OPT_SLO,
};

static int parse_profile_args(int argc, char **argv, struct profile_cli *cli)
{
    static const struct option longopts[] = {
        {"grid", required_argument, NULL, OPT_GRID},
        {"duration", required_argument, NULL, OPT_DURATION},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"output", required_argument, NULL, 'o'},
        {"name", required_argument, NULL, OPT_NAME},
        {"store", required_argument, NULL, OPT_STORE},
        {"direct", no_argument, NULL, OPT_DIRECT},
        {"private", no_argument, NULL, OPT_PRIVATE},
        {"max-wait-ms", required_argument, NULL, OPT_MAX_WAIT},
        {"clients-per-slot", required_argument, NULL, OPT_CLIENTS},
        {"function", required_argument, NULL, OPT_FUNCTION},
        {"log-dir", required_argument, NULL, OPT_LOG_DIR},
        {"store-configmaps", no_argument, NULL, OPT_CONFIGMAPS},
        {"namespace", required_argument, NULL, OPT_NAMESPACE},
        {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
        {"kube-server", required_argument, NULL, OPT_KUBE_SERVER},
        {"kube-sa-dir", required_argument, NULL, OPT_KUBE_SA_DIR},
        {NULL, 0, NULL, 0}};
    struct profile_run_options *o = &cli->run;
    const char *model_path = NULL;
    bool private_ = false;
    tetris_error err = {0};
    int c;

    memset(cli, 0, sizeof(*cli));
    grid_default(&o->grid);
    o->store_dir = STORE_DEFAULT_DIR;
    o->duration_s = 5;
    o->warmup_s = 1;
    o->max_wait_ms = 10;
    o->clients_per_slot = 2;
    optind = 1;
    /* "+": stop at the first non-option, so that MODEL and grid words may
     * come in any order with the options (handled in the loop). */
    while (optind < argc) {
        if ((c = getopt_long(argc, argv, "+o:", longopts, NULL)) == -1) {
            const char *word = argv[optind++];
            if (strchr(word, '=') != NULL) {
                if (grid_parse(&o->grid, word, &err) < 0)
                    return usage_error("%s", err.msg);
            } else if (model_path == NULL) {
                model_path = word;
            } else {
                return usage_error("profile: unexpected argument '%s'", word);
            }
            continue;
        }
        switch (c) {
        case OPT_GRID:
            if (grid_parse(&o->grid, optarg, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case OPT_DURATION:
            if (cli_parse_double("--duration", optarg, 0.001, 86400, &o->duration_s, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case OPT_WARMUP:
            if (cli_parse_double("--warmup", optarg, 0, 86400, &o->warmup_s, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case OPT_MAX_WAIT:
            if (cli_parse_double("--max-wait-ms", optarg, 0, 86400, &o->max_wait_ms, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case OPT_CLIENTS:
            if (cli_parse_int("--clients-per-slot", optarg, 1, 64, &o->clients_per_slot,
                              &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case 'o': cli->output = optarg; break;
        case OPT_NAME: snprintf(cli->name, sizeof(cli->name), "%s", optarg); break;
        case OPT_STORE: o->store_dir = optarg; break;
        case OPT_DIRECT: o->direct = true; break;
        case OPT_PRIVATE: private_ = true; break;
        case OPT_FUNCTION: snprintf(cli->function_bin, sizeof(cli->function_bin), "%s", optarg); break;
        case OPT_LOG_DIR: o->log_dir = optarg; break;
        case OPT_CONFIGMAPS: cli->store_configmaps = true; break;
        case OPT_NAMESPACE: cli->cm.namespace_ = optarg; break;
        case OPT_KUBECONFIG: cli->cm.kubeconfig = optarg; break;
        case OPT_KUBE_SERVER: cli->cm.server = optarg; break;
        case OPT_KUBE_SA_DIR: cli->cm.sa_dir = optarg; break;
        default: return usage_error("%s", "profile: bad option");
        }
    }
    if (model_path == NULL)
        return usage_error("%s", "profile: expected a MODEL");
    o->model = model_path;
    if (private_ && o->direct)
        return usage_error("%s", "profile: --private excludes --direct");
    if (private_)
        o->store_dir = NULL;
    if (cli->name[0] == '\0')
        default_name(model_path, cli->name, sizeof(cli->name));
    o->name = cli->name;
    if (cli->function_bin[0] == '\0' &&
        fn_process_default_bin(cli->function_bin, sizeof(cli->function_bin), &err) < 0)
        return usage_error("%s", err.msg);
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
    static const struct option longopts[] = {
        {"name", required_argument, NULL, OPT_NAME},
        {"namespace", required_argument, NULL, OPT_NAMESPACE},
        {"image", required_argument, NULL, OPT_IMAGE},
        {"model-dir", required_argument, NULL, OPT_MODEL_DIR},
        {"store", required_argument, NULL, OPT_STORE},
        {"grid", required_argument, NULL, OPT_GRID},
        {"duration", required_argument, NULL, OPT_DURATION},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"node", required_argument, NULL, OPT_NODE},
        {"api-server", required_argument, NULL, OPT_API_SERVER},
        {"sa-secret", required_argument, NULL, OPT_SA_SECRET},
        {NULL, 0, NULL, 0}};
    struct job_options o;
    struct grid g;
    tetris_error err = {0};
    char name[256];
    int c, r;

    job_options_init(&o);
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_NAME: o.name = optarg; break;
        case OPT_NAMESPACE: o.namespace_ = optarg; break;
        case OPT_IMAGE: o.image = optarg; break;
        case OPT_MODEL_DIR: o.model_dir = optarg; break;
        case OPT_STORE: o.store_dir = optarg; break;
        case OPT_GRID:
            grid_default(&g);
            if (grid_parse(&g, optarg, &err) < 0)
                return usage_error("%s", err.msg);
            o.grid = optarg;
            break;
        case OPT_DURATION:
            if (cli_parse_double("--duration", optarg, 0.001, 86400, &o.duration_s, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case OPT_WARMUP:
            if (cli_parse_double("--warmup", optarg, 0, 86400, &o.warmup_s, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case OPT_NODE: o.node = optarg; break;
        case OPT_API_SERVER: o.api_server = optarg; break;
        case OPT_SA_SECRET: o.sa_secret = optarg; break;
        default: return usage_error("%s", "job: bad option");
        }
    }
    if (optind != argc - 1)
        return usage_error("%s", "job: expected exactly one MODEL");
    o.model = argv[optind];
    if (o.name == NULL) {
        default_name(o.model, name, sizeof(name));
        o.name = name;
    }
    r = job_write_manifest(stdout, &o, &err);
    if (r == -TETRIS_E_INVAL)
        return usage_error("%s", err.msg);
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
    static const struct option longopts[] = {
        {"rate", required_argument, NULL, OPT_RATE},
        {"duration", required_argument, NULL, OPT_DURATION},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"clients", required_argument, NULL, OPT_CLIENTS},
        {"slo-ms", required_argument, NULL, OPT_SLO},
        {NULL, 0, NULL, 0}};
    struct load_options o = {.clients = 64, .warmup_s = 0};
    struct load_result lr;
    tetris_error err = {0};
    double slo_ms = 0;
    int c, r;

    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_RATE:
            if (cli_parse_double("--rate", optarg, 0.001, 86400, &o.rate_rps, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case OPT_DURATION:
            if (cli_parse_double("--duration", optarg, 0.001, 86400, &o.duration_s, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case OPT_WARMUP:
            if (cli_parse_double("--warmup", optarg, 0, 86400, &o.warmup_s, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case OPT_CLIENTS:
            if (cli_parse_int("--clients", optarg, 1, 4096, &o.clients, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        case OPT_SLO:
            if (cli_parse_double("--slo-ms", optarg, 0.001, 86400, &slo_ms, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        default: return usage_error("%s", "load: bad option");
        }
    }
    if (optind == argc || o.rate_rps <= 0 || o.duration_s <= 0)
        return usage_error("%s", "load: needs URL..., --rate and --duration");
    size_t n = (size_t)(argc - optind);
    cleanup_free struct load_target *targets = calloc(n, sizeof(*targets));
    if (targets == NULL)
        return report(tetris_fail(&err, TETRIS_E_NOMEM, 0, "out of memory"), "load", &err);
    for (size_t i = 0; i < n; i++) {
        char *arg = argv[optind + (int)i], *eq = strrchr(arg, '=');
        targets[i].weight = 1;
        if (eq != NULL) {
            *eq = '\0';
            if (cli_parse_double(arg, eq + 1, 0.000001, 86400, &targets[i].weight, &err) < 0)
                return usage_error("%s", err.msg);
        }
        if (strncmp(arg, "http://", 7) != 0)
            return usage_error("load: '%s' is not an http:// URL", arg);
        targets[i].url = arg;
    }
    o.targets = targets;
    o.n_targets = n;
    if ((r = load_run(&o, &lr, &err)) < 0)
        return report(r, "load", &err);
    json_t *j = load_summary(&o, &lr, slo_ms);
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

    log_init(argv[0]);
    if (argc < 2)
        return usage_error("%s", "expected a command: profile, index, job or load");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tetris-profiler %s\n", TETRIS_VERSION);
        return EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        /* One usage text covers every command: COMMAND --help prints it. */
        for (int a = 2; a < argc && strcmp(argv[a], "--") != 0; a++)
            if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
                usage(stdout);
                return EXIT_OK;
            }
        return commands[i].fn(argc - 1, argv + 1);
    }
    return usage_error("unknown command '%s'", argv[1]);
}
