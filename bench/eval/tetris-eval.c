/* tetris-eval.c - tetris-eval: a trace-driven simulation of the control
 * plane on the Tetris paper's testbed (§5.3), for `make eval`.
 *
 * Every second of a generated trace, requests arrive at an application (a
 * pipeline of functions, each a measured profile); every --interval seconds
 * the autoscaler's own policy (as_decide: DTS, headroom, cool-down, window)
 * decides each function's instances from the rate it measured over the last
 * interval, and the instances are placed on the nodes. Four policies differ
 * only in the planning options handed to that code: tensor sharing or not,
 * and the config space (all, batching only, concurrency only).
 *
 * Memory: an instance costs its profile's m (private + shared); with tensor
 * sharing it costs its private bytes and each node pays a model's tensors
 * once while it runs any instance of that model. SLO: in each second the
 * requests beyond the application's capacity (the smallest over its
 * functions of the sum of the instances' planning capacity) are violations.
 *
 * Exit status: 0 done, 1 a profile could not be read or no config met an
 * SLO, 2 bad usage. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/eval/eval.h"
#include "scheduler-ext/autoscaler/autoscaler.h"
#include "scheduler-ext/autoscaler/dts.h"
#include "common/cleanup.h"
#include "common/cli.h"
#include "common/error.h"
#include "common/log.h"
#include "protocol/profile.h"

enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_USAGE = 2 };

#define N_NODES 8

/* The paper's testbed: 2 nodes of 80 cores/256 GB, 6 of 32 cores/128 GB. */
static const struct {
    double cpus, mem_mib;
} testbed[N_NODES] = {
    {80, 256 * 1024}, {80, 256 * 1024}, {32, 128 * 1024}, {32, 128 * 1024},
    {32, 128 * 1024}, {32, 128 * 1024}, {32, 128 * 1024}, {32, 128 * 1024},
};

const app_def apps[N_APPS] = {
    {"svt", {"ocr-det", "ocr-cls", "ocr-cls"}, {300, 100, 100}, 60, 86, 68},
    {"qa-audio", {"silero-vad", "bert-base", NULL}, {20, 1000, 0}, 30, 64, 33},
    {"ss", {"ocr-rec", NULL, NULL}, {300, 0, 0}, 100, 69, 37},
    {"qa-text", {"bert-base", NULL, NULL}, {1000, 0, 0}, 40, 65, 21},
};

const char *const traces[N_TRACES] = {"stable", "periodic", "bursty"};

const policy_def policies[N_POLICIES] = {
    {"tetris", true, PLAN_SPACE_ALL},
    {"tetris-ro", false, PLAN_SPACE_ALL},
    {"infless", false, PLAN_SPACE_BATCHING},
    {"photons", false, PLAN_SPACE_CONCURRENCY},
};

typedef struct options {
    const char *profiles;
    const char *out;
    unsigned duration_s, interval_s;
    uint64_t seed;
    double scale, headroom;
    enum plan_mode mode;
    bool app_on[N_APPS], trace_on[N_TRACES];
} options;

typedef struct result {
    double mean_mib, median_mib, peak_mib;
    double violation_rate;
    double mean_cpus, mean_instances;
    unsigned peak_instances;
    unsigned long unplaced; /* instances the nodes had no room for */
} result;

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "Usage: %s [OPTION]...\n"
            "Simulates tetris's autoscaler (DTS and its scaling policy) and placement on the\n"
            "Tetris paper's testbed (2 nodes of 80 CPUs/256 GiB, 6 of 32 CPUs/128 GiB) for\n"
            "four applications built from measured profiles, under generated stable,\n"
            "periodic and bursty traces, with four policies: tetris (tensor and runtime\n"
            "sharing), tetris-ro (runtime sharing only), infless (batching only) and\n"
            "photons (concurrency only). Prints one row per application, trace and policy,\n"
            "then tetris's mean-memory reduction next to the paper's.\n"
            "\n"
            "  --profiles DIR     where MODEL.profile.yaml are (default deploy/profiles)\n"
            "  --apps LIST        comma-separated: svt,qa-audio,ss,qa-text (default all)\n"
            "  --traces LIST      comma-separated: stable,periodic,bursty (default all)\n"
            "  --duration S       trace length in seconds (default 3600)\n"
            "  --interval S       seconds between autoscaler decisions (default 10)\n"
            "  --scale X          multiply every application's rate by X (default 1)\n"
            "  --seed N           trace seed (default 1): the same seed, the same traces\n"
            "  --mode MODE        DTS plan mode: paper or refined (default refined)\n"
            "  --headroom H       scale out when rate*(1+H) > capacity (default 0.1)\n"
            "  --out DIR          also write results.tsv and per-second series there\n"
            "  -h, --help         this help\n"
            "  -V, --version      the version\n"
            "\n"
            "Scale mode, when --nodes or --functions is given: one cluster of N nodes (one\n"
            "in four of 80 CPUs/256 GiB, the rest 32 CPUs/128 GiB) running M functions drawn\n"
            "from the applications' functions (--apps), each with its own trace (--traces)\n"
            "and a log-normal mean rate (times --scale). Prints memory, SLO violations and\n"
            "the CPU cost per decision for each policy, then DTS against the GLPK optimum on\n"
            "a sample of the run's scale-out decisions; --out gets scale.tsv and\n"
            "scale-gap.tsv.\n"
            "  --nodes N          nodes (default 1000)\n"
            "  --functions M      functions (default 10000)\n"
            "  --gap-samples K    decisions per policy re-solved exactly (default 500, 0: none)\n"
            "\n"
            "Exit status: 0 done, 1 a profile could not be read or planned, 2 bad usage.\n",
            prog);
}

/* ---- deterministic traces ---- */

uint64_t rng_next(uint64_t *s)
{
    /* splitmix64: the same sequence on every platform. */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

/* Poisson arrivals of mean lambda (normal approximation beyond 50). */
static double rng_poisson(uint64_t *s, double lambda)
{
    if (lambda <= 0)
        return 0;
    if (lambda > 50) {
        double u1 = fmax(rng_unit(s), 1e-300), u2 = rng_unit(s);
        double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
        return fmax(0, round(lambda + sqrt(lambda) * z));
    }
    double l = exp(-lambda), prod = rng_unit(s);
    unsigned k = 0;
    while (prod > l) {
        prod *= rng_unit(s);
        k++;
    }
    return k;
}

/* Arrivals per second, shaped like the Azure Functions traces' three kinds
 * (a day compressed into half the run for the periodic one). */
void make_trace(const char *kind, double mean, unsigned n, uint64_t seed, double *arr)
{
    uint64_t s = seed;
    double burst_left = 0, burst_gain = 1;
    for (unsigned t = 0; t < n; t++) {
        double r;
        if (strcmp(kind, "stable") == 0) {
            r = mean * (1 + 0.05 * (2 * rng_unit(&s) - 1));
        } else if (strcmp(kind, "periodic") == 0) {
            r = mean * (1 + 0.7 * sin(2 * M_PI * t / (n / 2.0)));
        } else {
            /* A low base with bursts of 3-8x lasting 30-120 s, about one
             * every 5 minutes. */
            if (burst_left <= 0 && rng_unit(&s) < 1.0 / 300) {
                burst_left = 30 + 90 * rng_unit(&s);
                burst_gain = 3 + 5 * rng_unit(&s);
            }
            r = mean * 0.4 * (burst_left > 0 ? burst_gain : 1);
            burst_left--;
        }
        arr[t] = rng_poisson(&s, r);
    }
}

/* ---- the cluster ---- */

typedef struct sim {
    const options *opt;
    const app_def *app;
    const policy_def *pol;
    size_t n_fns;
    as_function *fns[MAX_FNS];
    size_t model_of[MAX_FNS]; /* functions of one model share its tensors */
    /* count[f][config][node]: instances placed */
    unsigned *count[MAX_FNS];
    double used_cpus[N_NODES], used_mib[N_NODES];
    unsigned model_count[MAX_FNS][N_NODES]; /* instances of model k on a node */
    unsigned long unplaced;
} sim;

static double shared_mib_of(const sim *s, size_t f)
{
    return plan_shared_mib(s->fns[f]->prof);
}

/* Places one instance of config i of function f. Like the extender, a node
 * that already holds the model's tensors is preferred when sharing (it pays
 * no tensors); otherwise the least-allocated node by CPU that fits. */
static bool place(sim *s, size_t f, size_t i, const plan_options *o)
{
    const profile_config *cfg = &s->fns[f]->prof->configs[i];
    size_t k = s->model_of[f];
    int best = -1;
    double best_score = -INFINITY;
    for (size_t n = 0; n < N_NODES; n++) {
        bool resident = s->model_count[k][n] > 0;
        double mib = plan_instance_mib(cfg, o) +
                     (o->sharing && !resident ? shared_mib_of(s, f) : 0);
        if (s->used_cpus[n] + cfg->c > testbed[n].cpus || s->used_mib[n] + mib > testbed[n].mem_mib)
            continue;
        double score = 1 - s->used_cpus[n] / testbed[n].cpus + (o->sharing && resident ? 10 : 0);
        if (score > best_score) {
            best_score = score;
            best = (int)n;
        }
    }
    if (best < 0)
        return false;
    size_t n = (size_t)best;
    if (o->sharing && s->model_count[k][n] == 0)
        s->used_mib[n] += shared_mib_of(s, f);
    s->used_mib[n] += plan_instance_mib(cfg, o);
    s->used_cpus[n] += cfg->c;
    s->model_count[k][n]++;
    s->count[f][i * N_NODES + n]++;
    return true;
}

/* Removes one instance of config i of function f from the node with the
 * fewest instances of its model, so tensors are freed soonest. */
static void release(sim *s, size_t f, size_t i, const plan_options *o)
{
    const profile_config *cfg = &s->fns[f]->prof->configs[i];
    size_t k = s->model_of[f];
    int best = -1;
    for (size_t n = 0; n < N_NODES; n++)
        if (s->count[f][i * N_NODES + n] > 0 &&
            (best < 0 || s->model_count[k][n] < s->model_count[k][best]))
            best = (int)n;
    size_t n = (size_t)best;
    s->count[f][i * N_NODES + n]--;
    s->model_count[k][n]--;
    s->used_cpus[n] -= cfg->c;
    s->used_mib[n] -= plan_instance_mib(cfg, o);
    if (o->sharing && s->model_count[k][n] == 0)
        s->used_mib[n] -= shared_mib_of(s, f);
}

static void sim_free(sim *s)
{
    for (size_t f = 0; f < s->n_fns; f++) {
        as_function_free(s->fns[f]);
        free(s->count[f]);
    }
}

static int sim_init(sim *s, const options *opt, const app_def *app, const policy_def *pol,
                    tetris_error *err)
{
    *s = (sim){.opt = opt, .app = app, .pol = pol};
    for (size_t f = 0; f < MAX_FNS && app->models[f] != NULL; f++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s.profile.yaml", opt->profiles, app->models[f]) >=
            (int)sizeof path)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "profiles path too long");
        profile *prof;
        int r = profile_load(path, &prof, err);
        if (r < 0)
            return r;
        char name[64];
        snprintf(name, sizeof name, "%s-%zu", app->models[f], f);
        r = as_function_new(name, prof, &s->fns[f], err);
        if (r < 0) {
            profile_free(prof);
            return r;
        }
        s->n_fns++;
        s->count[f] = calloc(prof->n_configs * N_NODES, sizeof *s->count[f]);
        if (s->count[f] == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "instance table");
        s->model_of[f] = f;
        for (size_t g = 0; g < f; g++)
            if (strcmp(app->models[g], app->models[f]) == 0)
                s->model_of[f] = s->model_of[g];
    }
    return 0;
}

as_policy eval_policy(const policy_def *pol, double slo_ms, enum plan_mode mode, double headroom)
{
    /* tetris-autoscaler's defaults; a larger --headroom raises the
     * scale-in headroom with it, as the autoscaler requires. */
    return (as_policy){.plan = {.slo_ms = slo_ms,
                                .latency = PROFILE_STAT_P95,
                                .sharing = pol->sharing,
                                .space = pol->space,
                                .mode = mode},
                       .headroom_out = headroom,
                       .headroom_in = fmax(0.3, headroom + 0.2),
                       .cooldown_s = 60,
                       .window_s = 60,
                       .min_instances = 1};
}

static as_policy policy_for(const sim *s, size_t f)
{
    return eval_policy(s->pol, s->app->slo_ms[f], s->opt->mode, s->opt->headroom);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs one application under one trace and policy. series (optional) gets
 * one line per second: time, arrivals, capacity, memory MiB, CPUs,
 * instances. */
static int simulate(sim *s, const double *arr, result *res, FILE *series, tetris_error *err)
{
    unsigned n = s->opt->duration_s;
    cleanup_free double *mem = calloc(n, sizeof *mem);
    if (mem == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "memory series");
    double requests = 0, violated = 0, cpus_sum = 0, inst_sum = 0;
    *res = (result){0};
    for (unsigned t = 0; t < n; t++) {
        if (t % s->opt->interval_s == 0) {
            /* What a metrics query would report: the mean rate over the
             * last interval. The run starts warm: at 0 the autoscaler sees
             * the first interval's rate, as if that load had come before. */
            unsigned from = t >= s->opt->interval_s ? t - s->opt->interval_s : 0;
            unsigned to = t > 0 ? t : (s->opt->interval_s < n ? s->opt->interval_s : n);
            double sum = 0;
            for (unsigned u = from; u < to; u++)
                sum += arr[u];
            double rate = sum / (to - from);
            for (size_t f = 0; f < s->n_fns; f++) {
                as_function *fn = s->fns[f];
                as_policy pol = policy_for(s, f);
                size_t nc = fn->prof->n_configs;
                cleanup_free unsigned *want = calloc(nc, sizeof *want);
                if (want == NULL)
                    return tetris_fail(err, TETRIS_E_NOMEM, errno, "decision");
                const char *reason;
                int r = as_decide(fn, &pol, t, rate, want, &reason, err);
                if (r < 0)
                    return tetris_wrap(err, "app %s policy %s", s->app->name, s->pol->name);
                if (reason == NULL)
                    continue;
                bool changed = false;
                for (size_t i = 0; i < nc; i++) {
                    while (fn->replicas[i] > want[i]) {
                        release(s, f, i, &pol.plan);
                        fn->replicas[i]--;
                        changed = true;
                    }
                    while (fn->replicas[i] < want[i]) {
                        if (!place(s, f, i, &pol.plan)) {
                            s->unplaced += want[i] - fn->replicas[i];
                            break;
                        }
                        fn->replicas[i]++;
                        changed = true;
                    }
                }
                if (changed)
                    fn->last_change_s = t;
            }
        }
        double capacity = INFINITY;
        unsigned instances = 0;
        for (size_t f = 0; f < s->n_fns; f++) {
            as_policy pol = policy_for(s, f);
            capacity = fmin(capacity, as_capacity_rps(s->fns[f], &pol.plan));
            instances += as_instances(s->fns[f]);
        }
        double cpus = 0;
        for (size_t k = 0; k < N_NODES; k++) {
            mem[t] += s->used_mib[k];
            cpus += s->used_cpus[k];
        }
        requests += arr[t];
        violated += fmax(0, arr[t] - capacity);
        cpus_sum += cpus;
        inst_sum += instances;
        res->mean_mib += mem[t] / n;
        res->peak_mib = fmax(res->peak_mib, mem[t]);
        if (instances > res->peak_instances)
            res->peak_instances = instances;
        if (series != NULL)
            fprintf(series, "%u\t%.0f\t%.2f\t%.1f\t%.2f\t%u\n", t, arr[t], capacity, mem[t], cpus,
                    instances);
    }
    qsort(mem, n, sizeof *mem, cmp_double);
    res->median_mib = n % 2 ? mem[n / 2] : (mem[n / 2 - 1] + mem[n / 2]) / 2;
    res->violation_rate = requests > 0 ? violated / requests : 0;
    res->mean_cpus = cpus_sum / n;
    res->mean_instances = inst_sum / n;
    res->unplaced = s->unplaced;
    return 0;
}

/* ---- command line ---- */

static int parse_list(const char *opt, const char *s, const char *const *names, size_t n,
                      size_t stride, bool *on, tetris_error *err)
{
    memset(on, 0, n * sizeof *on);
    cleanup_free char *copy = strdup(s);
    if (copy == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "%s", opt);
    char *save = NULL;
    bool any = false;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < n && strcmp(*(const char *const *)((const char *)names + i * stride), tok) != 0)
            i++;
        if (i == n)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: unknown name '%s'", opt, tok);
        on[i] = any = true;
    }
    if (!any)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: empty list", opt);
    return 0;
}

static FILE *open_out(const options *opt, const char *name, tetris_error *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", opt->out, name) >= (int)sizeof path) {
        tetris_fail(err, TETRIS_E_INVAL, 0, "--out path too long");
        return NULL;
    }
    FILE *f = fopen(path, "w");
    if (f == NULL)
        tetris_fail(err, TETRIS_E_IO, errno, "open %s", path);
    return f;
}

static int close_out(FILE *f, tetris_error *err)
{
    if (f != NULL && (ferror(f) | fclose(f)) != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "write under --out");
    return 0;
}

static int run(const options *opt, tetris_error *err)
{
    static result res[N_APPS][N_TRACES][N_POLICIES];
    bool have[N_APPS][N_TRACES] = {{false}};
    FILE *tsv = NULL;
    if (opt->out != NULL) {
        if (mkdir(opt->out, 0777) < 0 && errno != EEXIST)
            return tetris_fail(err, TETRIS_E_IO, errno, "mkdir %s", opt->out);
        if ((tsv = open_out(opt, "results.tsv", err)) == NULL)
            return -err->code;
        fprintf(tsv, "app\ttrace\tpolicy\tmean_mib\tmedian_mib\tpeak_mib\tviolation_rate\t"
                     "mean_cpus\tmean_instances\tpeak_instances\tunplaced\n");
    }
    cleanup_free double *arr = calloc(opt->duration_s, sizeof *arr);
    if (arr == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "trace");
    printf("%-9s %-9s %-10s %10s %10s %10s %7s %7s %7s %5s\n", "app", "trace", "policy", "mean_MiB",
           "median_MiB", "peak_MiB", "viol_%", "CPUs", "inst", "peak");
    int r = 0;
    for (size_t a = 0; a < N_APPS && r == 0; a++) {
        if (!opt->app_on[a])
            continue;
        for (size_t t = 0; t < N_TRACES && r == 0; t++) {
            if (!opt->trace_on[t])
                continue;
            make_trace(traces[t], apps[a].mean_rps * opt->scale, opt->duration_s,
                       opt->seed * 1000003u + a * 31 + t, arr);
            for (size_t p = 0; p < N_POLICIES && r == 0; p++) {
                FILE *series = NULL;
                if (opt->out != NULL) {
                    char name[128];
                    snprintf(name, sizeof name, "series-%s-%s-%s.tsv", apps[a].name, traces[t],
                             policies[p].name);
                    if ((series = open_out(opt, name, err)) == NULL) {
                        r = -err->code;
                        break;
                    }
                }
                sim s;
                r = sim_init(&s, opt, &apps[a], &policies[p], err);
                if (r == 0)
                    r = simulate(&s, arr, &res[a][t][p], series, err);
                sim_free(&s);
                int rc = close_out(series, r == 0 ? err : NULL);
                if (r == 0)
                    r = rc;
                if (r < 0)
                    break;
                const result *x = &res[a][t][p];
                printf("%-9s %-9s %-10s %10.0f %10.0f %10.0f %7.2f %7.1f %7.1f %5u\n", apps[a].name,
                       traces[t], policies[p].name, x->mean_mib, x->median_mib, x->peak_mib,
                       100 * x->violation_rate, x->mean_cpus, x->mean_instances, x->peak_instances);
                if (x->unplaced > 0)
                    log_warn("event=unplaced app=%s trace=%s policy=%s instances=%lu", apps[a].name,
                             traces[t], policies[p].name, x->unplaced);
                if (tsv != NULL)
                    fprintf(tsv, "%s\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.6f\t%.3f\t%.3f\t%u\t%lu\n",
                            apps[a].name, traces[t], policies[p].name, x->mean_mib, x->median_mib,
                            x->peak_mib, x->violation_rate, x->mean_cpus, x->mean_instances,
                            x->peak_instances, x->unplaced);
            }
            have[a][t] = r == 0;
        }
    }
    if (r == 0) {
        printf("\nTetris's mean-memory reduction (1 - tetris/baseline), this run vs the paper "
               "(§5.3, stable trace):\n");
        printf("%-9s %-9s %12s %12s %12s %12s %10s\n", "app", "trace", "vs_INFless", "paper",
               "vs_Photons", "paper", "tetris_RO");
        for (size_t a = 0; a < N_APPS; a++)
            for (size_t t = 0; t < N_TRACES; t++) {
                if (!have[a][t])
                    continue;
                const result *x = res[a][t];
                printf("%-9s %-9s %11.0f%% %11.0f%% %11.0f%% %11.0f%% %9.0f%%\n", apps[a].name,
                       traces[t], 100 * (1 - x[0].mean_mib / x[2].mean_mib),
                       apps[a].paper_vs_infless, 100 * (1 - x[0].mean_mib / x[3].mean_mib),
                       apps[a].paper_vs_photons, 100 * (1 - x[0].mean_mib / x[1].mean_mib));
            }
    }
    int rc = close_out(tsv, r == 0 ? err : NULL);
    return r < 0 ? r : rc;
}

int main(int argc, char **argv)
{
    log_init(argv[0]);
    enum {
        OPT_PROFILES = 256,
        OPT_APPS,
        OPT_TRACES,
        OPT_DURATION,
        OPT_INTERVAL,
        OPT_SCALE,
        OPT_SEED,
        OPT_MODE,
        OPT_OUT,
        OPT_HEADROOM,
        OPT_NODES,
        OPT_FUNCTIONS,
        OPT_GAP_SAMPLES
    };
    static const struct option opts[] = {
        {"profiles", required_argument, NULL, OPT_PROFILES},
        {"apps", required_argument, NULL, OPT_APPS},
        {"traces", required_argument, NULL, OPT_TRACES},
        {"duration", required_argument, NULL, OPT_DURATION},
        {"interval", required_argument, NULL, OPT_INTERVAL},
        {"scale", required_argument, NULL, OPT_SCALE},
        {"seed", required_argument, NULL, OPT_SEED},
        {"mode", required_argument, NULL, OPT_MODE},
        {"out", required_argument, NULL, OPT_OUT},
        {"headroom", required_argument, NULL, OPT_HEADROOM},
        {"nodes", required_argument, NULL, OPT_NODES},
        {"functions", required_argument, NULL, OPT_FUNCTIONS},
        {"gap-samples", required_argument, NULL, OPT_GAP_SAMPLES},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    options opt = {.profiles = "deploy/profiles",
                   .duration_s = 3600,
                   .interval_s = 10,
                   .seed = 1,
                   .scale = 1,
                   .headroom = 0.1,
                   .mode = PLAN_MODE_REFINED};
    for (size_t i = 0; i < N_APPS; i++)
        opt.app_on[i] = true;
    for (size_t i = 0; i < N_TRACES; i++)
        opt.trace_on[i] = true;
    /* The scale mode (eval_scale.c) when --nodes or --functions is given. */
    scale_options so = {.nodes = 1000, .functions = 10000, .gap_samples = 500};
    bool scale_mode = false;
    tetris_error err = {0};
    uint64_t v;
    int c, r = 0;
    while ((c = getopt_long(argc, argv, "hV", opts, NULL)) != -1) {
        switch (c) {
        case OPT_PROFILES: opt.profiles = optarg; break;
        case OPT_OUT: opt.out = optarg; break;
        case OPT_APPS:
            r = parse_list("--apps", optarg, &apps[0].name, N_APPS, sizeof apps[0], opt.app_on,
                           &err);
            break;
        case OPT_TRACES:
            r = parse_list("--traces", optarg, traces, N_TRACES, sizeof traces[0], opt.trace_on,
                           &err);
            break;
        case OPT_DURATION:
            if ((r = cli_parse_u64("--duration", optarg, 1, 30 * 86400, &v, &err)) == 0)
                opt.duration_s = (unsigned)v;
            break;
        case OPT_INTERVAL:
            if ((r = cli_parse_u64("--interval", optarg, 1, 3600, &v, &err)) == 0)
                opt.interval_s = (unsigned)v;
            break;
        case OPT_SCALE: r = cli_parse_double("--scale", optarg, 0, 1000, &opt.scale, &err); break;
        case OPT_SEED: r = cli_parse_u64("--seed", optarg, 0, UINT32_MAX, &opt.seed, &err); break;
        case OPT_HEADROOM:
            r = cli_parse_double("--headroom", optarg, 0, 100, &opt.headroom, &err);
            break;
        case OPT_MODE: r = plan_mode_parse(optarg, &opt.mode, &err); break;
        case OPT_NODES:
            if ((r = cli_parse_u64("--nodes", optarg, 1, 1000000, &v, &err)) == 0)
                so.nodes = (unsigned)v;
            scale_mode = true;
            break;
        case OPT_FUNCTIONS:
            if ((r = cli_parse_u64("--functions", optarg, 1, 1000000, &v, &err)) == 0)
                so.functions = (unsigned)v;
            scale_mode = true;
            break;
        case OPT_GAP_SAMPLES:
            if ((r = cli_parse_u64("--gap-samples", optarg, 0, 1000000, &v, &err)) == 0)
                so.gap_samples = (unsigned)v;
            break;
        case 'h': usage(stdout, argv[0]); return EXIT_OK;
        case 'V': printf("tetris-eval %s\n", TETRIS_VERSION); return EXIT_OK;
        default: usage(stderr, argv[0]); return EXIT_USAGE;
        }
        if (r < 0) {
            char q[600];
            log_error("event=usage msg=%s", log_quote(err.msg, q, sizeof q));
            return EXIT_USAGE;
        }
    }
    if (optind != argc) {
        log_error("event=usage msg=\"unexpected argument\" arg=%s", argv[optind]);
        return EXIT_USAGE;
    }
    if (scale_mode) {
        so.profiles = opt.profiles;
        so.out = opt.out;
        so.duration_s = opt.duration_s;
        so.interval_s = opt.interval_s;
        so.seed = opt.seed;
        so.scale = opt.scale;
        so.headroom = opt.headroom;
        so.mode = opt.mode;
        so.app_on = opt.app_on;
        so.trace_on = opt.trace_on;
    }
    if ((scale_mode ? eval_scale_run(&so, &err) : run(&opt, &err)) < 0) {
        char q[600];
        log_error("event=eval msg=%s", log_quote(err.msg, q, sizeof q));
        return EXIT_ERROR;
    }
    return EXIT_OK;
}
