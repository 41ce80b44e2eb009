/* tetris-bench-dts.c - DTS against the GLPK optimum.
 *
 *   tetris-bench-dts profiles FILE...   real profiles, a range of rates and SLOs
 *   tetris-bench-dts spaces [N...]      generated config spaces of N configs
 *
 * For each case both algorithms plan the same rate under the same SLO; the
 * table shows DTS's memory over the optimum's (1.000 = optimal) and how long
 * each took to decide. With sharing, a column also shows what DTS would
 * have chosen ranking by full memory (sharing-unaware), costed with sharing:
 * how much making the memory term marginal buys. Times are medians over repetitions. The optimum
 * runs under a time limit; a case where GLPK did not prove optimality is marked and its ratio is
 * against the best plan GLPK found.
 *
 * Generated spaces also plan in the refined mode (dts.h): its memory over
 * the paper model's optimum (a lower bound: it allows mixes that equal
 * shares do not) and over the optimum of its own model (GLPK with the
 * equal-share constraints). Generated configs have no measured throughput,
 * so both modes use b*p/l.
 *
 * Generated spaces: configs <c, m, b, p, l> drawn at random (seeded, so
 * runs repeat) from a CPU inference model with noise: l grows with the batch
 * (b^0.85) and with threads beyond the CPUs, m with the samples in flight.
 * The SLO (400 ms) admits most of them.
 *
 * Exit status: 0 done, 1 bad usage or an unreadable profile, 2 a plan failed. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler-ext/autoscaler/dts.h"
#include "scheduler-ext/autoscaler/ilp.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/options.h"
#include "protocol/profile.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_PLAN = 3 };

typedef struct bench_settings {
    int reps;          /* repetitions for median decision times */
    int ilp_limit_ms;  /* GLPK time limit per solve */
} bench_settings;

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One comparison: median times and both plans' memory. */
typedef struct outcome {
    double dts_mib, ilp_mib;
    double unaware_mib; /* with sharing: DTS ranked without it, costed with it */
    double dts_us, ilp_us;
    unsigned dts_instances, ilp_instances;
    bool optimal;
} outcome;

static int compare(const profile *p, double rps, const plan_options *o, const bench_settings *s,
                   outcome *out, tetris_error *err)
{
    double dts_t[64], ilp_t[64];
    int reps = s->reps < 64 ? s->reps : 64;
    for (int r = 0; r < reps; r++) {
        plan greedy, exact;
        double t0 = clock_now_ms();
        int rc = dts_plan(p, rps, o, &greedy, err);
        double t1 = clock_now_ms();
        if (rc < 0)
            return rc;
        rc = ilp_plan(p, rps, o, s->ilp_limit_ms, &exact, err);
        double t2 = clock_now_ms();
        if (rc < 0) {
            plan_clear(&greedy);
            return rc;
        }
        dts_t[r] = (t1 - t0) * 1e3; /* us */
        ilp_t[r] = (t2 - t1) * 1e3;
        out->dts_mib = greedy.memory_mib + o->alpha * greedy.cpus;
        out->ilp_mib = exact.memory_mib + o->alpha * exact.cpus;
        out->dts_instances = greedy.instances;
        out->ilp_instances = exact.instances;
        out->optimal = exact.optimal;
        plan_clear(&greedy);
        if (o->sharing) {
            /* Sharing-unaware DTS: plan on full memory, pay what sharing costs. */
            plan_options unaware = *o;
            unaware.sharing = false;
            if ((rc = dts_plan(p, rps, &unaware, &greedy, err)) < 0) {
                plan_clear(&exact);
                return rc;
            }
            plan_total(&greedy, p, o);
            out->unaware_mib = greedy.memory_mib + o->alpha * greedy.cpus;
            plan_clear(&greedy);
        }
        plan_clear(&exact);
    }
    out->dts_us = median(dts_t, reps);
    out->ilp_us = median(ilp_t, reps);
    return 0;
}

/* ---- real profiles ---- */

static double fastest_single(const profile *p, enum profile_stat stat)
{
    double best = INFINITY;
    for (size_t i = 0; i < p->n_configs; i++)
        if (p->configs[i].b == 1)
            best = fmin(best, profile_config_latency(&p->configs[i], stat));
    return best;
}

static int bench_profiles(int argc, char **argv, const bench_settings *s)
{
    printf("| model | measured | SLO (ms) | rate (rps) | sharing | DTS MiB (inst) | "
           "optimum MiB (inst) | DTS/opt | sharing-unaware DTS MiB | DTS time (us) | "
           "GLPK time (us) |\n");
    printf("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
    static const double rates[] = {5, 20, 100, 500, 2000};
    static const double slo_factors[] = {1.5, 4};
    for (int f = 0; f < argc; f++) {
        profile *p = NULL;
        tetris_error err = {0};
        if (profile_load(argv[f], &p, &err) < 0) {
            fprintf(stderr, "tetris-bench-dts: %s\n", err.msg);
            return EXIT_FAIL;
        }
        /* SLOs relative to the model: tight (only fast configs qualify) and
         * loose (batching qualifies too). */
        double base = fastest_single(p, PROFILE_STAT_P95);
        for (size_t k = 0; k < sizeof slo_factors / sizeof slo_factors[0]; k++)
            for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++)
                for (int sharing = 0; sharing <= 1; sharing++) {
                    plan_options o = {.slo_ms = ceil(base * slo_factors[k]),
                                      .latency = PROFILE_STAT_P95, .sharing = sharing};
                    outcome out;
                    if (compare(p, rates[r], &o, s, &out, &err) < 0) {
                        fprintf(stderr, "tetris-bench-dts: %s: %s\n", argv[f], err.msg);
                        profile_free(p);
                        return EXIT_PLAN;
                    }
                    char unaware[32] = "-";
                    if (sharing)
                        snprintf(unaware, sizeof unaware, "%.0f", out.unaware_mib);
                    printf("| %s | %s | %g | %g | %s | %.0f (%u) | %.0f (%u)%s | %.3f | %s | "
                           "%.1f | %.0f |\n",
                           p->model, p->measured ? "yes" : "no", o.slo_ms, rates[r],
                           sharing ? "yes" : "no", out.dts_mib, out.dts_instances, out.ilp_mib,
                           out.ilp_instances, out.optimal ? "" : " (time limit)",
                           out.dts_mib / out.ilp_mib, unaware, out.dts_us, out.ilp_us);
                }
        profile_free(p);
    }
    return EXIT_OK;
}

/* ---- generated config spaces ---- */

static double uniform(unsigned *seed, double lo, double hi)
{
    return lo + (hi - lo) * (rand_r(seed) / (double)RAND_MAX);
}

static void generate(profile *p, size_t n, unsigned *seed)
{
    static const double cpus[] = {0.5, 1, 1.5, 2, 3, 4, 6, 8};
    static const int batches[] = {1, 2, 4, 8, 16};
    double t0 = uniform(seed, 5, 50);        /* ms per sample on one CPU */
    double base = uniform(seed, 60, 400);    /* MiB: runtime + model */
    double act = uniform(seed, 2, 40);       /* MiB per sample in flight */
    for (size_t i = 0; i < n; i++) {
        profile_config *c = &p->configs[i];
        c->c = cpus[rand_r(seed) % 8];
        c->b = batches[rand_r(seed) % 5];
        c->p = 1 + rand_r(seed) % 8;
        /* Each thread gets c/p CPUs: below one it is slowed down in
         * proportion, above one intra-op parallelism helps at 70%. */
        double share = c->c / c->p;
        double speedup = share < 1 ? share : 1 + 0.7 * (share - 1);
        double l = t0 * pow(c->b, 0.85) / speedup * uniform(seed, 0.8, 1.25);
        c->latency_ms = (profile_latency){l, l * 1.15, l * 1.3};
        c->m_mib = round((base + act * c->b * c->p) * uniform(seed, 0.9, 1.2));
        c->private_bytes = (uint64_t)((c->m_mib - base * 0.7) * 1048576.0);
        c->shared_bytes = (uint64_t)(base * 0.7 * 1048576.0);
    }
    p->n_configs = n;
}

static int bench_spaces(int argc, char **argv, const bench_settings *s)
{
    static const size_t default_sizes[] = {10, 100, 1000, 10000};
    static const double rates[] = {10, 100, 1000};
    enum { SEEDS = 3 };
    size_t sizes[32];
    size_t n_sizes = 0;
    for (int i = 0; i < argc && n_sizes < 32; i++) {
        tetris_error err = {0};
        uint64_t v;
        if (cli_parse_u64("config space size", argv[i], 1, 1000000, &v, &err) < 0) {
            fprintf(stderr, "tetris-bench-dts: %s\n", err.msg);
            return EXIT_USAGE;
        }
        sizes[n_sizes++] = (size_t)v;
    }
    if (n_sizes == 0) {
        memcpy(sizes, default_sizes, sizeof default_sizes);
        n_sizes = sizeof default_sizes / sizeof default_sizes[0];
    }
    printf("| configs | rate (rps) | cases | DTS/opt mean | DTS/opt max | proved optimal | "
           "DTS time median (us) | GLPK time median (us) | refined/opt max | "
           "refined/opt (equal-share) max | refined proved | refined time median (us) | "
           "GLPK equal-share time median (us) |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t k = 0; k < n_sizes; k++) {
        profile p = {.model = "generated"};
        p.configs = calloc(sizes[k], sizeof *p.configs);
        if (p.configs == NULL) {
            fprintf(stderr, "tetris-bench-dts: out of memory\n");
            return EXIT_FAIL;
        }
        for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
            double ratio_sum = 0, ratio_max = 0, dts_t[SEEDS], ilp_t[SEEDS];
            double ref_max = 0, ref_es_max = 0, ref_t[SEEDS], ref_ilp_t[SEEDS];
            int proved = 0, ref_proved = 0;
            for (unsigned seed_no = 0; seed_no < SEEDS; seed_no++) {
                unsigned seed = 1000u * (unsigned)k + seed_no + 1;
                generate(&p, sizes[k], &seed);
                plan_options o = {.slo_ms = 400, .latency = PROFILE_STAT_P95};
                outcome out;
                tetris_error err = {0};
                if (compare(&p, rates[r], &o, s, &out, &err) < 0) {
                    fprintf(stderr, "tetris-bench-dts: %zu configs, %g rps: %s\n", sizes[k],
                            rates[r], err.msg);
                    free(p.configs);
                    return EXIT_PLAN;
                }
                /* The refined mode against its own model's optimum (equal
                 * shares) and against the paper's optimum, which drops
                 * that constraint and so bounds it from below. */
                plan_options ro = o;
                ro.mode = PLAN_MODE_REFINED;
                outcome ref;
                if (compare(&p, rates[r], &ro, s, &ref, &err) < 0) {
                    fprintf(stderr, "tetris-bench-dts: %zu configs, %g rps, refined: %s\n",
                            sizes[k], rates[r], err.msg);
                    free(p.configs);
                    return EXIT_PLAN;
                }
                ref_max = fmax(ref_max, ref.dts_mib / out.ilp_mib);
                ref_es_max = fmax(ref_es_max, ref.dts_mib / ref.ilp_mib);
                ref_proved += ref.optimal;
                ref_t[seed_no] = ref.dts_us;
                ref_ilp_t[seed_no] = ref.ilp_us;
                double ratio = out.dts_mib / out.ilp_mib;
                ratio_sum += ratio;
                ratio_max = fmax(ratio_max, ratio);
                proved += out.optimal;
                dts_t[seed_no] = out.dts_us;
                ilp_t[seed_no] = out.ilp_us;
            }
            printf("| %zu | %g | %d | %.3f | %.3f | %d/%d | %.1f | %.1f | %.3f | %.3f | %d/%d | "
                   "%.1f | %.1f |\n",
                   sizes[k], rates[r], SEEDS, ratio_sum / SEEDS, ratio_max, proved, SEEDS,
                   median(dts_t, SEEDS), median(ilp_t, SEEDS), ref_max, ref_es_max, ref_proved,
                   SEEDS, median(ref_t, SEEDS), median(ref_ilp_t, SEEDS));
            fflush(stdout);
        }
        free(p.configs);
    }
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    bench_settings s = {.reps = 5, .ilp_limit_ms = 10000};
    const struct opt_spec specs[] = {
        {.name = "reps",
         .type = OPT_TYPE_INT,
         .dest = &s.reps,
         .min = 1,
         .max = 1000000000,
         .env = "BENCH_REPS",
         .meta = "N",
         .help = "repetitions for the median decision times (default 5)"},
        {.name = "ilp-limit-ms",
         .type = OPT_TYPE_INT,
         .dest = &s.ilp_limit_ms,
         .min = 1,
         .max = 1000000000,
         .env = "BENCH_ILP_LIMIT_MS",
         .meta = "MS",
         .help = "GLPK's time limit per solve (default 10000)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-bench-dts",
        .synopsis = "[OPTION]... profiles FILE...\n[OPTION]... spaces [N...]",
        .about = "DTS's memory over the GLPK optimum and the decision times, for measured\n"
                 "profiles or generated config spaces of N configs (default 10 100 1000\n"
                 "10000); prints a Markdown table.\n",
        .options = specs,
        .epilogue = "exit status: 0 done, 1 unreadable profile, 2 bad usage, 3 a plan failed\n",
        .options_first = true,
    };
    int first;

    log_init(argv[0]);
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return EXIT_USAGE;
    if (argc - first >= 2 && strcmp(argv[first], "profiles") == 0)
        return bench_profiles(argc - first - 1, argv + first + 1, &s);
    if (argc - first >= 1 && strcmp(argv[first], "spaces") == 0)
        return bench_spaces(argc - first - 1, argv + first + 1, &s);
    return opt_usage_error(&prog, "expected profiles FILE... or spaces [N...]"), EXIT_USAGE;
}
