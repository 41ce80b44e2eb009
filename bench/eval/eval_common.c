/* eval_common.c - what both modes of tetris-eval build on (eval.h): the
 * paper's applications, traces and policies, the deterministic trace
 * generator, the node daemon's reclaim rule and the ReplicaSet's scale-in
 * order as the simulation applies them, variants' sharing, the
 * autoscaler's policy per evaluated policy, and the --out files. Below
 * both tetris-eval.c (the testbed mode) and eval_scale.c (the scale mode),
 * so that neither depends on the other. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/eval/eval.h"
#include "common/cleanup.h"
#include "common/error.h"

/* Stand-ins from the paper-scale models with random weights
 * (docs/PAPER-MODELS.md); each function's SLO is 4 times its profile's
 * fastest b = 1 p95 latency, rounded up to 100 ms (silero-vad: 20 ms). */
const app_def apps[N_APPS] = {
    {.name = "svt",
     .models = {"vgg19", "resnet152", "resnet152"},
     .variants = {NULL, "resnet152-ft1", "resnet152-ft2"},
     .slo_ms = {700, 800, 800},
     .mean_rps = 20,
     .paper_vs_infless = 86,
     .paper_vs_photons = 68},
    {.name = "qa-audio",
     .models = {"silero-vad", "bert-large"},
     .slo_ms = {20, 1200},
     .mean_rps = 20,
     .paper_vs_infless = 64,
     .paper_vs_photons = 33},
    {.name = "ss",
     .models = {"bert-base"},
     .slo_ms = {1200},
     .mean_rps = 40,
     .paper_vs_infless = 69,
     .paper_vs_photons = 37},
    {.name = "qa-text",
     .models = {"bert-base", "bert-base", "bert-base"},
     .variants = {"bert-base-ft1", "bert-base-ft2", "bert-base-ft3"},
     .slo_ms = {1200, 1200, 1200},
     .mean_rps = 20,
     .paper_vs_infless = 65,
     .paper_vs_photons = 21},
};

const char *const traces[N_TRACES] = {"stable", "periodic", "bursty"};

const policy_def policies[N_POLICIES] = {
    {"tetris", true, PLAN_SPACE_ALL},
    {"tetris-ro", false, PLAN_SPACE_ALL},
    {"infless", false, PLAN_SPACE_BATCHING},
    {"photons", false, PLAN_SPACE_CONCURRENCY},
};

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

size_t eval_reclaimable(struct cold_tensor *cold, size_t n, int64_t now_s, double keep_alive_s)
{
    reclaim_sort_cold(cold, n);
    size_t freed = 0;
    while (freed < n &&
           reclaim_judge(now_s, cold[freed].last_use_s, keep_alive_s, false, 0, 0) != RECLAIM_KEEP)
        freed++;
    return freed;
}

/* An instance of one Deployment ranked for scale-in. */
typedef struct victim {
    size_t at;     /* index among the Deployment's instances, oldest first */
    unsigned rank; /* the Deployment's instances on its node */
} victim;

static int cmp_uint(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* The most instances on one node first, then the newest. */
static int cmp_victim(const void *a, const void *b)
{
    const victim *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? 1 : -1;
    return (x->at < y->at) - (x->at > y->at);
}

int eval_scale_in_order(const unsigned *node, size_t n, size_t *order, tetris_error *err)
{
    cleanup_free victim *v = malloc((n + 1) * sizeof *v);
    cleanup_free unsigned *sorted = malloc((n + 1) * sizeof *sorted);
    if (v == NULL || sorted == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "scale-in order");
    memcpy(sorted, node, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_uint);
    for (size_t j = 0; j < n; j++) {
        const unsigned *lo = bsearch(&node[j], sorted, n, sizeof *sorted, cmp_uint);
        while (lo > sorted && lo[-1] == node[j])
            lo--;
        unsigned rank = 0;
        while (lo + rank < sorted + n && lo[rank] == node[j])
            rank++;
        v[j] = (victim){.at = j, .rank = rank};
    }
    qsort(v, n, sizeof *v, cmp_victim);
    for (size_t j = 0; j < n; j++)
        order[j] = v[j].at;
    return 0;
}

int eval_variant_sharing(const char *dir, const char *variant, const char *base, uint64_t *shared,
                         uint64_t *total, tetris_error *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/sharing.tsv", dir) >= (int)sizeof path)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "profiles path too long");
    cleanup_fclose FILE *f = fopen(path, "r");
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "open %s (the variants' sharing)", path);
    char line[512];
    for (unsigned no = 1; fgets(line, sizeof line, f) != NULL; no++) {
        char v[64], b[64];
        unsigned long long sh, tot;
        int used = 0;
        if (sscanf(line, "%63[^\t]\t%63[^\t]\t%llu\t%llu%n", v, b, &sh, &tot, &used) != 4 ||
            (line[used] != '\n' && line[used] != '\0') || sh > tot)
            return tetris_fail(err, TETRIS_E_INVAL, 0,
                               "%s:%u: expected VARIANT BASE SHARED_BYTES TENSOR_BYTES "
                               "(tab-separated, shared <= total)",
                               path, no);
        if (strcmp(v, variant) == 0 && strcmp(b, base) == 0) {
            *shared = sh;
            *total = tot;
            return 0;
        }
    }
    if (ferror(f))
        return tetris_fail(err, TETRIS_E_IO, errno, "read %s", path);
    return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: no line for variant %s of %s", path, variant,
                       base);
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

FILE *eval_open_out(const char *dir, const char *name, tetris_error *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        tetris_fail(err, TETRIS_E_INVAL, 0, "--out path too long");
        return NULL;
    }
    FILE *f = fopen(path, "w");
    if (f == NULL)
        tetris_fail(err, TETRIS_E_IO, errno, "open %s", path);
    return f;
}

int eval_close_out(FILE *f, tetris_error *err)
{
    if (f != NULL && (ferror(f) | fclose(f)) != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "write under --out");
    return 0;
}
