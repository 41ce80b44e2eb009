/* autoscaler.c - tetris-autoscaler: `plan` prints the instance configs DTS
 * (or the exact integer program) chooses for a request rate; `run` keeps
 * each function's instances matched to its request rate. */
#include "scheduler-ext/autoscaler/autoscaler.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/cleanup.h"
#include "common/cli.h"
#include "common/clock.h"
#include "scheduler-ext/autoscaler/ilp.h"
#include "common/log.h"
#include "protocol/names.h"

/* Exit codes (see usage). */
enum {
    EXIT_OK = 0,
    EXIT_INPUT = 1,      /* unreadable or invalid profile or trace; other failures */
    EXIT_USAGE = 2,      /* bad options */
    EXIT_INFEASIBLE = 3, /* no config meets the SLO */
    EXIT_SOLVER = 4,     /* --exact found no plan within its time limit */
    EXIT_CLUSTER = 5,    /* cannot reach the Kubernetes API at start */
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: tetris-autoscaler plan --profile PROFILE --rps R --slo-ms T [options]\n"
        "       tetris-autoscaler run (--function | --openfaas) NAME=PROFILE... --slo-ms T\n"
        "                             (--trace NAME=FILE... | --prometheus URL) [options]\n"
        "\n"
        "plan: the instance configs for R requests/s under a latency SLO of T ms, as JSON\n"
        "  (configs [{c, m (MiB), b, p, l (ms), count}], instances, memory_mib,\n"
        "  covered_rps, algorithm, decision_time_ms).\n"
        "  --exact            solve the integer program with GLPK instead of DTS\n"
        "  --time-limit-ms N  limit for --exact (default 10000)\n"
        "\n"
        "run: scale each function's Deployments to its request rate, every --interval.\n"
        "  --function NAME=PROFILE  a function and its profile (repeatable)\n"
        "  --openfaas NAME=PROFILE  a function OpenFaaS deployed (faas-netes's Deployment\n"
        "                           NAME is the template of sibling Deployments, one config\n"
        "                           at a time, sets of at most 5 replicas; repeatable)\n"
        "  --trace NAME=FILE        local mode: the function's rate from `time_s rps` lines;\n"
        "                           time is simulated unless --realtime\n"
        "  --prometheus URL         rates from Prometheus's HTTP API\n"
        "  --query TEMPLATE         PromQL, {function}, {namespace}, {job} and {instance}\n"
        "                           replaced (default %s)\n"
        "  --gateway-job REGEX      the OpenFaaS gateway's scrape job: only its series\n"
        "                           count, not other targets' (default " RATE_DEFAULT_GATEWAY_JOB
        ")\n"
        "  --gateway-instance REGEX the gateway's scrape instances "
        "(default " RATE_DEFAULT_GATEWAY_INSTANCE ")\n"
        "                           a rate above twice what a function's instances serve\n"
        "                           counts as that (event=rate-clamped)\n"
        "  --dry-run                print actions as JSON lines instead of acting\n"
        "  --kubeconfig FILE        act through this cluster (default: in-cluster)\n"
        "  --interval S             seconds between decisions (default 5)\n"
        "  --headroom H             scale out when rate*(1+H) > capacity (default 0.1)\n"
        "  --scale-in-headroom H    release only while capacity >= peak*(1+H) (default 0.3)\n"
        "  --cooldown S             no scale-in within S s of a change (default 60)\n"
        "  --window S               peak = highest rate in the last S s (default 60)\n"
        "  --min-instances N        keep at least N instances per function (default 1)\n"
        "  --max-instances N        never more than N instances per function "
        "(default " TETRIS_STRINGIFY(
            AS_DEFAULT_MAX_INSTANCES) ")\n"
                                      "  --realtime               pace a trace in real time (for a "
                                      "live cluster)\n"
                                      "  --step-file FILE         simulated time: after each "
                                      "decision round, write its\n"
                                      "                           time to FILE and wait until FILE "
                                      "is removed (lets a\n"
                                      "                           test check the cluster between "
                                      "steps)\n"
                                      "  --duration S             stop after S seconds\n"
                                      "  --namespace NS           "
                                      "(default " TETRIS_FUNCTION_NAMESPACE ")\n"
                                      "  --image IMAGE            function image (default "
                                      "tetris-function:%s)\n"
                                      "  --image-pull-policy P    (default IfNotPresent)\n"
                                      "  --store DIR              tensor store host path "
                                      "(default " TETRIS_STORE_DIR ")\n"
                                      "  --model-dir DIR          " TETRIS_ENV_MODEL
                                      " = DIR/<model_file> (default " TETRIS_MODEL_DIR ")\n"
                                      "  --port N                 the function's HTTP port "
                                      "(default %d)\n"
                                      "  --scheduler-name NAME    (default " TETRIS_SCHEDULER_NAME
                                      ")\n"
                                      "\n"
                                      "both:\n"
                                      "  --slo-ms T         latency SLO in ms (b=1 configs need l "
                                      "<= T, b>1 l <= T/2)\n"
                                      "  --alpha A          rank by b*p/(l*(m + A*c)), A in MiB "
                                      "per CPU (default 0)\n"
                                      "  --sharing          tensor sharing: memory is marginal "
                                      "(private memory, the\n"
                                      "                     model's tensors once); needs "
                                      "private_bytes in the profile\n"
                                      "  --resident         plan: with --sharing, the tensors are "
                                      "already resident\n"
                                      "  --latency STAT     mean, p95 or p99 stands for l (default "
                                      "p95)\n"
                                      "  --mode MODE        paper: Algorithm 1, capacity b*p/l "
                                      "(default); refined:\n"
                                      "                     capacity from the profile's measured "
                                      "throughput, every\n"
                                      "                     instance an equal share of the rate "
                                      "(OpenFaaS CE routing),\n"
                                      "                     the cheapest single config that covers "
                                      "it\n"
                                      "  --help, --version\n"
                                      "\n"
                                      "exit status: 0 ok, 1 bad input (profile, trace) or another "
                                      "failure, 2 bad usage,\n"
                                      "3 no config meets the SLO, 4 --exact found no plan in time, "
                                      "5 Kubernetes API\n"
                                      "unreachable or refusing at start\n",
        RATE_DEFAULT_QUERY, TETRIS_VERSION, TETRIS_FUNCTION_PORT);
}

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
    static const struct option longopts[] = {
        {"profile", required_argument, NULL, 'f'},
        {"rps", required_argument, NULL, 'r'},
        {"slo-ms", required_argument, NULL, 's'},
        {"alpha", required_argument, NULL, 'a'},
        {"exact", no_argument, NULL, 'x'},
        {"sharing", no_argument, NULL, 'S'},
        {"resident", no_argument, NULL, 'R'},
        {"latency", required_argument, NULL, 'l'},
        {"time-limit-ms", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {"kubeconfig", required_argument, NULL, 'k'},
        {"space", required_argument, NULL, 'c'},
        {"mode", required_argument, NULL, 'm'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL, *kubeconfig = NULL;
    double rps = -1, limit_ms = 10000;
    bool exact = false;
    plan_options o = {.latency = PROFILE_STAT_P95};
    tetris_error err = {0};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int r = 0;
        switch (c) {
        case 'f': path = optarg; break;
        case 'k': kubeconfig = optarg; break;
        case 'r': r = cli_parse_double("--rps", optarg, 0, INFINITY, &rps, &err); break;
        case 's': r = cli_parse_double("--slo-ms", optarg, 0, INFINITY, &o.slo_ms, &err); break;
        case 'a': r = cli_parse_double("--alpha", optarg, 0, INFINITY, &o.alpha, &err); break;
        case 't':
            r = cli_parse_double("--time-limit-ms", optarg, 1, INFINITY, &limit_ms, &err);
            break;
        case 'x': exact = true; break;
        case 'S': o.sharing = true; break;
        case 'R': o.resident = true; break;
        case 'l': r = profile_stat_parse(optarg, &o.latency, &err); break;
        case 'c': r = plan_space_parse(optarg, &o.space, &err); break;
        case 'm': r = plan_mode_parse(optarg, &o.mode, &err); break;
        case 'h': usage(stdout); return EXIT_OK;
        default: usage(stderr); return EXIT_USAGE;
        }
        if (r < 0) {
            fprintf(stderr, "tetris-autoscaler: %s\n", err.msg);
            return EXIT_USAGE;
        }
    }
    if (path == NULL || rps < 0 || o.slo_ms <= 0 || optind != argc) {
        fprintf(stderr, "tetris-autoscaler plan: needs --profile, --rps and --slo-ms > 0\n");
        return EXIT_USAGE;
    }
    if (o.resident && !o.sharing) {
        fprintf(stderr, "tetris-autoscaler plan: --resident needs --sharing\n");
        return EXIT_USAGE;
    }
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

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

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
    char quoted[600];
    double rps;
    if (fn->openfaas && act->refresh != NULL && act->refresh(act, fn, &err) < 0) {
        log_warn("event=function-unavailable function=%s msg=%s", fn->name,
                 log_quote(err.msg, quoted, sizeof quoted));
        return; /* not deployed (yet), or the API is down: nothing to scale */
    }
    if (fn->trace != NULL) {
        rps = rate_trace_at(fn->trace, now_s);
    } else if (rate_prometheus(&rc->rates, fn->name, rc->deploy.namespace_, &rps, &err) < 0) {
        log_warn("event=rate-unavailable function=%s msg=%s", fn->name,
                 log_quote(err.msg, quoted, sizeof quoted));
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
        log_error("event=decide-failed function=%s msg=%s", fn->name,
                  log_quote(err.msg, quoted, sizeof quoted));
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
            log_error("event=apply-failed function=%s msg=%s", fn->name,
                      log_quote(err.msg, quoted, sizeof quoted));
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

static void sleep_s(double s)
{
    struct timespec ts = clock_timespec(s * 1e3);
    while (!stop_requested && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* --step-file: FILE holds the time of the round just acted on (written
 * whole, by rename); whoever watches removes it to let the next round
 * start. Returns -1 when FILE cannot be written. */
static int step_handshake(const char *path, double now_s)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        log_error("event=step-file-failed file=%s msg=\"path too long\"", path);
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    bool ok = f != NULL && fprintf(f, "%.3f\n", now_s) > 0;
    if (f != NULL && fclose(f) != 0)
        ok = false;
    if (!ok || rename(tmp, path) < 0) {
        log_error("event=step-file-failed file=%s errno=%d", path, errno);
        return -1;
    }
    while (!stop_requested && access(path, F_OK) == 0)
        sleep_s(0.02);
    return 0;
}

static int run_loop(run_config *rc, as_actuator *act)
{
    bool local = rc->rates.url == NULL;
    double end_s = INFINITY;
    if (local) {
        end_s = 0;
        for (size_t i = 0; i < rc->n_fns; i++)
            end_s = fmax(end_s, rate_trace_end(rc->fns[i]->trace));
    }
    if (rc->duration_s > 0)
        end_s = fmin(end_s, rc->duration_s);
    bool simulated = local && !rc->realtime;
    double start_ms = clock_now_ms();
    for (double sim_s = 0; !stop_requested;) {
        double now_s = simulated ? sim_s : (clock_now_ms() - start_ms) / 1000.0;
        if (now_s > end_s + 1e-9)
            break;
        for (size_t i = 0; i < rc->n_fns && !stop_requested; i++)
            tick_function(rc->fns[i], rc, act, now_s);
        if (rc->step_file != NULL && !stop_requested && step_handshake(rc->step_file, now_s) < 0)
            return EXIT_INPUT;
        sim_s += rc->interval_s;
        if (!simulated) {
            double next_ms = start_ms + ceil((clock_now_ms() - start_ms) / 1e3 / rc->interval_s) *
                                            rc->interval_s * 1e3;
            sleep_s(fmax(0, next_ms - clock_now_ms()) / 1e3);
        }
    }
    for (size_t i = 0; i < rc->n_fns; i++)
        log_info("event=done function=%s instances=%u memory_mib=%.1f", rc->fns[i]->name,
                 as_instances(rc->fns[i]), as_memory_mib(rc->fns[i], &rc->policy.plan));
    return EXIT_OK;
}

static int run_checked(run_config *rc)
{
    tetris_error err = {0};
    char quoted[600];
    /* A profile that cannot meet the SLO at all is a configuration error:
     * say so now rather than at the first request. */
    for (size_t i = 0; i < rc->n_fns; i++) {
        plan pl;
        int r = dts_plan(rc->fns[i]->prof, 1, &rc->policy.plan, &pl, &err);
        if (r < 0) {
            log_error("event=bad-profile function=%s msg=%s", rc->fns[i]->name,
                      log_quote(err.msg, quoted, sizeof quoted));
            return exit_for(r);
        }
        plan_clear(&pl);
    }
    as_actuator *act = NULL;
    int r = rc->dry_run ? as_actuator_dry_run(&rc->deploy, &act, &err)
                        : as_actuator_kube(&rc->deploy, rc->kubeconfig, &act, &err);
    if (r < 0) {
        log_error("event=actuator-failed msg=%s", log_quote(err.msg, quoted, sizeof quoted));
        return rc->dry_run ? EXIT_INPUT : EXIT_CLUSTER;
    }
    for (size_t i = 0; i < rc->n_fns; i++)
        if (act->adopt(act, rc->fns[i], &err) < 0) {
            log_error("event=adopt-failed function=%s msg=%s", rc->fns[i]->name,
                      log_quote(err.msg, quoted, sizeof quoted));
            act->destroy(act);
            return EXIT_CLUSTER;
        }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    log_info("event=start functions=%zu mode=%s actuator=%s slo_ms=%g sharing=%d", rc->n_fns,
             rc->rates.url ? "prometheus" : "trace", rc->dry_run ? "dry-run" : "kubernetes",
             rc->policy.plan.slo_ms, rc->policy.plan.sharing);
    r = run_loop(rc, act);
    act->destroy(act);
    return r;
}

static int cmd_run(int argc, char **argv)
{
    enum {
        OPT_FUNCTION = 256,
        OPT_TRACE,
        OPT_PROMETHEUS,
        OPT_QUERY,
        OPT_DRY_RUN,
        OPT_KUBECONFIG,
        OPT_INTERVAL,
        OPT_HEADROOM,
        OPT_IN_HEADROOM,
        OPT_COOLDOWN,
        OPT_WINDOW,
        OPT_MIN,
        OPT_MAX,
        OPT_GATEWAY_JOB,
        OPT_GATEWAY_INSTANCE,
        OPT_REALTIME,
        OPT_DURATION,
        OPT_NAMESPACE,
        OPT_IMAGE,
        OPT_PULL,
        OPT_STORE,
        OPT_MODEL_DIR,
        OPT_PORT,
        OPT_SCHEDULER,
        OPT_SLO,
        OPT_ALPHA,
        OPT_SHARING,
        OPT_LATENCY,
        OPT_SPACE,
        OPT_MODE,
        OPT_HELP,
        OPT_OPENFAAS,
        OPT_STEP_FILE,
    };
    static const struct option longopts[] = {
        {"function", required_argument, NULL, OPT_FUNCTION},
        {"openfaas", required_argument, NULL, OPT_OPENFAAS},
        {"trace", required_argument, NULL, OPT_TRACE},
        {"prometheus", required_argument, NULL, OPT_PROMETHEUS},
        {"query", required_argument, NULL, OPT_QUERY},
        {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
        {"interval", required_argument, NULL, OPT_INTERVAL},
        {"headroom", required_argument, NULL, OPT_HEADROOM},
        {"scale-in-headroom", required_argument, NULL, OPT_IN_HEADROOM},
        {"cooldown", required_argument, NULL, OPT_COOLDOWN},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"min-instances", required_argument, NULL, OPT_MIN},
        {"max-instances", required_argument, NULL, OPT_MAX},
        {"gateway-job", required_argument, NULL, OPT_GATEWAY_JOB},
        {"gateway-instance", required_argument, NULL, OPT_GATEWAY_INSTANCE},
        {"realtime", no_argument, NULL, OPT_REALTIME},
        {"step-file", required_argument, NULL, OPT_STEP_FILE},
        {"duration", required_argument, NULL, OPT_DURATION},
        {"namespace", required_argument, NULL, OPT_NAMESPACE},
        {"image", required_argument, NULL, OPT_IMAGE},
        {"image-pull-policy", required_argument, NULL, OPT_PULL},
        {"store", required_argument, NULL, OPT_STORE},
        {"model-dir", required_argument, NULL, OPT_MODEL_DIR},
        {"port", required_argument, NULL, OPT_PORT},
        {"scheduler-name", required_argument, NULL, OPT_SCHEDULER},
        {"slo-ms", required_argument, NULL, OPT_SLO},
        {"alpha", required_argument, NULL, OPT_ALPHA},
        {"sharing", no_argument, NULL, OPT_SHARING},
        {"latency", required_argument, NULL, OPT_LATENCY},
        {"space", required_argument, NULL, OPT_SPACE},
        {"mode", required_argument, NULL, OPT_MODE},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    run_config rc = {
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
    tetris_error err = {0};
    char quoted[600];
    uint64_t n;
    int c, status = EXIT_USAGE;
    /* Profiles load once every option is known (a ConfigMap needs the
     * kubeconfig); at most one --function and one --trace per argument. */
    cleanup_free const char **function_args = calloc((size_t)argc, sizeof(char *));
    cleanup_free const char **trace_args = calloc((size_t)argc, sizeof(char *));
    cleanup_free bool *openfaas_args = calloc((size_t)argc, sizeof(bool));
    size_t n_function_args = 0, n_trace_args = 0;
    if (function_args == NULL || trace_args == NULL || openfaas_args == NULL) {
        fprintf(stderr, "tetris-autoscaler: out of memory\n");
        return EXIT_INPUT;
    }
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int r = 0;
        switch (c) {
        case OPT_FUNCTION: function_args[n_function_args++] = optarg; break;
        case OPT_OPENFAAS:
            openfaas_args[n_function_args] = true;
            function_args[n_function_args++] = optarg;
            break;
        case OPT_TRACE: trace_args[n_trace_args++] = optarg; break;
        case OPT_PROMETHEUS: rc.rates.url = optarg; break;
        case OPT_QUERY: rc.rates.query = optarg; break;
        case OPT_GATEWAY_JOB:
            rc.rates.job = optarg;
            r = rate_check_matcher("--gateway-job", optarg, &err);
            break;
        case OPT_GATEWAY_INSTANCE:
            rc.rates.instance = optarg;
            r = rate_check_matcher("--gateway-instance", optarg, &err);
            break;
        case OPT_DRY_RUN: rc.dry_run = true; break;
        case OPT_KUBECONFIG: rc.kubeconfig = optarg; break;
        case OPT_REALTIME: rc.realtime = true; break;
        case OPT_STEP_FILE: rc.step_file = optarg; break;
        case OPT_NAMESPACE: rc.deploy.namespace_ = optarg; break;
        case OPT_IMAGE: rc.deploy.image = optarg; break;
        case OPT_PULL: rc.deploy.pull_policy = optarg; break;
        case OPT_STORE: rc.deploy.store_dir = optarg; break;
        case OPT_MODEL_DIR: rc.deploy.model_dir = optarg; break;
        case OPT_SCHEDULER: rc.deploy.scheduler_name = optarg; break;
        case OPT_SHARING: rc.policy.plan.sharing = true; break;
        case OPT_INTERVAL:
            r = cli_parse_double("--interval", optarg, 0.001, INFINITY, &rc.interval_s, &err);
            break;
        case OPT_HEADROOM:
            r = cli_parse_double("--headroom", optarg, 0, INFINITY, &rc.policy.headroom_out,
                                 &err);
            break;
        case OPT_IN_HEADROOM:
            r = cli_parse_double("--scale-in-headroom", optarg, 0, INFINITY,
                                 &rc.policy.headroom_in, &err);
            break;
        case OPT_COOLDOWN:
            r = cli_parse_double("--cooldown", optarg, 0, INFINITY, &rc.policy.cooldown_s, &err);
            break;
        case OPT_WINDOW:
            r = cli_parse_double("--window", optarg, 0, INFINITY, &rc.policy.window_s, &err);
            break;
        case OPT_DURATION:
            r = cli_parse_double("--duration", optarg, 0, INFINITY, &rc.duration_s, &err);
            break;
        case OPT_SLO:
            r = cli_parse_double("--slo-ms", optarg, 0, INFINITY, &rc.policy.plan.slo_ms, &err);
            break;
        case OPT_ALPHA:
            r = cli_parse_double("--alpha", optarg, 0, INFINITY, &rc.policy.plan.alpha, &err);
            break;
        case OPT_MIN:
            if ((r = cli_parse_u64("--min-instances", optarg, 0, 1000, &n, &err)) == 0)
                rc.policy.min_instances = (unsigned)n;
            break;
        case OPT_MAX:
            if ((r = cli_parse_u64("--max-instances", optarg, 1, 100000, &n, &err)) == 0)
                rc.policy.max_instances = (unsigned)n;
            break;
        case OPT_PORT: r = cli_parse_int("--port", optarg, 1, 65535, &rc.deploy.port, &err); break;
        case OPT_LATENCY: r = profile_stat_parse(optarg, &rc.policy.plan.latency, &err); break;
        case OPT_SPACE: r = plan_space_parse(optarg, &rc.policy.plan.space, &err); break;
        case OPT_MODE: r = plan_mode_parse(optarg, &rc.policy.plan.mode, &err); break;
        case OPT_HELP: usage(stdout); status = EXIT_OK; goto out;
        default: usage(stderr); goto out;
        }
        if (r < 0) {
            if (err.msg[0] != '\0')
                fprintf(stderr, "tetris-autoscaler: %s\n", err.msg);
            goto out;
        }
    }
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
    if (optind != argc || rc.n_fns == 0 || !(rc.policy.plan.slo_ms > 0)) {
        fprintf(stderr, "tetris-autoscaler run: needs --function or --openfaas NAME=PROFILE and "
                        "--slo-ms > 0\n");
        goto out;
    }
    if (rc.policy.min_instances > rc.policy.max_instances) {
        fprintf(stderr, "tetris-autoscaler run: --min-instances %u exceeds --max-instances %u\n",
                rc.policy.min_instances, rc.policy.max_instances);
        goto out;
    }
    if (rc.policy.headroom_in < rc.policy.headroom_out) {
        fprintf(stderr, "tetris-autoscaler run: --scale-in-headroom must be >= --headroom, "
                        "or the autoscaler oscillates\n");
        goto out;
    }
    for (size_t i = 0; i < rc.n_fns; i++) {
        bool traced = rc.fns[i]->trace != NULL;
        if (traced == (rc.rates.url != NULL)) {
            fprintf(stderr, "tetris-autoscaler run: function %s: give either a --trace for "
                            "every function or --prometheus\n", rc.fns[i]->name);
            goto out;
        }
    }
    if (rc.step_file != NULL && (rc.rates.url != NULL || rc.realtime)) {
        fprintf(stderr, "tetris-autoscaler run: --step-file needs traces in simulated time "
                        "(no --prometheus, no --realtime)\n");
        goto out;
    }
    if (rc.policy.plan.sharing)
        for (size_t i = 0; i < rc.n_fns; i++)
            if (plan_check(rc.fns[i]->prof, &rc.policy.plan, &err) < 0) {
                log_error("event=bad-profile msg=%s", log_quote(err.msg, quoted, sizeof quoted));
                status = EXIT_INPUT;
                goto out;
            }
    status = run_checked(&rc);
out:
    for (size_t i = 0; i < rc.n_fns; i++)
        as_function_free(rc.fns[i]);
    free(rc.fns);
    return status;
}

int main(int argc, char **argv)
{
    log_init(argv[0]);
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("tetris-autoscaler %s\n", TETRIS_VERSION);
        return EXIT_OK;
    }
    if (argc >= 2 && strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int status;
    if (strcmp(argv[1], "plan") == 0) {
        status = cmd_plan(argc - 1, argv + 1);
    } else if (strcmp(argv[1], "run") == 0) {
        status = cmd_run(argc - 1, argv + 1);
    } else {
        fprintf(stderr, "tetris-autoscaler: unknown command '%s' (plan or run)\n", argv[1]);
        status = EXIT_USAGE;
    }
    curl_global_cleanup();
    return status;
}
