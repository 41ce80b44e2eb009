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
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/eval/eval.h"
#include "scheduler-ext/autoscaler/autoscaler.h"
#include "scheduler-ext/autoscaler/dts.h"
#include "scheduler-ext/extender/similarity.h"
#include "common/cleanup.h"
#include "common/cli.h"
#include "common/error.h"
#include "common/log.h"
#include "common/options.h"
#include "protocol/profile.h"

enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_USAGE = 2 };

#define N_NODES 8

typedef struct node_def {
    const char *name;
    double cpus, mem_mib;
} node_def;

/* The paper's testbed: 2 nodes of 80 cores/256 GB, 6 of 32 cores/128 GB. */
static const node_def testbed[N_NODES] = {
    {"node-1", 80, 256 * 1024}, {"node-2", 80, 256 * 1024}, {"node-3", 32, 128 * 1024},
    {"node-4", 32, 128 * 1024}, {"node-5", 32, 128 * 1024}, {"node-6", 32, 128 * 1024},
    {"node-7", 32, 128 * 1024}, {"node-8", 32, 128 * 1024},
};

typedef struct options {
    const char *profiles;
    const char *out;
    unsigned duration_s, interval_s;
    uint64_t seed;
    double scale, headroom;
    double keep_alive_s; /* the node daemons' --keep-alive */
    enum plan_mode mode;
    bool app_on[N_APPS], trace_on[N_TRACES];
    const char *decisions; /* --decisions FILE */
    /* Prediction mode (--function): these functions, traces and nodes
     * instead of the paper's applications and testbed. */
    size_t n_custom, n_nodes;
    const char *custom_profile[MAX_FNS], *custom_trace[MAX_FNS];
    char custom_name[MAX_FNS][48];
    double slo_ms;
    node_def nodes[N_NODES];
    const char *node_models[N_NODES]; /* comma-separated, in the store at the start */
    char node_name[N_NODES][64];
} options;

typedef struct result {
    double mean_mib, median_mib, peak_mib;
    double violation_rate;
    double mean_cpus, mean_instances;
    unsigned peak_instances;
    unsigned long unplaced; /* instances the nodes had no room for */
} result;

/* ---- the cluster ---- */

/* An instance, in the order instances were created. */
typedef struct instance {
    size_t config, node;
} instance;

#define PARTS_PER_FN 2
#define MAX_PARTS (MAX_FNS * PARTS_PER_FN)

/* Tensors the store keeps once per node, named by the model or variant
 * they belong to. */
typedef struct tensor_part {
    char key[64];
    uint64_t bytes;
} tensor_part;

typedef struct sim {
    const options *opt;
    const app_def *app;
    const policy_def *pol;
    const char *trace_name;
    const node_def *nodes;
    size_t n_nodes;
    size_t n_fns;
    as_function *fns[MAX_FNS];
    /* The tensor parts the store keeps once per node: a whole model, or
     * for a fine-tuned variant the layers it shares with its base and its
     * own. Functions of one model (SVT's two classifiers) or of one base
     * share parts. */
    tensor_part parts[MAX_PARTS];
    size_t n_parts;
    size_t part_of[MAX_FNS][PARTS_PER_FN]; /* f's parts, indices into parts */
    size_t n_part_of[MAX_FNS];
    /* count[f][config][node]: instances placed */
    unsigned *count[MAX_FNS];
    instance *order[MAX_FNS]; /* f's instances, oldest first */
    size_t n_order[MAX_FNS];
    double used_cpus[N_NODES], used_mib[N_NODES];
    double req_mib[N_NODES];                 /* the pods' memory requests (no store) */
    unsigned part_count[MAX_PARTS][N_NODES]; /* instances using part k on a node */
    /* Part k in node n's store: from its first user until the daemon's
     * reclaim rule frees it, keep-alive after its last user went; seeded
     * ones (--node) from the start, and kept. */
    bool resident[MAX_PARTS][N_NODES];
    bool seeded[MAX_PARTS][N_NODES];
    double last_use_s[MAX_PARTS][N_NODES];
    /* What the extender knows: each part as one tensor (id k) of its bytes,
     * each function's model as its parts, each node's store as the parts it
     * holds. */
    uint32_t need_ids[MAX_FNS][PARTS_PER_FN];
    uint64_t need_bytes[MAX_FNS][PARTS_PER_FN];
    model_need need[MAX_FNS];
    node_inventory *store[N_NODES];
    uint32_t store_held[N_NODES]; /* bit k: store[n] holds part k */
    FILE *decisions;
    unsigned long unplaced;
} sim;

static double part_mib(const sim *s, size_t k)
{
    return (double)s->parts[k].bytes / 1048576.0;
}

/* The store's bytes a node newly pays for when an instance of function f
 * starts there: f's parts its store does not hold. */
static double new_parts_mib(const sim *s, size_t f, size_t n)
{
    double mib = 0;
    for (size_t j = 0; j < s->n_part_of[f]; j++)
        if (!s->resident[s->part_of[f][j]][n])
            mib += part_mib(s, s->part_of[f][j]);
    return mib;
}

/* Under sharing, part k enters node n's store, paid once. */
static void hold_part(sim *s, size_t k, size_t n)
{
    if (s->pol->sharing && !s->resident[k][n]) {
        s->resident[k][n] = true;
        s->used_mib[n] += part_mib(s, k);
    }
}

/* Counts an instance of f in (delta +1) or out (-1) of node n at time t:
 * under sharing its parts enter the node's store, paid once, with its
 * first user; its last user's leaving starts their keep-alive. */
static void use_parts(sim *s, size_t f, size_t n, int delta, double t)
{
    for (size_t j = 0; j < s->n_part_of[f]; j++) {
        size_t k = s->part_of[f][j];
        if (delta > 0) {
            s->part_count[k][n]++;
            hold_part(s, k, n);
        } else if (--s->part_count[k][n] == 0) {
            s->last_use_s[k][n] = t;
        }
    }
}

/* A reclaim pass of every node's daemon at time t, by the daemon's own
 * rule (reclaim_policy.h): parts no instance uses, freed once unused for
 * the keep-alive. Stores are unbounded here, so nothing is evicted. */
static void reclaim_pass(sim *s, double t)
{
    if (!s->pol->sharing)
        return;
    for (size_t n = 0; n < s->n_nodes; n++) {
        struct cold_tensor cold[MAX_PARTS];
        size_t n_cold = 0;
        for (size_t k = 0; k < s->n_parts; k++)
            if (s->resident[k][n] && s->part_count[k][n] == 0 && !s->seeded[k][n])
                cold[n_cold++] = (struct cold_tensor){.last_use_s = (int64_t)s->last_use_s[k][n],
                                                      .slot = k};
        size_t freed = eval_reclaimable(cold, n_cold, (int64_t)t, s->opt->keep_alive_s);
        for (size_t i = 0; i < freed; i++) {
            s->resident[cold[i].slot][n] = false;
            s->used_mib[n] -= part_mib(s, cold[i].slot);
        }
    }
}

/* The extender's score of node n for function f's model (similarity_eval:
 * θ of its tensor bytes the node's store holds, round(10 θ)) into *score.
 * The store holds a part while the node runs an instance using it, and the
 * parts it started with; its inventory is rebuilt when that set changes. */
static int extender_score(sim *s, size_t f, size_t n, int *score, tetris_error *err)
{
    uint32_t ids[MAX_PARTS], held = 0;
    size_t n_ids = 0;
    for (size_t k = 0; k < s->n_parts; k++)
        if (s->resident[k][n]) {
            ids[n_ids++] = (uint32_t)k;
            held |= 1u << k;
        }
    if (s->store[n] == NULL || s->store_held[n] != held) {
        node_inventory_free(s->store[n]);
        if ((s->store[n] = node_inventory_new()) == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "node store");
        int r = node_inventory_set_ids(s->store[n], NULL, ids, n_ids, err);
        if (r < 0)
            return r;
        s->store_held[n] = held;
    }
    node_fit fit;
    similarity_eval(&s->need[f], s->store[n], &fit);
    /* The store's capacity is not modelled (0: unlimited), so every node
     * passes the extender's filter; the node's memory is checked below. */
    *score = fit.score;
    return 0;
}

/* Places one instance of config i of function f where kube-scheduler with
 * the extender would: among the nodes that fit (CPUs, memory), the highest
 * extender score when sharing (the baselines have no tensor store and no
 * extender), then the least allocated (kube-scheduler's LeastAllocated: the
 * mean of the free CPU and memory fractions of the requests, this pod's
 * included), then the node name. Returns 1 placed (*node: where), 0 no
 * node fits, or an error. */
static int place(sim *s, size_t f, size_t i, const plan_options *o, size_t *node, tetris_error *err)
{
    const profile_config *cfg = &s->fns[f]->prof->configs[i];
    double inst_mib = plan_instance_mib(cfg, o);
    int best = -1, best_score = 0;
    double best_free = 0;
    for (size_t n = 0; n < s->n_nodes; n++) {
        const node_def *nd = &s->nodes[n];
        double mib = inst_mib + (o->sharing ? new_parts_mib(s, f, n) : 0);
        if (s->used_cpus[n] + cfg->c > nd->cpus || s->used_mib[n] + mib > nd->mem_mib)
            continue;
        int score = 0, r;
        if (o->sharing && (r = extender_score(s, f, n, &score, err)) < 0)
            return r;
        double free = ((nd->cpus - s->used_cpus[n] - cfg->c) / nd->cpus +
                       (nd->mem_mib - s->req_mib[n] - inst_mib) / nd->mem_mib) /
                      2;
        if (best < 0 || score > best_score || (score == best_score && free > best_free) ||
            (score == best_score && free == best_free &&
             strcmp(nd->name, s->nodes[best].name) < 0)) {
            best = (int)n;
            best_score = score;
            best_free = free;
        }
    }
    if (best < 0)
        return 0;
    size_t n = (size_t)best;
    use_parts(s, f, n, +1, 0);
    s->used_mib[n] += inst_mib;
    s->req_mib[n] += inst_mib;
    s->used_cpus[n] += cfg->c;
    s->count[f][i * N_NODES + n]++;
    s->order[f][s->n_order[f]++] = (instance){i, n};
    *node = n;
    return 1;
}

/* Appends a node's name to a decision log's list ("-" when empty). */
static void list_add(char *list, size_t size, const char *name)
{
    size_t len = strlen(list);
    if (strcmp(list, "-") == 0)
        len = 0;
    snprintf(list + len, size - len, "%s%s", len > 0 ? "," : "", name);
}

/* Removes d instances of config i of function f as the ReplicaSet
 * controller (Kubernetes 1.20) picks the pods to delete among equally ready
 * ones: ranked once, before any goes, by the pods of its Deployment (one per
 * config) on the same node, the most first, then the newest. Each node goes
 * to list. */
static int release(sim *s, double t, size_t f, size_t i, unsigned d, const plan_options *o,
                   char *list, size_t size, tetris_error *err)
{
    const profile_config *cfg = &s->fns[f]->prof->configs[i];
    size_t n_of = s->n_order[f];
    cleanup_free size_t *at = malloc((n_of + 1) * sizeof *at);
    cleanup_free size_t *pick = malloc((n_of + 1) * sizeof *pick);
    cleanup_free unsigned *node = malloc((n_of + 1) * sizeof *node);
    if (at == NULL || pick == NULL || node == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "scale-in");
    size_t n_cfg = 0;
    for (size_t j = 0; j < n_of; j++)
        if (s->order[f][j].config == i) {
            at[n_cfg] = j;
            node[n_cfg++] = (unsigned)s->order[f][j].node;
        }
    int r = eval_scale_in_order(node, n_cfg, pick, err);
    if (r < 0)
        return r;
    for (size_t k = 0; k < d && k < n_cfg; k++) {
        instance *in = &s->order[f][at[pick[k]]];
        size_t n = in->node;
        s->count[f][i * N_NODES + n]--;
        use_parts(s, f, n, -1, t);
        s->used_cpus[n] -= cfg->c;
        s->used_mib[n] -= plan_instance_mib(cfg, o);
        s->req_mib[n] -= plan_instance_mib(cfg, o);
        list_add(list, size, s->nodes[n].name);
        in->node = SIZE_MAX; /* gone: compacted below, the order kept */
    }
    size_t kept = 0;
    for (size_t j = 0; j < n_of; j++)
        if (s->order[f][j].node != SIZE_MAX)
            s->order[f][kept++] = s->order[f][j];
    s->n_order[f] = kept;
    return 0;
}

static void sim_free(sim *s)
{
    for (size_t f = 0; f < s->n_fns; f++) {
        as_function_free(s->fns[f]);
        free(s->count[f]);
        free(s->order[f]);
    }
    for (size_t n = 0; n < N_NODES; n++)
        node_inventory_free(s->store[n]);
}

/* The models a node's store holds at the start (--node NAME=...,MODEL). */
static int seed_stores(sim *s, tetris_error *err)
{
    for (size_t n = 0; n < s->n_nodes; n++) {
        if (s->opt->node_models[n] == NULL)
            continue;
        cleanup_free char *list = strdup(s->opt->node_models[n]);
        if (list == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "--node");
        char *save = NULL;
        for (char *m = strtok_r(list, ",", &save); m != NULL; m = strtok_r(NULL, ",", &save)) {
            size_t k = 0;
            while (k < s->n_parts && strcmp(s->parts[k].key, m) != 0)
                k++;
            if (k == s->n_parts)
                return tetris_fail(err, TETRIS_E_INVAL, 0,
                                   "--node %s: model %s is no --function's profile's model",
                                   s->nodes[n].name, m);
            s->seeded[k][n] = true;
            hold_part(s, k, n);
        }
    }
    return 0;
}

/* The part named key (bytes), added when no function has it yet; its
 * index goes to f's parts. A base model and its variants in one
 * application are refused: the base's part would be all its tensors, the
 * variants' only the shared ones. */
static int add_part(sim *s, size_t f, const char *key, uint64_t bytes, tetris_error *err)
{
    size_t k = 0;
    while (k < s->n_parts && strcmp(s->parts[k].key, key) != 0)
        k++;
    if (k < s->n_parts && s->parts[k].bytes != bytes)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "%s: %s is both a model and a variant's base in one application",
                           s->app->name, key);
    if (k == s->n_parts) {
        snprintf(s->parts[k].key, sizeof s->parts[k].key, "%s", key);
        s->parts[k].bytes = bytes;
        s->n_parts++;
    }
    s->need_ids[f][s->n_part_of[f]] = (uint32_t)k;
    s->need_bytes[f][s->n_part_of[f]] = s->parts[k].bytes;
    s->part_of[f][s->n_part_of[f]++] = k;
    return 0;
}

/* Function f's tensor parts and what the extender is told of its model: the
 * whole model as one part, or for a variant the bytes it shares with its
 * base and its own. */
static int add_parts(sim *s, size_t f, const char *variant, tetris_error *err)
{
    const profile *prof = s->fns[f]->prof;
    uint64_t model_bytes = (uint64_t)(plan_shared_mib(prof) * 1048576.0);
    int r;
    if (variant == NULL) {
        if ((r = add_part(s, f, prof->model, model_bytes, err)) < 0)
            return r;
    } else {
        uint64_t shared = 0, total = 0;
        if ((r = eval_variant_sharing(s->opt->profiles, variant, prof->model, &shared, &total,
                                      err)) < 0 ||
            (r = add_part(s, f, prof->model, shared, err)) < 0 ||
            (r = add_part(s, f, variant, total - shared, err)) < 0)
            return r;
    }
    uint64_t sum = 0;
    for (size_t j = 0; j < s->n_part_of[f]; j++)
        sum += s->need_bytes[f][j];
    s->need[f] = (model_need){.slot = f,
                              .model = s->parts[s->part_of[f][s->n_part_of[f] - 1]].key,
                              .n = s->n_part_of[f],
                              .ids = s->need_ids[f],
                              .bytes = s->need_bytes[f],
                              .total_bytes = sum};
    return 0;
}

static int sim_init(sim *s, const options *opt, const app_def *app, const policy_def *pol,
                    tetris_error *err)
{
    *s = (sim){.opt = opt, .app = app, .pol = pol, .nodes = testbed, .n_nodes = N_NODES};
    if (opt->n_custom > 0) {
        s->nodes = opt->nodes;
        s->n_nodes = opt->n_nodes;
    }
    for (size_t f = 0; f < MAX_FNS && app->models[f] != NULL; f++) {
        char path[4096];
        if (opt->n_custom > 0)
            snprintf(path, sizeof path, "%s", opt->custom_profile[f]);
        else if (snprintf(path, sizeof path, "%s/%s.profile.yaml", opt->profiles, app->models[f]) >=
                 (int)sizeof path)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "profiles path too long");
        profile *prof;
        int r = profile_load(path, &prof, err);
        if (r < 0)
            return r;
        char name[64];
        if (opt->n_custom > 0)
            snprintf(name, sizeof name, "%s", opt->custom_name[f]);
        else
            snprintf(name, sizeof name, "%s-%zu",
                     app->variants[f] != NULL ? app->variants[f] : app->models[f], f);
        r = as_function_new(name, prof, &s->fns[f], err);
        if (r < 0) {
            profile_free(prof);
            return r;
        }
        s->n_fns++;
        s->count[f] = calloc(prof->n_configs * N_NODES, sizeof *s->count[f]);
        /* Every instance takes at least the smallest config's CPUs. */
        double cpus = 0, min_c = INFINITY;
        for (size_t n = 0; n < s->n_nodes; n++)
            cpus += s->nodes[n].cpus;
        for (size_t i = 0; i < prof->n_configs; i++)
            min_c = fmin(min_c, prof->configs[i].c);
        s->order[f] = calloc((size_t)(cpus / min_c) + 1, sizeof *s->order[f]);
        if (s->count[f] == NULL || s->order[f] == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "instance table");
        if ((r = add_parts(s, f, app->variants[f], err)) < 0)
            return r;
        if (opt->n_custom > 0 && opt->custom_trace[f] != NULL &&
            (r = rate_trace_load(opt->custom_trace[f], &s->fns[f]->trace, err)) < 0)
            return r;
    }
    return seed_stores(s, err);
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

/* Acts on one decision of function f at time t (want: instances per
 * config): releases, then places, and writes one --decisions line per
 * config whose count changes. */
static int apply_decision(sim *s, double t, size_t f, const unsigned *want, const plan_options *o,
                          tetris_error *err)
{
    as_function *fn = s->fns[f];
    bool changed = false;
    for (size_t i = 0; i < fn->prof->n_configs; i++) {
        if (fn->replicas[i] == want[i])
            continue;
        unsigned from = fn->replicas[i], unplaced = 0;
        char placed[4096] = "-", released[4096] = "-";
        size_t node;
        if (fn->replicas[i] > want[i]) {
            int r = release(s, t, f, i, fn->replicas[i] - want[i], o, released, sizeof released,
                            err);
            if (r < 0)
                return r;
            fn->replicas[i] = want[i];
            changed = true;
        }
        while (fn->replicas[i] < want[i]) {
            int r = place(s, f, i, o, &node, err);
            if (r < 0)
                return r;
            if (r == 0) {
                unplaced = want[i] - fn->replicas[i];
                s->unplaced += unplaced;
                break;
            }
            list_add(placed, sizeof placed, s->nodes[node].name);
            fn->replicas[i]++;
            changed = true;
        }
        const profile_config *cfg = &fn->prof->configs[i];
        if (s->decisions != NULL &&
            fprintf(s->decisions, "%g\t%s\t%s\t%s\t%s\t%g\t%d\t%d\t%u\t%u\t%s\t%s\t%u\n", t,
                    s->app->name, s->trace_name, s->pol->name, fn->name, cfg->c, cfg->b, cfg->p,
                    from, want[i], placed, released, unplaced) < 0)
            return tetris_fail(err, TETRIS_E_IO, errno, "write --decisions");
    }
    if (changed)
        fn->last_change_s = t;
    return 0;
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
        if (t % RECLAIM_INTERVAL_S == 0)
            reclaim_pass(s, t);
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
                if ((r = apply_decision(s, t, f, want, &pol.plan, err)) < 0)
                    return r;
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
        for (size_t k = 0; k < s->n_nodes; k++) {
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

/* Prediction mode: what tetris-autoscaler run --trace (simulated time)
 * decides and where the scheduler with the extender places it, one round
 * every --interval from 0 to the traces' end, each function's rate read
 * from its trace as the autoscaler reads it (the rate of the last line at
 * or before the round's time). */
static int predict(sim *s, tetris_error *err)
{
    double end_s = 0;
    for (size_t f = 0; f < s->n_fns; f++)
        end_s = fmax(end_s, rate_trace_end(s->fns[f]->trace));
    for (double t = 0; t <= end_s + 1e-9; t += s->opt->interval_s) {
        reclaim_pass(s, t);
        for (size_t f = 0; f < s->n_fns; f++) {
            as_function *fn = s->fns[f];
            as_policy pol = policy_for(s, f);
            cleanup_free unsigned *want = calloc(fn->prof->n_configs, sizeof *want);
            if (want == NULL)
                return tetris_fail(err, TETRIS_E_NOMEM, errno, "decision");
            const char *reason;
            int r = as_decide(fn, &pol, t, rate_trace_at(fn->trace, t), want, &reason, err);
            if (r < 0)
                return tetris_wrap(err, "function %s", fn->name);
            if (reason != NULL && (r = apply_decision(s, t, f, want, &pol.plan, err)) < 0)
                return r;
        }
    }
    if (s->unplaced > 0)
        log_warn("event=unplaced instances=%lu", s->unplaced);
    return 0;
}

static FILE *open_decisions(const options *opt, tetris_error *err)
{
    FILE *f = strcmp(opt->decisions, "-") == 0 ? stdout : fopen(opt->decisions, "w");
    if (f == NULL) {
        tetris_fail(err, TETRIS_E_IO, errno, "open %s", opt->decisions);
        return NULL;
    }
    if (fprintf(f, "time_s\tapp\ttrace\tpolicy\tfunction\tc\tb\tp\tfrom\tto\tplaced\treleased\t"
                   "unplaced\n") < 0) {
        tetris_fail(err, TETRIS_E_IO, errno, "write %s", opt->decisions);
        if (f != stdout)
            fclose(f);
        return NULL;
    }
    return f;
}

static int close_decisions(const options *opt, FILE *f, tetris_error *err)
{
    if (f == NULL)
        return 0;
    bool bad = ferror(f) != 0;
    if ((f == stdout ? fflush(f) : fclose(f)) != 0)
        bad = true;
    if (bad && err != NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "write %s", opt->decisions);
    return 0;
}

static int run_predict(const options *opt, tetris_error *err)
{
    app_def app = {.name = "custom"};
    for (size_t f = 0; f < opt->n_custom; f++) {
        app.models[f] = opt->custom_name[f];
        app.slo_ms[f] = opt->slo_ms;
    }
    FILE *dec = open_decisions(opt, err);
    if (dec == NULL)
        return -err->code;
    sim s;
    int r = sim_init(&s, opt, &app, &policies[0], err);
    s.trace_name = "file";
    s.decisions = dec;
    if (r == 0)
        r = predict(&s, err);
    sim_free(&s);
    int rc = close_decisions(opt, dec, r == 0 ? err : NULL);
    return r < 0 ? r : rc;
}

/* ---- command line ---- */

/* --function NAME=PROFILE, --rate-trace NAME=FILE */
static int parse_custom(options *opt, const char *arg, bool trace, tetris_error *err)
{
    const char *eq = strchr(arg, '=');
    const char *what = trace ? "--rate-trace" : "--function";
    if (eq == NULL || eq == arg || eq[1] == '\0' || (size_t)(eq - arg) >= 48)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s %s: expected NAME=FILE", what, arg);
    size_t len = (size_t)(eq - arg);
    size_t f = 0;
    while (f < opt->n_custom &&
           !(strncmp(opt->custom_name[f], arg, len) == 0 && opt->custom_name[f][len] == '\0'))
        f++;
    if (!trace) {
        if (f < opt->n_custom)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "--function %.*s given twice", (int)len,
                               arg);
        if (opt->n_custom == MAX_FNS)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "at most %d --function", MAX_FNS);
        memcpy(opt->custom_name[opt->n_custom], arg, len);
        opt->custom_name[opt->n_custom][len] = '\0';
        opt->custom_profile[opt->n_custom++] = eq + 1;
        return 0;
    }
    if (f == opt->n_custom)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--rate-trace %s: no --function %.*s before it",
                           arg, (int)len, arg);
    if (opt->custom_trace[f] != NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--rate-trace for %.*s given twice", (int)len,
                           arg);
    opt->custom_trace[f] = eq + 1;
    return 0;
}

/* --node NAME=CPUS,MEM_MIB[,MODEL...] */
static int parse_node(options *opt, const char *arg, tetris_error *err)
{
    if (opt->n_nodes == N_NODES)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "at most %d --node", N_NODES);
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", arg) >= (int)sizeof buf)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--node %s: too long", arg);
    char *eq = strchr(buf, '='), *cpus = eq ? eq + 1 : NULL;
    char *mem = cpus ? strchr(cpus, ',') : NULL;
    if (eq == NULL || eq == buf || mem == NULL)
        return tetris_fail(err, TETRIS_E_INVAL, 0,
                           "--node %s: expected NAME=CPUS,MEM_MIB[,MODEL...]", arg);
    *eq = '\0';
    *mem++ = '\0';
    char *models = strchr(mem, ',');
    if (models != NULL)
        *models++ = '\0';
    node_def *nd = &opt->nodes[opt->n_nodes];
    int r;
    if ((r = cli_parse_double("--node CPUS", cpus, 0.001, 1e6, &nd->cpus, err)) < 0 ||
        (r = cli_parse_double("--node MEM_MIB", mem, 1, 1e12, &nd->mem_mib, err)) < 0)
        return r;
    for (size_t n = 0; n < opt->n_nodes; n++)
        if (strcmp(opt->nodes[n].name, buf) == 0)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "--node %s given twice", buf);
    if (strlen(buf) >= sizeof opt->node_name[0])
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--node %s: name too long", buf);
    strcpy(opt->node_name[opt->n_nodes], buf);
    nd->name = opt->node_name[opt->n_nodes];
    opt->node_models[opt->n_nodes++] = models != NULL ? arg + (models - buf) : NULL;
    return 0;
}

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

static int run(const options *opt, tetris_error *err)
{
    static result res[N_APPS][N_TRACES][N_POLICIES];
    bool have[N_APPS][N_TRACES] = {{false}};
    FILE *tsv = NULL;
    if (opt->out != NULL) {
        if (mkdir(opt->out, 0777) < 0 && errno != EEXIST)
            return tetris_fail(err, TETRIS_E_IO, errno, "mkdir %s", opt->out);
        if ((tsv = eval_open_out(opt->out, "results.tsv", err)) == NULL)
            return -err->code;
        fprintf(tsv, "app\ttrace\tpolicy\tmean_mib\tmedian_mib\tpeak_mib\tviolation_rate\t"
                     "mean_cpus\tmean_instances\tpeak_instances\tunplaced\n");
    }
    FILE *dec = NULL;
    if (opt->decisions != NULL && (dec = open_decisions(opt, err)) == NULL) {
        eval_close_out(tsv, NULL);
        return -err->code;
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
                    if ((series = eval_open_out(opt->out, name, err)) == NULL) {
                        r = -err->code;
                        break;
                    }
                }
                sim s;
                r = sim_init(&s, opt, &apps[a], &policies[p], err);
                s.trace_name = traces[t];
                s.decisions = dec;
                if (r == 0)
                    r = simulate(&s, arr, &res[a][t][p], series, err);
                sim_free(&s);
                int rc = eval_close_out(series, r == 0 ? err : NULL);
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
    int rc = eval_close_out(tsv, r == 0 ? err : NULL);
    int rd = close_decisions(opt, dec, r == 0 && rc == 0 ? err : NULL);
    return r < 0 ? r : rc < 0 ? rc : rd;
}

/* ---- options ---- */

/* --nodes or --functions was given: the scale mode (eval_scale.c). */
static bool scale_mode;

/* An unsigned count in [umin, umax]. */
static int parse_unsigned(const struct opt_spec *spec, const char *label, const char *value,
                          tetris_error *err)
{
    uint64_t v;
    int r = cli_parse_u64(label, value, spec->umin, spec->umax, &v, err);
    if (r == 0)
        *(unsigned *)spec->dest = (unsigned)v;
    return r;
}

static int parse_scale_size(const struct opt_spec *spec, const char *label, const char *value,
                            tetris_error *err)
{
    scale_mode = true;
    return parse_unsigned(spec, label, value, err);
}

static int parse_apps(const struct opt_spec *spec, const char *label, const char *value,
                      tetris_error *err)
{
    return parse_list(label, value, &apps[0].name, N_APPS, sizeof apps[0], spec->dest, err);
}

static int parse_traces(const struct opt_spec *spec, const char *label, const char *value,
                        tetris_error *err)
{
    return parse_list(label, value, traces, N_TRACES, sizeof traces[0], spec->dest, err);
}

static int parse_mode(const struct opt_spec *spec, const char *label, const char *value,
                      tetris_error *err)
{
    (void)label;
    return plan_mode_parse(value, spec->dest, err);
}

static int parse_function(const struct opt_spec *spec, const char *label, const char *value,
                          tetris_error *err)
{
    (void)label;
    return parse_custom(spec->dest, value, false, err);
}

static int parse_rate_trace(const struct opt_spec *spec, const char *label, const char *value,
                            tetris_error *err)
{
    (void)label;
    return parse_custom(spec->dest, value, true, err);
}

static int parse_node_opt(const struct opt_spec *spec, const char *label, const char *value,
                          tetris_error *err)
{
    (void)label;
    return parse_node(spec->dest, value, err);
}

static const char about[] =
    "Simulates tetris's autoscaler (DTS and its scaling policy) and placement on the\n"
    "Tetris paper's testbed (2 nodes of 80 CPUs/256 GiB, 6 of 32 CPUs/128 GiB) for\n"
    "four applications built from measured profiles, under generated stable,\n"
    "periodic and bursty traces, with four policies: tetris (tensor and runtime\n"
    "sharing), tetris-ro (runtime sharing only), infless (batching only) and\n"
    "photons (concurrency only). Prints one row per application, trace and policy,\n"
    "then tetris's mean-memory reduction next to the paper's.\n"
    "\n"
    "Prediction mode (--function; what tetris-autoscaler run --trace and the\n"
    "scheduler with the extender do on a given cluster; policy tetris, --decisions\n"
    "required): these functions (at most 3) with their --rate-trace, --slo-ms and\n"
    "--node (at most 8) replace the applications and the testbed; a round every\n"
    "--interval up to the traces' end.\n"
    "\n"
    "Scale mode, when --nodes or --functions is given: one cluster of N nodes (one\n"
    "in four of 80 CPUs/256 GiB, the rest 32 CPUs/128 GiB) running M functions drawn\n"
    "from the applications' functions (--apps), each with its own trace (--traces)\n"
    "and a log-normal mean rate (times --scale). Prints memory, SLO violations and\n"
    "the CPU cost per decision for each policy, then DTS against the GLPK optimum on\n"
    "a sample of the run's scale-out decisions; --out gets scale.tsv and\n"
    "scale-gap.tsv.\n";

int main(int argc, char **argv)
{
    options opt = {.profiles = "deploy/profiles",
                   .duration_s = 3600,
                   .interval_s = 10,
                   .seed = 1,
                   .scale = 1,
                   .headroom = 0.1,
                   .keep_alive_s = 300,
                   .mode = PLAN_MODE_REFINED};
    scale_options so = {.nodes = 1000, .functions = 10000, .gap_samples = 500};
    tetris_error err = {0};
    int first, r = 0;
    const struct opt_spec specs[] = {
        {.name = "profiles",
         .type = OPT_TYPE_STRING,
         .dest = &opt.profiles,
         .meta = "DIR",
         .help = "where MODEL.profile.yaml are (default deploy/profiles)"},
        {.name = "apps",
         .type = OPT_TYPE_CUSTOM,
         .dest = opt.app_on,
         .parse = parse_apps,
         .meta = "LIST",
         .help = "comma-separated: svt,qa-audio,ss,qa-text (default all)"},
        {.name = "traces",
         .type = OPT_TYPE_CUSTOM,
         .dest = opt.trace_on,
         .parse = parse_traces,
         .meta = "LIST",
         .help = "comma-separated: stable,periodic,bursty (default all)"},
        {.name = "duration",
         .type = OPT_TYPE_CUSTOM,
         .dest = &opt.duration_s,
         .parse = parse_unsigned,
         .umin = 1,
         .umax = 30 * 86400,
         .meta = "S",
         .help = "trace length in seconds (default 3600)"},
        {.name = "interval",
         .type = OPT_TYPE_CUSTOM,
         .dest = &opt.interval_s,
         .parse = parse_unsigned,
         .umin = 1,
         .umax = 3600,
         .meta = "S",
         .help = "seconds between autoscaler decisions (default 10)"},
        {.name = "scale",
         .type = OPT_TYPE_DOUBLE,
         .dest = &opt.scale,
         .dmin = 0,
         .dmax = 1000,
         .meta = "X",
         .help = "multiply every application's rate by X (default 1)"},
        {.name = "seed",
         .type = OPT_TYPE_U64,
         .dest = &opt.seed,
         .umin = 0,
         .umax = UINT32_MAX,
         .meta = "N",
         .help = "trace seed (default 1): the same seed, the same traces"},
        {.name = "mode",
         .type = OPT_TYPE_CUSTOM,
         .dest = &opt.mode,
         .parse = parse_mode,
         .meta = "MODE",
         .help = "DTS plan mode: paper or refined (default refined)"},
        {.name = "headroom",
         .type = OPT_TYPE_DOUBLE,
         .dest = &opt.headroom,
         .dmin = 0,
         .dmax = 100,
         .meta = "H",
         .help = "scale out when rate*(1+H) > capacity (default 0.1)"},
        {.name = "keep-alive",
         .type = OPT_TYPE_DOUBLE,
         .dest = &opt.keep_alive_s,
         .dmin = 0,
         .dmax = 86400,
         .meta = "S",
         .help = "a node's store keeps tensors no instance uses for S seconds, by the node "
                 "daemon's reclaim rule, checked every 10 s (default 300, the daemon's)"},
        {.name = "out",
         .type = OPT_TYPE_STRING,
         .dest = &opt.out,
         .meta = "DIR",
         .help = "also write results.tsv and per-second series there"},
        {.name = "decisions",
         .type = OPT_TYPE_STRING,
         .dest = &opt.decisions,
         .meta = "FILE",
         .help = "write every scaling decision there, one line per function and config: "
                 "time, function, config (c,b,p), instances before and wanted, the nodes "
                 "placed on and released from (- for stdout)"},
        {.name = "function",
         .type = OPT_TYPE_CUSTOM,
         .dest = &opt,
         .parse = parse_function,
         .meta = "NAME=PROFILE",
         .help = "prediction mode: a function (at most 3), replacing the applications"},
        {.name = "rate-trace",
         .type = OPT_TYPE_CUSTOM,
         .dest = &opt,
         .parse = parse_rate_trace,
         .meta = "NAME=FILE",
         .help = "its rate: `time_s rps` lines, as tetris-autoscaler's --trace reads them"},
        {.name = "slo-ms",
         .type = OPT_TYPE_DOUBLE,
         .dest = &opt.slo_ms,
         .dmin = 0.001,
         .dmax = 1e9,
         .meta = "T",
         .help = "every function's latency SLO"},
        {.name = "node",
         .type = OPT_TYPE_CUSTOM,
         .dest = &opt,
         .parse = parse_node_opt,
         .meta = "NAME=CPUS,MEM_MIB[,MODEL...]",
         .help = "a node (at most 8) and the models its tensor store holds at the start"},
        {.name = "nodes",
         .type = OPT_TYPE_CUSTOM,
         .dest = &so.nodes,
         .parse = parse_scale_size,
         .umin = 1,
         .umax = 1000000,
         .meta = "N",
         .help = "scale mode: nodes (default 1000)"},
        {.name = "functions",
         .type = OPT_TYPE_CUSTOM,
         .dest = &so.functions,
         .parse = parse_scale_size,
         .umin = 1,
         .umax = 1000000,
         .meta = "M",
         .help = "scale mode: functions (default 10000)"},
        {.name = "gap-samples",
         .type = OPT_TYPE_CUSTOM,
         .dest = &so.gap_samples,
         .parse = parse_unsigned,
         .umin = 0,
         .umax = 1000000,
         .meta = "K",
         .help = "decisions per policy re-solved exactly (default 500, 0: none)"},
        {.name = "bases",
         .type = OPT_TYPE_CUSTOM,
         .dest = &so.bases,
         .parse = parse_unsigned,
         .umin = 0,
         .umax = 10000,
         .meta = "K",
         .help = "a function drawn from a fine-tuned variant (SVT's ResNet-152s, QA-Text's "
                 "BERT-bases) is a variant of one of K bases of its model, drawn, sharing its "
                 "base's layers (sharing.tsv) with the base's other variants (default 0: every "
                 "function is its own model)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-eval",
        .about = about,
        .options = specs,
        .epilogue = "Exit status: 0 done, 1 a profile could not be read or planned, 2 bad "
                    "usage.\n",
    };

    log_init(argv[0]);
    for (size_t i = 0; i < N_APPS; i++)
        opt.app_on[i] = true;
    for (size_t i = 0; i < N_TRACES; i++)
        opt.trace_on[i] = true;
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return EXIT_USAGE;
    if (first != argc)
        return opt_usage_error(&prog, "unexpected argument '%s'", argv[first]), EXIT_USAGE;
    const char *bad = NULL;
    if (scale_mode && (opt.n_custom > 0 || opt.decisions != NULL))
        bad = "the scale mode (--nodes, --functions) takes no --function or --decisions";
    else if (!scale_mode && so.bases > 0)
        bad = "--bases is for the scale mode (--nodes, --functions)";
    else if (opt.n_custom == 0 && (opt.n_nodes > 0 || opt.slo_ms > 0))
        bad = "--node and --slo-ms need --function";
    else if (opt.n_custom > 0 && (opt.n_nodes == 0 || !(opt.slo_ms > 0) || opt.decisions == NULL))
        bad = "--function needs --node, --slo-ms and --decisions";
    for (size_t f = 0; f < opt.n_custom && bad == NULL; f++)
        if (opt.custom_trace[f] == NULL)
            bad = "every --function needs its --rate-trace";
    if (bad != NULL)
        return opt_usage_error(&prog, "%s", bad), EXIT_USAGE;
    if (scale_mode) {
        so.profiles = opt.profiles;
        so.out = opt.out;
        so.duration_s = opt.duration_s;
        so.interval_s = opt.interval_s;
        so.seed = opt.seed;
        so.scale = opt.scale;
        so.headroom = opt.headroom;
        so.keep_alive_s = opt.keep_alive_s;
        so.mode = opt.mode;
        so.app_on = opt.app_on;
        so.trace_on = opt.trace_on;
    }
    r = scale_mode         ? eval_scale_run(&so, &err)
        : opt.n_custom > 0 ? run_predict(&opt, &err)
                           : run(&opt, &err);
    if (r < 0) {
        log_error("event=eval msg=%s", LOG_Q(err.msg));
        return EXIT_ERROR;
    }
    return EXIT_OK;
}
