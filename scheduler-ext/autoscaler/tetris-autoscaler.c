/* tetris-autoscaler.c - `plan` prints the instance configs DTS
 * (or the exact integer program) chooses for a request rate; `run` keeps
 * each function's instances matched to its request rate. */
#include "scheduler-ext/autoscaler/autoscaler.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/cleanup.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/daemon_run.h"
#include "common/fileio.h"
#include "scheduler-ext/autoscaler/ilp.h"
#include "common/log.h"
#include "common/options.h"
#include "protocol/names.h"

/* Exit codes (see exit_text). */
enum {
    EXIT_OK = 0,
    EXIT_INPUT = 1,      /* unreadable or invalid profile or trace; other failures */
    EXIT_USAGE = 2,      /* bad options */
    EXIT_INFEASIBLE = 3, /* no config meets the SLO */
    EXIT_SOLVER = 4,     /* --exact found no plan within its time limit */
    EXIT_CLUSTER = 5,    /* cannot reach the Kubernetes API at start */
};

typedef struct run_config {
    as_function **fns;
    size_t n_fns;
    as_policy policy;
    as_deploy_options deploy;
    double interval_s, duration_s;
    rate_source rates; /* rates.url NULL: traces (local mode) */
    const char *kubeconfig;
    const char *step_file; /* simulated time only */
    bool dry_run, realtime;
} run_config;

static const char commands_text[] =
    "Commands (COMMAND --help lists its options):\n"
    "  plan  the instance configs DTS (or the exact integer program) chooses for a\n"
    "        request rate under a latency SLO, as JSON\n"
    "  run   scales each function's Deployments to its request rate\n";

static const char exit_text[] =
    "exit status: 0 ok, 1 bad input (profile, trace) or another failure, 2 bad usage,\n"
    "3 no config meets the SLO, 4 --exact found no plan in time, 5 Kubernetes API\n"
    "unreachable or refusing at start.\n";

/* What the command's options set: one command runs per process. */
static struct {
    /* plan */
    const char *profile_path, *kubeconfig;
    double rps, limit_ms;
    bool exact;
    plan_options plan;
    /* run: NAME=PROFILE and NAME=FILE in the order given, parsed once
     * every option is known (a ConfigMap needs the kubeconfig) */
    run_config rc;
    const char **function_args, **trace_args;
    bool *openfaas_args;
    size_t n_function_args, n_trace_args;
} args;

static int parse_latency(const struct opt_spec *spec, const char *label, const char *value,
                         tetris_error *err)
{
    (void)label;
    return profile_stat_parse(value, spec->dest, err);
}

static int parse_space(const struct opt_spec *spec, const char *label, const char *value,
                       tetris_error *err)
{
    (void)label;
    return plan_space_parse(value, spec->dest, err);
}

static int parse_mode(const struct opt_spec *spec, const char *label, const char *value,
                      tetris_error *err)
{
    (void)label;
    return plan_mode_parse(value, spec->dest, err);
}

/* An unsigned count in [umin, umax]. */
static int parse_count(const struct opt_spec *spec, const char *label, const char *value,
                       tetris_error *err)
{
    uint64_t n;
    int r = cli_parse_u64(label, value, spec->umin, spec->umax, &n, err);
    if (r == 0)
        *(unsigned *)spec->dest = (unsigned)n;
    return r;
}

/* A Prometheus label matcher, checked as Prometheus would read it. */
static int parse_matcher(const struct opt_spec *spec, const char *label, const char *value,
                         tetris_error *err)
{
    int r = rate_check_matcher(label, value, err);
    if (r == 0)
        *(const char **)spec->dest = value;
    return r;
}

/* --function, --openfaas and --trace: one more of each, loaded later. */
static int parse_function(const struct opt_spec *spec, const char *label, const char *value,
                          tetris_error *err)
{
    (void)label;
    (void)err;
    args.openfaas_args[args.n_function_args] = spec->dest != NULL;
    args.function_args[args.n_function_args++] = value;
    return 0;
}

static int parse_trace(const struct opt_spec *spec, const char *label, const char *value,
                       tetris_error *err)
{
    (void)spec;
    (void)label;
    (void)err;
    args.trace_args[args.n_trace_args++] = value;
    return 0;
}

/* The options of both commands, into plan options *(p). */
#define PLAN_OPTIONS(p)                                                                            \
    {.name = "slo-ms",                                                                             \
     .type = OPT_TYPE_DOUBLE,                                                                      \
     .dest = &(p)->slo_ms,                                                                         \
     .dmin = 0,                                                                                    \
     .dmax = INFINITY,                                                                             \
     .meta = "T",                                                                                  \
     .help = "latency SLO in ms (b=1 configs need l <= T, b>1 l <= T/2)"},                         \
        {.name = "alpha",                                                                          \
         .type = OPT_TYPE_DOUBLE,                                                                  \
         .dest = &(p)->alpha,                                                                      \
         .dmin = 0,                                                                                \
         .dmax = INFINITY,                                                                         \
         .meta = "A",                                                                              \
         .help = "rank by b*p/(l*(m + A*c)), A in MiB per CPU (default 0)"},                       \
        {.name = "sharing",                                                                        \
         .type = OPT_TYPE_FLAG,                                                                    \
         .dest = &(p)->sharing,                                                                    \
         .help = "tensor sharing: memory is marginal (private memory, the model's tensors "        \
                 "once); needs private_bytes in the profile"},                                     \
        {.name = "latency",                                                                        \
         .type = OPT_TYPE_CUSTOM,                                                                  \
         .dest = &(p)->latency,                                                                    \
         .parse = parse_latency,                                                                   \
         .meta = "STAT",                                                                           \
         .help = "mean, p95 or p99 stands for l (default p95)"},                                   \
        {.name = "space",                                                                          \
         .type = OPT_TYPE_CUSTOM,                                                                  \
         .dest = &(p)->space,                                                                      \
         .parse = parse_space,                                                                     \
         .meta = "SPACE",                                                                          \
         .help = "all (default), batching (p=1 configs only) or concurrency (b=1 configs only)"},  \
    {                                                                                              \
        .name = "mode", .type = OPT_TYPE_CUSTOM, .dest = &(p)->mode, .parse = parse_mode,          \
        .meta = "MODE",                                                                            \
        .help = "paper: Algorithm 1, capacity b*p/l (default); refined: capacity from the "        \
                "profile's measured throughput, every instance an equal share of the rate "        \
                "(OpenFaaS CE routing), the cheapest single config that covers it"                 \
    }

static const struct opt_spec plan_options_[] = {
    {.name = "profile",
     .type = OPT_TYPE_STRING,
     .dest = &args.profile_path,
     .meta = "PROFILE",
     .help = "the model's profile: a file, or configmap:NS/NAME (required)"},
    {.name = "rps",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.rps,
     .dmin = 0,
     .dmax = INFINITY,
     .meta = "R",
     .help = "the request rate to plan for (required)"},
    PLAN_OPTIONS(&args.plan),
    {.name = "resident",
     .type = OPT_TYPE_FLAG,
     .dest = &args.plan.resident,
     .help = "with --sharing, the tensors are already resident"},
    {.name = "exact",
     .type = OPT_TYPE_FLAG,
     .dest = &args.exact,
     .help = "solve the integer program with GLPK instead of DTS"},
    {.name = "time-limit-ms",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.limit_ms,
     .dmin = 1,
     .dmax = INFINITY,
     .meta = "N",
     .help = "limit for --exact (default 10000)"},
    {.name = "kubeconfig",
     .type = OPT_TYPE_STRING,
     .dest = &args.kubeconfig,
     .meta = "FILE",
     .help = "read a configmap: profile through this cluster (default: in-cluster)"},
    {0},
};

/* --openfaas's dest only tells it from --function. */
static bool openfaas_mark;

static const struct opt_spec run_options[] = {
    {.name = "function",
     .type = OPT_TYPE_CUSTOM,
     .parse = parse_function,
     .meta = "NAME=PROFILE",
     .help = "a function and its profile (repeatable)"},
    {.name = "openfaas",
     .type = OPT_TYPE_CUSTOM,
     .dest = &openfaas_mark,
     .parse = parse_function,
     .meta = "NAME=PROFILE",
     .help = "a function OpenFaaS deployed (faas-netes's Deployment NAME is the template of "
             "sibling Deployments, one config at a time, sets of at most 5 replicas; "
             "repeatable)"},
    {.name = "trace",
     .type = OPT_TYPE_CUSTOM,
     .parse = parse_trace,
     .meta = "NAME=FILE",
     .help = "local mode: the function's rate from `time_s rps` lines; time is simulated "
             "unless --realtime (repeatable)"},
    {.name = "prometheus",
     .type = OPT_TYPE_STRING,
     .dest = &args.rc.rates.url,
     .meta = "URL",
     .help = "rates from Prometheus's HTTP API"},
    {.name = "query",
     .type = OPT_TYPE_STRING,
     .dest = &args.rc.rates.query,
     .meta = "TEMPLATE",
     .help = "PromQL, {function}, {namespace}, {job} and {instance} replaced "
             "(default " RATE_DEFAULT_QUERY ")"},
    {.name = "gateway-job",
     .type = OPT_TYPE_CUSTOM,
     .dest = &args.rc.rates.job,
     .parse = parse_matcher,
     .meta = "REGEX",
     .help = "the OpenFaaS gateway's scrape job: only its series count, not other targets' "
             "(default " RATE_DEFAULT_GATEWAY_JOB ")"},
    {.name = "gateway-instance",
     .type = OPT_TYPE_CUSTOM,
     .dest = &args.rc.rates.instance,
     .parse = parse_matcher,
     .meta = "REGEX",
     .help = "the gateway's scrape instances (default " RATE_DEFAULT_GATEWAY_INSTANCE
             "); a rate above twice what a function's instances serve counts as that "
             "(event=rate-clamped)"},
    {.name = "dry-run",
     .type = OPT_TYPE_FLAG,
     .dest = &args.rc.dry_run,
     .help = "print actions as JSON lines instead of acting"},
    {.name = "kubeconfig",
     .type = OPT_TYPE_STRING,
     .dest = &args.rc.kubeconfig,
     .meta = "FILE",
     .help = "act through this cluster (default: in-cluster)"},
    {.name = "interval",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.rc.interval_s,
     .dmin = 0.001,
     .dmax = INFINITY,
     .meta = "S",
     .help = "seconds between decisions (default 5)"},
    {.name = "headroom",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.rc.policy.headroom_out,
     .dmin = 0,
     .dmax = INFINITY,
     .meta = "H",
     .help = "scale out when rate*(1+H) > capacity (default 0.1)"},
    {.name = "scale-in-headroom",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.rc.policy.headroom_in,
     .dmin = 0,
     .dmax = INFINITY,
     .meta = "H",
     .help = "release only while capacity >= peak*(1+H) (default 0.3; at least --headroom)"},
    {.name = "cooldown",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.rc.policy.cooldown_s,
     .dmin = 0,
     .dmax = INFINITY,
     .meta = "S",
     .help = "no scale-in within S s of a change (default 60)"},
    {.name = "window",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.rc.policy.window_s,
     .dmin = 0,
     .dmax = INFINITY,
     .meta = "S",
     .help = "peak = highest rate in the last S s (default 60)"},
    {.name = "min-instances",
     .type = OPT_TYPE_CUSTOM,
     .dest = &args.rc.policy.min_instances,
     .parse = parse_count,
     .umin = 0,
     .umax = 1000,
     .meta = "N",
     .help = "keep at least N instances per function (default 1, at most 1000)"},
    {.name = "max-instances",
     .type = OPT_TYPE_CUSTOM,
     .dest = &args.rc.policy.max_instances,
     .parse = parse_count,
     .umin = 1,
     .umax = 100000,
     .meta = "N",
     .help = "never more than N instances per function (default " TETRIS_STRINGIFY(
         AS_DEFAULT_MAX_INSTANCES) ")"},
    {.name = "realtime",
     .type = OPT_TYPE_FLAG,
     .dest = &args.rc.realtime,
     .help = "pace a trace in real time (for a live cluster)"},
    {.name = "step-file",
     .type = OPT_TYPE_STRING,
     .dest = &args.rc.step_file,
     .meta = "FILE",
     .help = "simulated time: after each decision round, write its time to FILE and wait "
             "until FILE is removed (lets a test check the cluster between steps)"},
    {.name = "duration",
     .type = OPT_TYPE_DOUBLE,
     .dest = &args.rc.duration_s,
     .dmin = 0,
     .dmax = INFINITY,
     .meta = "S",
     .help = "stop after S seconds"},
    {.name = "namespace",
     .type = OPT_TYPE_STRING,
     .dest = &args.rc.deploy.namespace_,
     .meta = "NS",
     .help = "the functions' namespace (default " TETRIS_FUNCTION_NAMESPACE ")"},
    {.name = "image",
     .type = OPT_TYPE_STRING,
     .dest = &args.rc.deploy.image,
     .meta = "IMAGE",
     .help = "function image (default tetris-function:" TETRIS_VERSION ")"},
    {.name = "image-pull-policy",
     .type = OPT_TYPE_STRING,
     .dest = &args.rc.deploy.pull_policy,
     .meta = "P",
     .help = "(default IfNotPresent)"},
    {.name = "store",
     .type = OPT_TYPE_STRING,
     .dest = &args.rc.deploy.store_dir,
     .meta = "DIR",
     .help = "tensor store host path (default " TETRIS_STORE_DIR ")"},
    {.name = "model-dir",
     .type = OPT_TYPE_STRING,
     .dest = &args.rc.deploy.model_dir,
     .meta = "DIR",
     .help = TETRIS_ENV_MODEL " = DIR/<model_file> (default " TETRIS_MODEL_DIR ")"},
    {.name = "port",
     .type = OPT_TYPE_INT,
     .dest = &args.rc.deploy.port,
     .min = 1,
     .max = 65535,
     .meta = "N",
     .help = "the function's HTTP port (default " TETRIS_STRINGIFY(TETRIS_FUNCTION_PORT) ")"},
    {.name = "scheduler-name",
     .type = OPT_TYPE_STRING,
     .dest = &args.rc.deploy.scheduler_name,
     .meta = "NAME",
     .help = "(default " TETRIS_SCHEDULER_NAME ")"},
    PLAN_OPTIONS(&args.rc.policy.plan),
    {0},
};

static const struct opt_program autoscaler_program = {
    .name = "tetris-autoscaler",
    .synopsis = "COMMAND [OPTIONS]",
    .about = commands_text,
    .epilogue = exit_text,
    .options_first = true,
};

static const struct opt_program plan_command = {
    .name = "tetris-autoscaler plan",
    .synopsis = "--profile PROFILE --rps R --slo-ms T [OPTION]...",
    .about = "The instance configs for R requests/s under a latency SLO of T ms, as JSON\n"
             "(configs [{c, m (MiB), b, p, l (ms), count}], instances, memory_mib,\n"
             "covered_rps, algorithm, decision_time_ms).\n",
    .options = plan_options_,
    .epilogue = exit_text,
};

static const struct opt_program run_command = {
    .name = "tetris-autoscaler run",
    .synopsis = "(--function | --openfaas) NAME=PROFILE... --slo-ms T\n"
                "(--trace NAME=FILE... | --prometheus URL) [OPTION]...",
    .about = "Scales each function's Deployments to its request rate, every --interval.\n",
    .options = run_options,
    .epilogue = exit_text,
};

static int exit_for(int rc)
{
    switch (-rc) {
    case TETRIS_E_NOTFOUND:
        return EXIT_INFEASIBLE;
    case TETRIS_E_TIMEOUT:
        return EXIT_SOLVER;
    default:
        return EXIT_INPUT;
    }
}

/* Loading profiles and traces: the options', the cluster's, or the input's
 * fault. */
static int exit_for_load(int rc)
{
    switch (-rc) {
    case TETRIS_E_INVAL:
        return EXIT_USAGE;
    case TETRIS_E_UNAVAILABLE:
    case TETRIS_E_TIMEOUT:
    case TETRIS_E_DENIED:
        return EXIT_CLUSTER;
    default:
        return EXIT_INPUT;
    }
}

/* ---- plan ---- */

static json_t *plan_json(const profile *p, const plan *pl, const plan_options *o, double rps,
                         bool exact, double decision_ms)
{
    json_t *configs = json_array();
    for (size_t i = 0; i < pl->n_entries; i++) {
        const profile_config *cfg = &p->configs[pl->entries[i].config];
        json_array_append_new(configs,
                              json_pack("{s:f, s:f, s:i, s:i, s:f, s:i, s:f}", "c", cfg->c, "m",
                                        plan_instance_mib(cfg, o), "b", cfg->b, "p", cfg->p, "l",
                                        profile_config_latency(cfg, o->latency), "count",
                                        (int)pl->entries[i].count, "capacity_rps",
                                        plan_config_capacity(cfg, o)));
    }
    json_t *out = json_pack(
        "{s:s, s:b, s:s, s:s, s:f, s:f, s:s, s:f, s:b, s:b, s:s, s:o, s:i, s:f, s:f, s:f, s:f, "
        "s:f}",
        "model", p->model, "measured", p->measured, "algorithm", exact ? "ilp" : "dts", "mode",
        plan_mode_name(o->mode), "rps", rps, "slo_ms", o->slo_ms, "latency",
        profile_stat_name(o->latency), "alpha", o->alpha, "sharing", o->sharing, "resident",
        o->resident, "space", plan_space_name(o->space), "configs", configs, "instances",
        (int)pl->instances, "memory_mib", pl->memory_mib, "shared_mib", pl->shared_mib, "cpus",
        pl->cpus, "covered_rps", pl->covered_rps, "decision_time_ms", decision_ms);
    if (exact)
        json_object_set_new(out, "optimal", json_boolean(pl->optimal));
    return out;
}

static int cmd_plan(int argc, char **argv)
{
    const struct opt_program *cmd = &plan_command;
    tetris_error err = {0};
    int first;

    memset(&args, 0, sizeof(args));
    args.rps = -1;
    args.limit_ms = 10000;
    args.plan.latency = PROFILE_STAT_P95;
    if ((first = opt_parse(cmd, argc, argv)) < 0)
        return EXIT_USAGE;
    const char *path = args.profile_path, *kubeconfig = args.kubeconfig;
    double rps = args.rps, limit_ms = args.limit_ms;
    bool exact = args.exact;
    plan_options o = args.plan;
    if (path == NULL || rps < 0 || o.slo_ms <= 0 || first != argc)
        return opt_usage_error(cmd, "needs --profile, --rps and --slo-ms > 0"), EXIT_USAGE;
    if (o.resident && !o.sharing)
        return opt_usage_error(cmd, "--resident needs --sharing"), EXIT_USAGE;
    profile *p = NULL;
    int rc = as_profile_load(path, kubeconfig, &p, &err);
    if (rc < 0) {
        fprintf(stderr, "tetris-autoscaler: %s\n", err.msg);
        return exit_for_load(rc);
    }
    plan pl;
    double start = clock_now_ms();
    rc = exact ? ilp_plan(p, rps, &o, (int)fmin(limit_ms, 1e9), &pl, &err)
               : dts_plan(p, rps, &o, &pl, &err);
    double decision_ms = clock_now_ms() - start;
    if (rc < 0) {
        fprintf(stderr, "tetris-autoscaler: %s\n", err.msg);
        profile_free(p);
        return exit_for(rc);
    }
    json_t *out = plan_json(p, &pl, &o, rps, exact, decision_ms);
    int wrote = out ? json_dumpf(out, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) : -1;
    json_decref(out);
    plan_clear(&pl);
    profile_free(p);
    if (wrote != 0 || puts("") == EOF || fflush(stdout) != 0) {
        fprintf(stderr, "tetris-autoscaler: cannot write the plan\n");
        return EXIT_INPUT;
    }
    return EXIT_OK;
}

/* ---- run ---- */

/* DNS-1123 label: it becomes part of Deployment names and label values. */
static bool valid_function_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 40 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-'))
            return false;
    return true;
}

static as_function *find_function(run_config *rc, const char *name)
{
    for (size_t i = 0; i < rc->n_fns; i++)
        if (strcmp(rc->fns[i]->name, name) == 0)
            return rc->fns[i];
    return NULL;
}

/* Each config becomes a Deployment named by its key: two configs with one
 * key would fight over the same Deployment. */
static int check_distinct_configs(const profile *p, tetris_error *err)
{
    for (size_t i = 0; i < p->n_configs; i++)
        for (size_t j = 0; j < i; j++) {
            char a[96], b[96];
            as_config_key(&p->configs[i], a, sizeof a);
            as_config_key(&p->configs[j], b, sizeof b);
            if (strcmp(a, b) == 0)
                return tetris_fail(err, TETRIS_E_FORMAT, 0,
                                   "profile %s: configs %zu and %zu are both %s", p->model, j,
                                   i, a);
        }
    return 0;
}

/* --function NAME=PROFILE (a file or configmap:NS/NAME); --openfaas
 * NAME=PROFILE for a function OpenFaaS deployed. */
static int add_function(run_config *rc, const char *arg, bool openfaas, tetris_error *err)
{
    cleanup_free char *name = strdup(arg);
    if (name == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "--function");
    char *eq = strchr(name, '=');
    if (eq == NULL || eq[1] == '\0')
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--function %s: expected NAME=PROFILE", arg);
    *eq = '\0';
    if (!valid_function_name(name))
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "--function %s: the name must be lowercase letters, digits and '-' "
                           "(at most 40)",
                           arg);
    if (find_function(rc, name) != NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--function %s given twice", name);
    profile *p = NULL;
    int r = as_profile_load(eq + 1, rc->kubeconfig, &p, err);
    if (r < 0)
        return r;
    if (!names_label_value_valid(p->model)) {
        r = tetris_fail(err, TETRIS_E_FORMAT, 0,
                        "profile %s: model name '%s' is not a valid label value (1-63 of "
                        "[A-Za-z0-9._-], alphanumeric at both ends): its pods are "
                        "labelled " TETRIS_LABEL_MODEL "=<model>",
                        eq + 1, p->model);
        profile_free(p);
        return r;
    }
    if ((r = check_distinct_configs(p, err)) < 0) {
        profile_free(p);
        return r;
    }
    as_function **grown = realloc(rc->fns, (rc->n_fns + 1) * sizeof *grown);
    if (grown == NULL) {
        profile_free(p);
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "--function");
    }
    rc->fns = grown;
    r = as_function_new(name, p, &rc->fns[rc->n_fns], err);
    if (r < 0) {
        profile_free(p);
        return r;
    }
    rc->n_fns++;
    if (openfaas)
        return as_function_set_openfaas(rc->fns[rc->n_fns - 1], err);
    return 0;
}

/* --trace NAME=FILE for a --function NAME */
static int add_trace(run_config *rc, const char *arg, tetris_error *err)
{
    cleanup_free char *name = strdup(arg);
    if (name == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "--trace");
    char *eq = strchr(name, '=');
    if (eq == NULL || eq[1] == '\0')
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--trace %s: expected NAME=FILE", arg);
    *eq = '\0';
    as_function *fn = find_function(rc, name);
    if (fn == NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--trace %s: no --function %s", arg, name);
    if (fn->trace != NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--trace for %s given twice", name);
    return rate_trace_load(eq + 1, &fn->trace, err);
}

static void log_state(const as_function *fn, const run_config *rc, double now_s, double rps)
{
    log_info("event=state function=%s time_s=%.3f rate_rps=%.3f capacity_rps=%.3f "
             "instances=%u memory_mib=%.1f",
             fn->name, now_s, rps, as_capacity_rps(fn, &rc->policy.plan), as_instances(fn),
             as_memory_mib(fn, &rc->policy.plan));
}

/* One decision for one function; failures are logged and retried next tick. */
static void tick_function(as_function *fn, run_config *rc, as_actuator *act, double now_s)
{
    tetris_error err = {0};
    double rps;
    if (fn->openfaas && act->refresh != NULL && act->refresh(act, fn, &err) < 0) {
        log_warn("event=function-unavailable function=%s msg=%s", fn->name, LOG_Q(err.msg));
        return; /* not deployed (yet), or the API is down: nothing to scale */
    }
    if (fn->trace != NULL) {
        rps = rate_trace_at(fn->trace, now_s);
    } else if (rate_prometheus(&rc->rates, fn->name, rc->deploy.namespace_, &rps, &err) < 0) {
        log_warn("event=rate-unavailable function=%s msg=%s", fn->name, LOG_Q(err.msg));
        return; /* no data, no decision */
    } else if (rps > as_rate_ceiling(fn, &rc->policy.plan)) {
        double ceiling = as_rate_ceiling(fn, &rc->policy.plan);
        log_warn("event=rate-clamped function=%s rate_rps=%.3f ceiling_rps=%.3f instances=%u",
                 fn->name, rps, ceiling, as_instances(fn));
        rps = ceiling;
    }
    size_t n = fn->prof->n_configs;
    cleanup_free unsigned *want = calloc(n, sizeof *want);
    if (want == NULL) {
        log_error("event=oom function=%s", fn->name);
        return;
    }
    const char *reason = NULL;
    if (as_decide(fn, &rc->policy, now_s, rps, want, &reason, &err) < 0) {
        log_error("event=decide-failed function=%s msg=%s", fn->name, LOG_Q(err.msg));
        return;
    }
    if (reason == NULL)
        return;
    bool changed = false;
    for (size_t i = 0; i < n; i++) {
        if (want[i] == fn->replicas[i])
            continue;
        as_change ch = {.time_s = now_s, .rps = rps, .reason = reason, .config = i,
                        .from = fn->replicas[i], .to = want[i]};
        if (act->apply(act, fn, &ch, &err) < 0) {
            log_error("event=apply-failed function=%s msg=%s", fn->name, LOG_Q(err.msg));
            continue;
        }
        fn->replicas[i] = want[i];
        changed = true;
    }
    if (changed) {
        fn->last_change_s = now_s;
        log_state(fn, rc, now_s, rps);
    }
}

/* --step-file: FILE holds the time of the round just acted on (written
 * whole, by rename); whoever watches removes it to let the next round
 * start. Returns -1 when FILE cannot be written. */
static int step_handshake(const char *path, double now_s)
{
    char text[64];
    int len = snprintf(text, sizeof text, "%.3f\n", now_s);
    tetris_error err = {0};
    if (file_replace(path, text, (size_t)len, 0644, &err) < 0) {
        log_error("event=step-file-failed file=%s msg=%s", path, LOG_Q(err.msg));
        return -1;
    }
    while (!daemon_run_stop_pending() && access(path, F_OK) == 0)
        clock_sleep_ms(20);
    return 0;
}

/* `run`'s state for daemon_run's steps: the checked configuration, the
 * actuator once started, and the clock of the rounds. */
struct run {
    run_config *rc;
    as_actuator *act;
    int start_status; /* the exit status when start failed */
    bool started;     /* start succeeded: stop reports each function */
    bool failed;      /* a round failed: no report */
    bool simulated;   /* time is the trace's, one interval a round */
    double end_s;     /* the last round's time */
    double sim_s;     /* simulated: the next round's time */
    double start_ms;  /* real time: the first round's clock_now_ms() */
    double wait_s;    /* until the next round */
};

/* A profile that cannot meet the SLO at all is a configuration error: say
 * so now rather than at the first request. Then the actuator, which adopts
 * what each function already runs. */
static int run_start(void *ctx, tetris_error *err)
{
    struct run *run = ctx;
    run_config *rc = run->rc;
    int r;

    for (size_t i = 0; i < rc->n_fns; i++) {
        plan pl;
        if ((r = dts_plan(rc->fns[i]->prof, 1, &rc->policy.plan, &pl, err)) < 0) {
            log_error("event=bad-profile function=%s msg=%s", rc->fns[i]->name, LOG_Q(err->msg));
            run->start_status = exit_for(r);
            return r;
        }
        plan_clear(&pl);
    }
    r = rc->dry_run ? as_actuator_dry_run(&rc->deploy, &run->act, err)
                    : as_actuator_kube(&rc->deploy, rc->kubeconfig, &run->act, err);
    if (r < 0) {
        log_error("event=actuator-failed msg=%s", LOG_Q(err->msg));
        run->start_status = rc->dry_run ? EXIT_INPUT : EXIT_CLUSTER;
        return r;
    }
    for (size_t i = 0; i < rc->n_fns; i++)
        if ((r = run->act->adopt(run->act, rc->fns[i], err)) < 0) {
            log_error("event=adopt-failed function=%s msg=%s", rc->fns[i]->name, LOG_Q(err->msg));
            run->start_status = EXIT_CLUSTER;
            return r;
        }
    log_info("event=start functions=%zu mode=%s actuator=%s slo_ms=%g sharing=%d", rc->n_fns,
             rc->rates.url ? "prometheus" : "trace", rc->dry_run ? "dry-run" : "kubernetes",
             rc->policy.plan.slo_ms, rc->policy.plan.sharing);
    bool local = rc->rates.url == NULL;
    run->end_s = INFINITY;
    if (local) {
        run->end_s = 0;
        for (size_t i = 0; i < rc->n_fns; i++)
            run->end_s = fmax(run->end_s, rate_trace_end(rc->fns[i]->trace));
    }
    if (rc->duration_s > 0)
        run->end_s = fmin(run->end_s, rc->duration_s);
    run->simulated = local && !rc->realtime;
    run->start_ms = clock_now_ms();
    run->started = true;
    return 0;
}

static int run_start_failed(void *ctx, int r, const tetris_error *err)
{
    (void)r;
    (void)err;
    return ((const struct run *)ctx)->start_status;
}

static void run_stop(void *ctx)
{
    struct run *run = ctx;
    run_config *rc = run->rc;
    if (run->started && !run->failed)
        for (size_t i = 0; i < rc->n_fns; i++)
            log_info("event=done function=%s instances=%u memory_mib=%.1f", rc->fns[i]->name,
                     as_instances(rc->fns[i]), as_memory_mib(rc->fns[i], &rc->policy.plan));
    if (run->act != NULL)
        run->act->destroy(run->act);
}

static double run_tick_wait_s(void *ctx)
{
    return ((const struct run *)ctx)->wait_s;
}

/* One round: a decision for every function at the round's time; then, in
 * real time, a wait for the next multiple of the interval. Ends the run
 * once the traces (or --duration) are over. */
static int run_tick(void *ctx)
{
    struct run *run = ctx;
    run_config *rc = run->rc;
    double now_s = run->simulated ? run->sim_s : (clock_now_ms() - run->start_ms) / 1000.0;

    if (now_s > run->end_s + 1e-9)
        return EXIT_OK;
    for (size_t i = 0; i < rc->n_fns && !daemon_run_stop_pending(); i++)
        tick_function(rc->fns[i], rc, run->act, now_s);
    if (rc->step_file != NULL && !daemon_run_stop_pending() &&
        step_handshake(rc->step_file, now_s) < 0) {
        run->failed = true;
        return EXIT_INPUT;
    }
    run->sim_s += rc->interval_s;
    if (!run->simulated) {
        double next_ms = run->start_ms +
                         ceil((clock_now_ms() - run->start_ms) / 1e3 / rc->interval_s) *
                             rc->interval_s * 1e3;
        run->wait_s = fmax(0, next_ms - clock_now_ms()) / 1e3;
    }
    return DAEMON_RUN_CONTINUE;
}

static int cmd_run(int argc, char **argv)
{
    const struct opt_program *cmd = &run_command;
    tetris_error err = {0};
    int first, status = EXIT_USAGE;
    /* At most one --function and one --trace per argument. */
    cleanup_free const char **function_args = calloc((size_t)argc, sizeof(char *));
    cleanup_free const char **trace_args = calloc((size_t)argc, sizeof(char *));
    cleanup_free bool *openfaas_args = calloc((size_t)argc, sizeof(bool));
    if (function_args == NULL || trace_args == NULL || openfaas_args == NULL) {
        fprintf(stderr, "tetris-autoscaler: out of memory\n");
        return EXIT_INPUT;
    }
    memset(&args, 0, sizeof(args));
    args.rc = (run_config){
        .policy = {.plan = {.latency = PROFILE_STAT_P95},
                   .headroom_out = 0.1,
                   .headroom_in = 0.3,
                   .cooldown_s = 60,
                   .window_s = 60,
                   .min_instances = 1,
                   .max_instances = AS_DEFAULT_MAX_INSTANCES},
        .deploy = {.namespace_ = TETRIS_FUNCTION_NAMESPACE,
                   .image = "tetris-function:" TETRIS_VERSION,
                   .pull_policy = "IfNotPresent",
                   .store_dir = TETRIS_STORE_DIR,
                   .scheduler_name = TETRIS_SCHEDULER_NAME,
                   .model_dir = TETRIS_MODEL_DIR,
                   .port = TETRIS_FUNCTION_PORT},
        .interval_s = 5,
        .rates = {.query = RATE_DEFAULT_QUERY,
                  .job = RATE_DEFAULT_GATEWAY_JOB,
                  .instance = RATE_DEFAULT_GATEWAY_INSTANCE},
    };
    args.function_args = function_args;
    args.trace_args = trace_args;
    args.openfaas_args = openfaas_args;
    if ((first = opt_parse(cmd, argc, argv)) < 0)
        return EXIT_USAGE;
    run_config rc = args.rc;
    size_t n_function_args = args.n_function_args, n_trace_args = args.n_trace_args;
    rc.deploy.plan = rc.policy.plan;
    for (size_t i = 0; i < n_function_args + n_trace_args; i++) {
        int r = i < n_function_args ? add_function(&rc, function_args[i], openfaas_args[i], &err)
                                    : add_trace(&rc, trace_args[i - n_function_args], &err);
        if (r < 0) {
            fprintf(stderr, "tetris-autoscaler: %s\n", err.msg);
            status = exit_for_load(r);
            goto out;
        }
    }
    if (first != argc || rc.n_fns == 0 || !(rc.policy.plan.slo_ms > 0)) {
        opt_usage_error(cmd, "needs --function or --openfaas NAME=PROFILE and "
                             "--slo-ms > 0");
        goto out;
    }
    if (rc.policy.min_instances > rc.policy.max_instances) {
        opt_usage_error(cmd, "--min-instances %u exceeds --max-instances %u",
                        rc.policy.min_instances, rc.policy.max_instances);
        goto out;
    }
    if (rc.policy.headroom_in < rc.policy.headroom_out) {
        opt_usage_error(cmd, "--scale-in-headroom must be >= --headroom, "
                             "or the autoscaler oscillates");
        goto out;
    }
    for (size_t i = 0; i < rc.n_fns; i++) {
        bool traced = rc.fns[i]->trace != NULL;
        if (traced == (rc.rates.url != NULL)) {
            opt_usage_error(cmd,
                            "function %s: give either a --trace for "
                            "every function or --prometheus",
                            rc.fns[i]->name);
            goto out;
        }
    }
    if (rc.step_file != NULL && (rc.rates.url != NULL || rc.realtime)) {
        opt_usage_error(cmd, "--step-file needs traces in simulated time "
                             "(no --prometheus, no --realtime)");
        goto out;
    }
    if (rc.policy.plan.sharing)
        for (size_t i = 0; i < rc.n_fns; i++)
            if (plan_check(rc.fns[i]->prof, &rc.policy.plan, &err) < 0) {
                log_error("event=bad-profile msg=%s", LOG_Q(err.msg));
                status = EXIT_INPUT;
                goto out;
            }
    status = daemon_run(&(struct daemon_run){.ctx = &(struct run){.rc = &rc},
                                             .start = run_start,
                                             .stop = run_stop,
                                             .start_failed = run_start_failed,
                                             .tick = run_tick,
                                             .tick_wait_s = run_tick_wait_s});
out:
    for (size_t i = 0; i < rc.n_fns; i++)
        as_function_free(rc.fns[i]);
    free(rc.fns);
    return status;
}

int main(int argc, char **argv)
{
    int first, status;

    log_init(argv[0]);
    if ((first = opt_parse(&autoscaler_program, argc, argv)) < 0)
        return EXIT_USAGE;
    if (first == argc)
        return opt_usage_error(&autoscaler_program, "expected a command: plan or run"), EXIT_USAGE;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (strcmp(argv[first], "plan") == 0) {
        status = cmd_plan(argc - first, argv + first);
    } else if (strcmp(argv[first], "run") == 0) {
        status = cmd_run(argc - first, argv + first);
    } else {
        opt_usage_error(&autoscaler_program, "unknown command '%s' (plan or run)", argv[first]);
        status = EXIT_USAGE;
    }
    curl_global_cleanup();
    return status;
}
