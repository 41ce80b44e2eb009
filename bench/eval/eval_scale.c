/* eval_scale.c - tetris-eval's scale mode (--nodes, --functions): the same
 * simulation as the testbed evaluation on a large cluster, to measure the
 * control plane's own cost and DTS against the optimum on the decisions
 * the evaluation really made.
 *
 * Nodes mix the testbed's two kinds in its proportion (one in four of 80
 * CPUs/256 GiB, the others 32 CPUs/128 GiB). Each function is drawn,
 * seeded, from the selected applications' functions (its profile and SLO),
 * gets a trace kind and a mean rate from a log-normal spread (median
 * 0.2 rps, sigma 2, capped at 500 rps: many small functions, few large,
 * like the Azure Functions traces). Every function is its own model: its
 * tensors are shared by its own instances on a node only (distinct
 * fine-tuned models, not one model for thousands of functions).
 *
 * Each decision (the autoscaler's as_decide for one function, then the
 * placement of what it changed) is timed with the thread's CPU clock.
 * Placement and scale-in follow the testbed mode's rules (the extender's θ,
 * then kube-scheduler's LeastAllocated, then the first node; scale-in in
 * the ReplicaSet controller's order), on 1,000s of nodes. A reservoir of
 * each policy's scale-out
 * decisions (function, residual rate, whether its tensors were resident)
 * is re-planned afterwards by DTS and by GLPK (ilp.h) in both plan modes,
 * with the time limit tetris-autoscaler --exact uses by default. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench/eval/eval.h"
#include "scheduler-ext/autoscaler/autoscaler.h"
#include "scheduler-ext/autoscaler/dts.h"
#include "scheduler-ext/autoscaler/ilp.h"
#include "scheduler-ext/extender/similarity.h"
#include "common/cleanup.h"
#include "common/clock.h"
#include "common/log.h"
#include "protocol/profile.h"

/* tetris-autoscaler's default --time-limit-ms for --exact. */
#define ILP_LIMIT_MS 10000
#define RATE_MEDIAN_RPS 0.2
#define RATE_SIGMA 2.0
#define RATE_MAX_RPS 500.0
#define MAX_MODELS (N_APPS * MAX_FNS)

typedef struct node {
    double cpus, mem_mib;
    double used_cpus, used_mib;
    double req_mib; /* the pods' memory requests (no store) */
} node;

typedef struct instance {
    unsigned node;
    unsigned config;
} instance;

/* A function as drawn: which model, SLO, rate and trace; under sharing
 * the MiB of tensors its node's store keeps for it alone, and for a
 * variant of a shared base (--bases) which base and its shared MiB. */
typedef struct fn_spec {
    size_t model;
    double slo_ms;
    double mean_rps;
    size_t trace;
    double own_mib;
    long base; /* -1: none */
    double base_mib;
} fn_spec;

/* A node whose store still holds a function's tensors after its last
 * instance there went: until the daemon's reclaim rule frees them. */
typedef struct lingering {
    unsigned node;
    int64_t last_use_s;
} lingering;

typedef struct fn_state {
    as_function *fn;
    as_policy pol;
    instance *inst;
    size_t n_inst, cap_inst;
    lingering *linger;
    size_t n_linger, cap_linger;
    double capacity_rps;
} fn_state;

/* A scale-out decision DTS made, kept to be re-planned exactly. */
typedef struct sample {
    unsigned fn;
    double rps;
    bool resident;
} sample;

typedef struct scale_result {
    double mean_mib, peak_mib, violation_rate, mean_cpus, mean_instances;
    unsigned peak_instances;
    unsigned long unplaced, decisions, actions;
    double cpu_s, cpu_us_p50, cpu_us_p99, cpu_us_max;
    double act_us_p50, act_us_p99; /* the decisions that changed instances */
    double wall_s;                 /* the whole simulated run of the policy */
} scale_result;

typedef struct cluster {
    const scale_options *o;
    const policy_def *pol;
    profile *models[MAX_MODELS];
    const char *model_names[MAX_MODELS];
    size_t n_models;
    fn_spec *spec;
    float *arr; /* arrivals: arr[f * duration + t] */
    node *nodes;
    fn_state *fns;
    double used_mib, used_cpus;
    unsigned long instances, unplaced;
    sample *samples;
    size_t n_samples;
    unsigned long seen_samples;
    uint64_t sample_rng;
    /* The shared bases (--bases), base b on node n at [b * nodes + n]:
     * instances of its variants there, whether the store holds its
     * tensors, and since when no variant there has used them. */
    size_t n_bases;
    double *base_mib; /* per base */
    unsigned *base_count;
    bool *base_held;
    int64_t *base_last_use_s;
    bool *own_held; /* scratch for place(): nodes holding a function's own tensors */
} cluster;

static double thread_cpu_us(void)
{
    /* Cannot fail for this clock on Linux (as common/clock.h's). */
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* What one reading of the thread CPU clock costs (a system call on some
 * kernels): the median of back-to-back pairs, printed next to the figures
 * that include it. */
static double clock_read_us(void)
{
    double d[101];
    for (size_t i = 0; i < 101; i++) {
        double t0 = thread_cpu_us();
        d[i] = thread_cpu_us() - t0;
    }
    qsort(d, 101, sizeof *d, cmp_double);
    return d[50];
}

/* The q-quantile of n sorted values (nearest rank). */
static size_t rank_of(size_t n, double q)
{
    size_t k = (size_t)ceil(q * (double)n);
    return k > 0 ? k - 1 : 0;
}

/* ---- the functions and their traces ---- */

static int load_model(cluster *c, const char *name, size_t *out, tetris_error *err)
{
    for (size_t k = 0; k < c->n_models; k++)
        if (strcmp(c->model_names[k], name) == 0) {
            *out = k;
            return 0;
        }
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s.profile.yaml", c->o->profiles, name) >= (int)sizeof path)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "profiles path too long");
    int r = profile_load(path, &c->models[c->n_models], err);
    if (r < 0)
        return r;
    c->model_names[c->n_models] = name;
    *out = c->n_models++;
    return 0;
}

/* Makes the variant function sp (the i-th drawn) of one of the --bases
 * bases of its model, sharing shared of its total tensor bytes with it
 * (sharing.tsv). The base is drawn from a stream of its own, so that the
 * functions, their traces and rates are the same for every --bases. */
static void draw_base(cluster *c, fn_spec *sp, unsigned i, uint64_t shared, uint64_t total)
{
    uint64_t s = c->o->seed * 1000003u + i;
    sp->base = (long)(sp->model * c->o->bases + rng_next(&s) % c->o->bases);
    sp->base_mib = (double)shared / 1048576.0;
    c->base_mib[sp->base] = sp->base_mib;
    sp->own_mib = (double)(total - shared) / 1048576.0;
}

static int draw_functions(cluster *c, tetris_error *err)
{
    const scale_options *o = c->o;
    size_t choices[N_APPS * MAX_FNS][2], n_choices = 0, kinds[N_TRACES], n_kinds = 0;
    /* A variant's sharing.tsv line, read at its first draw. */
    uint64_t shared[N_APPS * MAX_FNS], total[N_APPS * MAX_FNS];
    bool read[N_APPS * MAX_FNS] = {false};
    for (size_t a = 0; a < N_APPS; a++)
        for (size_t f = 0; o->app_on[a] && f < MAX_FNS && apps[a].models[f] != NULL; f++) {
            choices[n_choices][0] = a;
            choices[n_choices++][1] = f;
        }
    for (size_t t = 0; t < N_TRACES; t++)
        if (o->trace_on[t])
            kinds[n_kinds++] = t;
    c->spec = calloc(o->functions, sizeof *c->spec);
    c->arr = malloc((size_t)o->functions * o->duration_s * sizeof *c->arr);
    c->n_bases = (size_t)MAX_MODELS * o->bases;
    if ((c->base_mib = calloc(c->n_bases + 1, sizeof *c->base_mib)) == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "bases");
    cleanup_free double *buf = calloc(o->duration_s, sizeof *buf);
    if (c->spec == NULL || c->arr == NULL || buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "%u functions x %u s of trace", o->functions,
                           o->duration_s);
    uint64_t s = o->seed * 7919u + 17;
    for (unsigned i = 0; i < o->functions; i++) {
        fn_spec *sp = &c->spec[i];
        size_t k = rng_next(&s) % n_choices;
        const size_t *ch = choices[k];
        int r = load_model(c, apps[ch[0]].models[ch[1]], &sp->model, err);
        if (r < 0)
            return r;
        sp->slo_ms = apps[ch[0]].slo_ms[ch[1]];
        sp->own_mib = plan_shared_mib(c->models[sp->model]);
        sp->base = -1;
        const char *variant = apps[ch[0]].variants[ch[1]];
        if (o->bases > 0 && variant != NULL) {
            if (!read[k] &&
                (r = eval_variant_sharing(o->profiles, variant, c->models[sp->model]->model,
                                          &shared[k], &total[k], err)) < 0)
                return r;
            read[k] = true;
            draw_base(c, sp, i, shared[k], total[k]);
        }
        sp->trace = kinds[rng_next(&s) % n_kinds];
        double u1 = fmax(rng_unit(&s), 1e-300), u2 = rng_unit(&s);
        double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
        sp->mean_rps = fmin(RATE_MAX_RPS, RATE_MEDIAN_RPS * exp(RATE_SIGMA * z)) * o->scale;
        make_trace(traces[sp->trace], sp->mean_rps, o->duration_s, rng_next(&s), buf);
        for (unsigned t = 0; t < o->duration_s; t++)
            c->arr[(size_t)i * o->duration_s + t] = (float)buf[t];
    }
    return 0;
}

/* ---- placement ---- */

/* items (n of *cap, each size bytes) with room for one more: the same, or
 * grown to twice the capacity; NULL (items unchanged) when out of memory. */
static void *room_for_one(void *items, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return items;
    size_t grown = *cap ? *cap * 2 : 4;
    void *v = realloc(items, grown * size);
    if (v != NULL)
        *cap = grown;
    return v;
}

static bool fits(const node *nd, double cpus, double mib)
{
    return nd->used_cpus + cpus <= nd->cpus && nd->used_mib + mib <= nd->mem_mib;
}

/* kube-scheduler's LeastAllocated for a pod of cpus and req_mib on nd: the
 * mean of the free CPU and memory fractions of the requests, the pod's
 * included. */
static double least_allocated(const node *nd, double cpus, double req_mib)
{
    return ((nd->cpus - nd->used_cpus - cpus) / nd->cpus +
            (nd->mem_mib - nd->req_mib - req_mib) / nd->mem_mib) /
           2;
}

/* The node, among those where an instance of config i of f fits, with the
 * highest extender score, then the least allocated, then the first: for a
 * variant of a shared base, by θ over its own and its base's tensors on
 * every node. Returns the node or -1, and whether it holds f's own
 * tensors. */
static long best_node_for_variant(cluster *c, size_t f, size_t i, bool *own_held)
{
    const fn_spec *sp = &c->spec[f];
    const fn_state *st = &c->fns[f];
    const profile_config *cfg = &st->fn->prof->configs[i];
    double mib = plan_instance_mib(cfg, &st->pol.plan);
    for (size_t j = 0; j < st->n_inst; j++)
        c->own_held[st->inst[j].node] = true;
    for (size_t j = 0; j < st->n_linger; j++)
        c->own_held[st->linger[j].node] = true;
    long best = -1;
    int best_score = -1;
    double best_free = -INFINITY;
    for (size_t n = 0; n < c->o->nodes; n++) {
        bool own = c->own_held[n], base = c->base_held[sp->base * c->o->nodes + n];
        double add = mib + (own ? 0 : sp->own_mib) + (base ? 0 : sp->base_mib);
        if (!fits(&c->nodes[n], cfg->c, add))
            continue;
        /* The extender's score, in KiB of the tensors held and lacking. */
        double held = (own ? sp->own_mib : 0) + (base ? sp->base_mib : 0);
        double lacking = (own ? 0 : sp->own_mib) + (base ? 0 : sp->base_mib);
        int score = similarity_score((uint64_t)llround(held * 1024),
                                     (uint64_t)llround(lacking * 1024));
        double free = least_allocated(&c->nodes[n], cfg->c, mib);
        if (score > best_score || (score == best_score && free > best_free)) {
            best = (long)n;
            best_score = score;
            best_free = free;
        }
    }
    *own_held = best >= 0 && c->own_held[best];
    for (size_t j = 0; j < st->n_inst; j++)
        c->own_held[st->inst[j].node] = false;
    for (size_t j = 0; j < st->n_linger; j++)
        c->own_held[st->linger[j].node] = false;
    return best;
}

/* One instance of config i of function f, by the testbed mode's rule: among
 * the nodes where it fits, the highest extender score (a function is its
 * own model, so θ is 1 on a node running one of its instances or keeping
 * its tensors, else 0; a variant of a shared base counts its base's
 * tensors too), then the least allocated, then the first node. The
 * baselines have no extender. */
static int place(cluster *c, size_t f, size_t i, bool *placed, tetris_error *err)
{
    fn_state *st = &c->fns[f];
    const fn_spec *sp = &c->spec[f];
    const profile_config *cfg = &st->fn->prof->configs[i];
    const plan_options *o = &st->pol.plan;
    double mib = plan_instance_mib(cfg, o), shared = o->sharing ? sp->own_mib : 0;
    bool variant = o->sharing && sp->base >= 0;
    long best = -1;
    bool resident = false;
    double best_free = -INFINITY;
    if (variant) {
        best = best_node_for_variant(c, f, i, &resident);
    } else {
        /* Nodes whose stores hold f's tensors: those running it, then
         * those still keeping them (θ = 1 on both). */
        size_t n_held = o->sharing ? st->n_inst + st->n_linger : 0;
        for (size_t j = 0; j < n_held; j++) {
            bool lingers = j >= st->n_inst;
            unsigned n = lingers ? st->linger[j - st->n_inst].node : st->inst[j].node;
            double free = least_allocated(&c->nodes[n], cfg->c, mib);
            if (fits(&c->nodes[n], cfg->c, mib) &&
                (free > best_free || (free == best_free && (long)n < best))) {
                best_free = free;
                best = n;
            }
        }
        resident = best >= 0;
        for (size_t n = 0; !resident && n < c->o->nodes; n++) {
            double free = least_allocated(&c->nodes[n], cfg->c, mib);
            if (fits(&c->nodes[n], cfg->c, mib + shared) && free > best_free) {
                best_free = free;
                best = (long)n;
            }
        }
    }
    *placed = best >= 0;
    if (!*placed)
        return 0;
    instance *v = room_for_one(st->inst, st->n_inst, &st->cap_inst, sizeof *v);
    if (v == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "instances");
    st->inst = v;
    for (size_t j = 0; resident && j < st->n_linger; j++)
        if (st->linger[j].node == (unsigned)best) { /* its store's copy is in use again */
            st->linger[j] = st->linger[--st->n_linger];
            break;
        }
    node *nd = &c->nodes[best];
    double add = mib + (resident ? 0 : shared);
    if (variant) {
        size_t b = (size_t)sp->base * c->o->nodes + (size_t)best;
        if (!c->base_held[b]) {
            c->base_held[b] = true;
            add += sp->base_mib;
        }
        c->base_count[b]++;
    }
    nd->used_mib += add;
    nd->req_mib += mib;
    nd->used_cpus += cfg->c;
    c->used_mib += add;
    c->used_cpus += cfg->c;
    c->instances++;
    st->inst[st->n_inst++] = (instance){.node = (unsigned)best, .config = (unsigned)i};
    return 0;
}

static unsigned on_node(const fn_state *st, unsigned n)
{
    unsigned k = 0;
    for (size_t j = 0; j < st->n_inst; j++)
        k += st->inst[j].node == n;
    return k;
}

/* Under sharing, node n's store keeps f's tensors after its last instance
 * there went at t, until the reclaim pass frees them. */
static int linger(fn_state *st, unsigned n, int64_t t, tetris_error *err)
{
    lingering *v = room_for_one(st->linger, st->n_linger, &st->cap_linger, sizeof *v);
    if (v == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "lingering tensors");
    st->linger = v;
    st->linger[st->n_linger++] = (lingering){.node = n, .last_use_s = t};
    return 0;
}

/* Removes d instances of config i of function f at time t as the testbed
 * mode does (the ReplicaSet controller's order: ranked once, before any
 * goes, by the config's instances on the same node, the most first, then
 * the newest). */
static int release(cluster *c, size_t f, size_t i, unsigned d, int64_t t, tetris_error *err)
{
    fn_state *st = &c->fns[f];
    cleanup_free size_t *at = malloc((st->n_inst + 1) * sizeof *at);
    cleanup_free size_t *pick = malloc((st->n_inst + 1) * sizeof *pick);
    cleanup_free unsigned *nodes = malloc((st->n_inst + 1) * sizeof *nodes);
    if (at == NULL || pick == NULL || nodes == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "scale-in");
    size_t n_v = 0;
    for (size_t j = 0; j < st->n_inst; j++)
        if (st->inst[j].config == i) {
            at[n_v] = j;
            nodes[n_v++] = st->inst[j].node;
        }
    int r = eval_scale_in_order(nodes, n_v, pick, err);
    if (r < 0)
        return r;
    const profile_config *cfg = &st->fn->prof->configs[i];
    const plan_options *o = &st->pol.plan;
    double mib = plan_instance_mib(cfg, o);
    for (size_t k = 0; k < d && k < n_v; k++) {
        instance *in = &st->inst[at[pick[k]]];
        node *nd = &c->nodes[in->node];
        if (o->sharing && on_node(st, in->node) == 1 && (r = linger(st, in->node, t, err)) < 0)
            return r;
        if (o->sharing && c->spec[f].base >= 0) {
            size_t b = (size_t)c->spec[f].base * c->o->nodes + in->node;
            if (--c->base_count[b] == 0)
                c->base_last_use_s[b] = t;
        }
        nd->used_mib -= mib;
        nd->req_mib -= mib;
        nd->used_cpus -= cfg->c;
        c->used_mib -= mib;
        c->used_cpus -= cfg->c;
        c->instances--;
        in->node = UINT32_MAX; /* gone: on no node, compacted below */
    }
    size_t kept = 0;
    for (size_t j = 0; j < st->n_inst; j++)
        if (st->inst[j].node != UINT32_MAX)
            st->inst[kept++] = st->inst[j];
    st->n_inst = kept;
    return 0;
}

/* ---- one policy ---- */

static void cluster_free_policy(cluster *c)
{
    for (size_t f = 0; c->fns != NULL && f < c->o->functions; f++) {
        if (c->fns[f].fn != NULL)
            c->fns[f].fn->prof = NULL; /* shared by every function of the model */
        as_function_free(c->fns[f].fn);
        free(c->fns[f].inst);
        free(c->fns[f].linger);
    }
    free(c->fns);
    c->fns = NULL;
    free(c->nodes);
    c->nodes = NULL;
    free(c->base_count);
    free(c->base_held);
    free(c->base_last_use_s);
    free(c->own_held);
    c->base_count = NULL;
    c->base_held = c->own_held = NULL;
    c->base_last_use_s = NULL;
}

static int cluster_init_policy(cluster *c, const policy_def *pol, tetris_error *err)
{
    const scale_options *o = c->o;
    c->pol = pol;
    c->used_mib = c->used_cpus = 0;
    c->instances = c->unplaced = c->seen_samples = 0;
    c->n_samples = 0;
    c->sample_rng = o->seed * 104729u + (uint64_t)(pol - policies);
    c->nodes = calloc(o->nodes, sizeof *c->nodes);
    c->fns = calloc(o->functions, sizeof *c->fns);
    size_t n_base_nodes = c->n_bases * o->nodes + 1;
    c->base_count = calloc(n_base_nodes, sizeof *c->base_count);
    c->base_held = calloc(n_base_nodes, sizeof *c->base_held);
    c->base_last_use_s = calloc(n_base_nodes, sizeof *c->base_last_use_s);
    c->own_held = calloc(o->nodes, sizeof *c->own_held);
    if (c->nodes == NULL || c->fns == NULL || c->base_count == NULL || c->base_held == NULL ||
        c->base_last_use_s == NULL || c->own_held == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "cluster");
    for (unsigned n = 0; n < o->nodes; n++)
        c->nodes[n] = n % 4 == 0 ? (node){.cpus = 80, .mem_mib = 256 * 1024}
                                 : (node){.cpus = 32, .mem_mib = 128 * 1024};
    for (unsigned f = 0; f < o->functions; f++) {
        char name[32];
        snprintf(name, sizeof name, "fn-%u", f);
        int r = as_function_new(name, c->models[c->spec[f].model], &c->fns[f].fn, err);
        if (r < 0)
            return r;
        c->fns[f].pol = eval_policy(pol, c->spec[f].slo_ms, o->mode, o->headroom);
    }
    return 0;
}

/* Keeps a uniform sample of the scale-out decisions (reservoir). */
static void keep_sample(cluster *c, const sample *s)
{
    unsigned long k = c->seen_samples++;
    if (k < c->o->gap_samples) {
        c->samples[c->n_samples++] = *s;
        return;
    }
    unsigned long j = rng_next(&c->sample_rng) % (k + 1);
    if (j < c->o->gap_samples)
        c->samples[j] = *s;
}

/* A reclaim pass of the node daemons at time t, by their own rule
 * (reclaim_policy.h): the tensors a node keeps for a function none of
 * whose instances runs there, freed once unused for the keep-alive.
 * Stores are unbounded here, so nothing is evicted. */
static int reclaim_pass(cluster *c, int64_t t, tetris_error *err)
{
    for (size_t f = 0; f < c->o->functions; f++) {
        fn_state *st = &c->fns[f];
        if (st->n_linger == 0)
            continue;
        cleanup_free struct cold_tensor *cold = malloc(st->n_linger * sizeof *cold);
        if (cold == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "reclaim pass");
        for (size_t j = 0; j < st->n_linger; j++)
            cold[j] = (struct cold_tensor){.last_use_s = st->linger[j].last_use_s, .slot = j};
        double shared = c->spec[f].own_mib;
        size_t freed = eval_reclaimable(cold, st->n_linger, t, c->o->keep_alive_s);
        for (size_t j = 0; j < freed; j++) {
            unsigned n = st->linger[cold[j].slot].node;
            c->nodes[n].used_mib -= shared;
            c->used_mib -= shared;
            st->linger[cold[j].slot].node = UINT32_MAX; /* freed: compacted below */
        }
        size_t kept = 0;
        for (size_t j = 0; freed > 0 && j < st->n_linger; j++)
            if (st->linger[j].node != UINT32_MAX)
                st->linger[kept++] = st->linger[j];
        if (freed > 0)
            st->n_linger = kept;
    }
    /* A shared base's layers: the same rule, per node. */
    for (size_t b = 0; b < c->n_bases * c->o->nodes; b++)
        if (c->base_held[b] && c->base_count[b] == 0 &&
            reclaim_judge(t, c->base_last_use_s[b], c->o->keep_alive_s, false, 0, 0) !=
                RECLAIM_KEEP) {
            double mib = c->base_mib[b / c->o->nodes];
            c->base_held[b] = false;
            c->nodes[b % c->o->nodes].used_mib -= mib;
            c->used_mib -= mib;
        }
    return 0;
}

/* One decision for function f at time t: as_decide, then the placement of
 * what it changed. */
static int decide(cluster *c, size_t f, unsigned t, double rate, unsigned *want, bool *acted,
                  tetris_error *err)
{
    fn_state *st = &c->fns[f];
    as_function *fn = st->fn;
    double before = st->capacity_rps;
    unsigned instances = as_instances(fn);
    const char *reason;
    int r = as_decide(fn, &st->pol, t, rate, want, &reason, err);
    if (r < 0)
        return tetris_wrap(err, "policy %s", c->pol->name);
    *acted = reason != NULL;
    if (reason == NULL)
        return 0;
    if (strcmp(reason, "scale-out") == 0 && c->o->gap_samples > 0)
        keep_sample(c, &(sample){.fn = (unsigned)f,
                                 .rps = rate * (1 + st->pol.headroom_out) - before,
                                 .resident = st->pol.plan.sharing && instances > 0});
    bool changed = false;
    for (size_t i = 0; i < fn->prof->n_configs; i++) {
        if (fn->replicas[i] > want[i]) {
            if ((r = release(c, f, i, fn->replicas[i] - want[i], t, err)) < 0)
                return r;
            fn->replicas[i] = want[i];
            changed = true;
        }
        while (fn->replicas[i] < want[i]) {
            bool placed;
            if ((r = place(c, f, i, &placed, err)) < 0)
                return r;
            if (!placed) {
                c->unplaced += want[i] - fn->replicas[i];
                break;
            }
            fn->replicas[i]++;
            changed = true;
        }
    }
    if (changed)
        fn->last_change_s = t;
    st->capacity_rps = as_capacity_rps(fn, &st->pol.plan);
    return 0;
}

static int simulate(cluster *c, scale_result *res, tetris_error *err)
{
    const scale_options *o = c->o;
    unsigned n = o->duration_s, rounds = (n + o->interval_s - 1) / o->interval_s;
    size_t max_configs = 0;
    for (size_t k = 0; k < c->n_models; k++)
        if (c->models[k]->n_configs > max_configs)
            max_configs = c->models[k]->n_configs;
    cleanup_free unsigned *want = calloc(max_configs, sizeof *want);
    cleanup_free float *cost = calloc((size_t)rounds * o->functions, sizeof *cost);
    cleanup_free float *act = calloc((size_t)rounds * o->functions, sizeof *act);
    if (want == NULL || cost == NULL || act == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "decision costs");
    double requests = 0, violated = 0, cpus_sum = 0, inst_sum = 0, cpu_us = 0;
    double wall0 = clock_now_ms();
    *res = (scale_result){0};
    for (unsigned t = 0; t < n; t++) {
        if (t % RECLAIM_INTERVAL_S == 0) {
            int r = reclaim_pass(c, t, err);
            if (r < 0)
                return r;
        }
        if (t % o->interval_s == 0) {
            /* As the testbed mode: the last interval's mean rate, and the
             * first interval's at time 0 (the run starts warm). */
            unsigned from = t >= o->interval_s ? t - o->interval_s : 0;
            unsigned to = t > 0 ? t : (o->interval_s < n ? o->interval_s : n);
            for (size_t f = 0; f < o->functions; f++) {
                const float *a = &c->arr[f * n];
                double sum = 0;
                for (unsigned u = from; u < to; u++)
                    sum += a[u];
                bool acted = false;
                double t0 = thread_cpu_us();
                int r = decide(c, f, t, sum / (to - from), want, &acted, err);
                double us = thread_cpu_us() - t0;
                if (r < 0)
                    return r;
                cost[res->decisions++] = (float)us;
                if (acted)
                    act[res->actions++] = (float)us;
                cpu_us += us;
            }
        }
        for (size_t f = 0; f < o->functions; f++) {
            double a = c->arr[f * n + t];
            requests += a;
            violated += fmax(0, a - c->fns[f].capacity_rps);
        }
        cpus_sum += c->used_cpus;
        inst_sum += (double)c->instances;
        res->mean_mib += c->used_mib / n;
        res->peak_mib = fmax(res->peak_mib, c->used_mib);
        if (c->instances > res->peak_instances)
            res->peak_instances = (unsigned)c->instances;
    }
    res->wall_s = (clock_now_ms() - wall0) / 1e3;
    res->violation_rate = requests > 0 ? violated / requests : 0;
    res->mean_cpus = cpus_sum / n;
    res->mean_instances = inst_sum / n;
    res->unplaced = c->unplaced;
    res->cpu_s = cpu_us / 1e6;
    qsort(cost, res->decisions, sizeof *cost, cmp_float);
    res->cpu_us_p50 = cost[rank_of(res->decisions, 0.5)];
    res->cpu_us_p99 = cost[rank_of(res->decisions, 0.99)];
    res->cpu_us_max = cost[res->decisions - 1];
    if (res->actions > 0) {
        qsort(act, res->actions, sizeof *act, cmp_float);
        res->act_us_p50 = act[rank_of(res->actions, 0.5)];
        res->act_us_p99 = act[rank_of(res->actions, 0.99)];
    }
    return 0;
}

/* ---- DTS against the optimum ---- */

typedef struct gap_result {
    size_t cases, optimal, below_one;
    double mean, p99, max, min;
    double dts_us_median, ilp_us_median;
} gap_result;

static int gap(const cluster *c, enum plan_mode mode, gap_result *g, tetris_error *err)
{
    *g = (gap_result){.min = INFINITY};
    cleanup_free double *ratio = calloc(c->n_samples + 1, sizeof *ratio);
    cleanup_free double *dts_us = calloc(c->n_samples + 1, sizeof *dts_us);
    cleanup_free double *ilp_us = calloc(c->n_samples + 1, sizeof *ilp_us);
    if (ratio == NULL || dts_us == NULL || ilp_us == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "gap samples");
    for (size_t k = 0; k < c->n_samples; k++) {
        const sample *s = &c->samples[k];
        const fn_state *st = &c->fns[s->fn];
        plan_options po = st->pol.plan;
        po.mode = mode;
        po.resident = s->resident;
        plan greedy, exact;
        double t0 = thread_cpu_us();
        int r = dts_plan(st->fn->prof, s->rps, &po, &greedy, err);
        double t1 = thread_cpu_us();
        if (r < 0)
            return tetris_wrap(err, "DTS, %s mode, %g rps", plan_mode_name(mode), s->rps);
        r = ilp_plan(st->fn->prof, s->rps, &po, ILP_LIMIT_MS, &exact, err);
        double t2 = thread_cpu_us();
        if (r < 0) {
            plan_clear(&greedy);
            return tetris_wrap(err, "GLPK, %s mode, %g rps", plan_mode_name(mode), s->rps);
        }
        if (exact.memory_mib > 0) {
            double x = greedy.memory_mib / exact.memory_mib;
            dts_us[g->cases] = t1 - t0;
            ilp_us[g->cases] = t2 - t1;
            ratio[g->cases++] = x;
            g->optimal += exact.optimal;
            g->below_one += x < 1 - 1e-9;
            g->mean += x;
            g->min = fmin(g->min, x);
        }
        plan_clear(&greedy);
        plan_clear(&exact);
    }
    if (g->cases == 0)
        return 0;
    g->mean /= g->cases;
    qsort(ratio, g->cases, sizeof *ratio, cmp_double);
    qsort(dts_us, g->cases, sizeof *dts_us, cmp_double);
    qsort(ilp_us, g->cases, sizeof *ilp_us, cmp_double);
    g->p99 = ratio[rank_of(g->cases, 0.99)];
    g->max = ratio[g->cases - 1];
    g->dts_us_median = dts_us[rank_of(g->cases, 0.5)];
    g->ilp_us_median = ilp_us[rank_of(g->cases, 0.5)];
    return 0;
}

/* ---- output ---- */

static void cluster_free(cluster *c)
{
    cluster_free_policy(c);
    for (size_t k = 0; k < c->n_models; k++)
        profile_free(c->models[k]);
    free(c->spec);
    free(c->arr);
    free(c->samples);
    free(c->base_mib);
}

static int run_all(cluster *c, FILE *tsv, FILE *gap_tsv, tetris_error *err)
{
    const scale_options *o = c->o;
    static scale_result res[N_POLICIES];
    static gap_result gaps[N_POLICIES][2];
    c->samples = calloc(o->gap_samples + 1, sizeof *c->samples);
    if (c->samples == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "gap samples");
    int r = draw_functions(c, err);
    double mean_rps = 0;
    for (unsigned f = 0; r == 0 && f < o->functions; f++)
        mean_rps += c->spec[f].mean_rps;
    for (size_t p = 0; p < N_POLICIES && r == 0; p++) {
        r = cluster_init_policy(c, &policies[p], err);
        if (r == 0)
            r = simulate(c, &res[p], err);
        for (int m = 0; m < 2 && r == 0; m++)
            r = gap(c, m == 0 ? PLAN_MODE_PAPER : PLAN_MODE_REFINED, &gaps[p][m], err);
        cluster_free_policy(c);
        if (r == 0 && res[p].unplaced > 0)
            log_warn("event=unplaced policy=%s instances=%lu", policies[p].name, res[p].unplaced);
    }
    if (r < 0)
        return r;

    printf("Scale: %u nodes, %u functions (summed mean rate %.0f rps), %u s, a decision per "
           "function every %u s, %s mode",
           o->nodes, o->functions, mean_rps, o->duration_s, o->interval_s, plan_mode_name(o->mode));
    if (o->bases > 0)
        printf(", variants of %u bases per model", o->bases);
    printf("\n");
    printf("%-10s %12s %12s %7s %9s %9s %7s %9s\n", "policy", "mean_GiB", "peak_GiB", "viol_%",
           "CPUs", "inst", "peak", "unplaced");
    for (size_t p = 0; p < N_POLICIES; p++) {
        const scale_result *x = &res[p];
        printf("%-10s %12.1f %12.1f %7.2f %9.0f %9.0f %7u %9lu\n", policies[p].name,
               x->mean_mib / 1024, x->peak_mib / 1024, 100 * x->violation_rate, x->mean_cpus,
               x->mean_instances, x->peak_instances, x->unplaced);
    }
    printf("\nTetris's mean-memory reduction: %.0f%% vs INFless-like, %.0f%% vs Photons-like, "
           "%.0f%% vs tetris-RO\n",
           100 * (1 - res[0].mean_mib / res[2].mean_mib),
           100 * (1 - res[0].mean_mib / res[3].mean_mib),
           100 * (1 - res[0].mean_mib / res[1].mean_mib));

    printf("\nControl plane: CPU time per decision (as_decide + placement, thread CPU clock; "
           "one clock reading, %.2f us, is included in each)\n",
           clock_read_us());
    printf("%-10s %10s %8s %8s %14s %8s %8s %9s %12s %12s %10s\n", "policy", "decisions", "acted",
           "CPU_s", "decisions/CPUs", "p50_us", "p99_us", "max_us", "acted_p50_us", "acted_p99_us",
           "run_wall_s");
    for (size_t p = 0; p < N_POLICIES; p++) {
        const scale_result *x = &res[p];
        printf("%-10s %10lu %8lu %8.2f %14.0f %8.1f %8.1f %9.1f %12.1f %12.1f %10.1f\n",
               policies[p].name, x->decisions, x->actions, x->cpu_s,
               x->cpu_s > 0 ? x->decisions / x->cpu_s : 0, x->cpu_us_p50, x->cpu_us_p99,
               x->cpu_us_max, x->act_us_p50, x->act_us_p99, x->wall_s);
    }

    if (o->gap_samples > 0) {
        printf("\nDTS against the optimum (GLPK, %d ms limit) on sampled scale-out decisions of "
               "the run\n",
               ILP_LIMIT_MS);
        printf("%-8s %-10s %7s %8s %8s %8s %8s %9s %11s %11s\n", "mode", "policy", "cases", "mean",
               "p99", "max", "min", "optimal", "DTS_us_p50", "GLPK_us_p50");
    }
    for (int m = 0; o->gap_samples > 0 && m < 2; m++)
        for (size_t p = 0; p < N_POLICIES; p++) {
            const gap_result *g = &gaps[p][m];
            printf("%-8s %-10s %7zu %8.3f %8.3f %8.3f %8.3f %4zu/%-4zu %11.1f %11.1f\n",
                   plan_mode_name(m == 0 ? PLAN_MODE_PAPER : PLAN_MODE_REFINED), policies[p].name,
                   g->cases, g->mean, g->p99, g->max, g->cases ? g->min : 0, g->optimal, g->cases,
                   g->dts_us_median, g->ilp_us_median);
        }

    for (size_t p = 0; tsv != NULL && p < N_POLICIES; p++) {
        const scale_result *x = &res[p];
        fprintf(tsv,
                "%s\t%u\t%u\t%.1f\t%.1f\t%.6f\t%.3f\t%.3f\t%u\t%lu\t%lu\t%lu\t%.4f\t%.2f\t%.2f\t"
                "%.2f\t%.2f\t%.2f\t%.2f\n",
                policies[p].name, o->nodes, o->functions, x->mean_mib, x->peak_mib,
                x->violation_rate, x->mean_cpus, x->mean_instances, x->peak_instances, x->unplaced,
                x->decisions, x->actions, x->cpu_s, x->cpu_us_p50, x->cpu_us_p99, x->cpu_us_max,
                x->act_us_p50, x->act_us_p99, x->wall_s);
    }
    for (int m = 0; gap_tsv != NULL && m < 2; m++)
        for (size_t p = 0; p < N_POLICIES; p++) {
            const gap_result *g = &gaps[p][m];
            fprintf(gap_tsv, "%s\t%s\t%zu\t%.6f\t%.6f\t%.6f\t%.6f\t%zu\t%zu\t%.2f\t%.2f\n",
                    plan_mode_name(m == 0 ? PLAN_MODE_PAPER : PLAN_MODE_REFINED), policies[p].name,
                    g->cases, g->mean, g->p99, g->max, g->cases ? g->min : 0, g->optimal,
                    g->below_one, g->dts_us_median, g->ilp_us_median);
        }
    return 0;
}

int eval_scale_run(const scale_options *o, tetris_error *err)
{
    FILE *tsv = NULL, *gap_tsv = NULL;
    if (o->out != NULL) {
        if (mkdir(o->out, 0777) < 0 && errno != EEXIST)
            return tetris_fail(err, TETRIS_E_IO, errno, "mkdir %s", o->out);
        if ((tsv = eval_open_out(o->out, "scale.tsv", err)) == NULL)
            return -err->code;
        if ((gap_tsv = eval_open_out(o->out, "scale-gap.tsv", err)) == NULL) {
            fclose(tsv);
            return -err->code;
        }
        fprintf(tsv, "policy\tnodes\tfunctions\tmean_mib\tpeak_mib\tviolation_rate\tmean_cpus\t"
                     "mean_instances\tpeak_instances\tunplaced\tdecisions\tactions\tcpu_s\t"
                     "cpu_us_p50\tcpu_us_p99\tcpu_us_max\tacted_us_p50\tacted_us_p99\twall_s\n");
        fprintf(gap_tsv, "mode\tpolicy\tcases\tmean\tp99\tmax\tmin\toptimal\tbelow_one\t"
                         "dts_us_p50\tglpk_us_p50\n");
    }
    cluster c = {.o = o};
    int r = run_all(&c, tsv, gap_tsv, err);
    cluster_free(&c);
    int r1 = eval_close_out(tsv, r == 0 ? err : NULL);
    int r2 = eval_close_out(gap_tsv, r == 0 && r1 == 0 ? err : NULL);
    return r < 0 ? r : r1 < 0 ? r1 : r2;
}
