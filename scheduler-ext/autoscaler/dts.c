/* dts.c - the planning model and DTS, the greedy config choice of the Tetris
 * paper (Algorithm 1). See dts.h. */
#include "scheduler-ext/autoscaler/dts.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"

#define MIB (1024.0 * 1024.0)
/* A residual rate at or below this is covered (absorbs rounding). */
#define RESIDUAL_EPS_RPS 1e-9

/* ---- the planning model ---- */

double plan_capacity_rps(const profile_config *cfg, enum profile_stat latency)
{
    return (double)cfg->b * (double)cfg->p * 1000.0 / profile_config_latency(cfg, latency);
}

double plan_config_capacity(const profile_config *cfg, const plan_options *o)
{
    if (o->mode == PLAN_MODE_REFINED && cfg->throughput_rps > 0)
        return cfg->throughput_rps;
    return plan_capacity_rps(cfg, o->latency);
}

bool plan_equal_share_ok(const plan *pl, const profile *p, double rps, const plan_options *o)
{
    if (pl->instances == 0)
        return rps <= RESIDUAL_EPS_RPS;
    double share = rps / pl->instances;
    for (size_t i = 0; i < pl->n_entries; i++)
        if (plan_config_capacity(&p->configs[pl->entries[i].config], o) < share - RESIDUAL_EPS_RPS)
            return false;
    return true;
}

int plan_mode_parse(const char *s, enum plan_mode *out, tetris_error *err)
{
    for (int i = PLAN_MODE_PAPER; i <= PLAN_MODE_REFINED; i++)
        if (strcmp(s, plan_mode_name((enum plan_mode)i)) == 0) {
            *out = (enum plan_mode)i;
            return 0;
        }
    return tetris_fail(err, TETRIS_E_INVAL, 0, "planning mode '%s': expected paper or refined", s);
}

const char *plan_mode_name(enum plan_mode mode)
{
    return mode == PLAN_MODE_REFINED ? "refined" : "paper";
}

bool plan_meets_slo(const profile_config *cfg, const plan_options *o)
{
    double l = profile_config_latency(cfg, o->latency);
    return cfg->b == 1 ? l <= o->slo_ms : l <= o->slo_ms / 2.0;
}

bool plan_eligible(const profile_config *cfg, const plan_options *o)
{
    if ((o->space == PLAN_SPACE_BATCHING && cfg->p != 1) ||
        (o->space == PLAN_SPACE_CONCURRENCY && cfg->b != 1))
        return false;
    return plan_meets_slo(cfg, o);
}

int plan_space_parse(const char *s, enum plan_space *out, tetris_error *err)
{
    for (int i = PLAN_SPACE_ALL; i <= PLAN_SPACE_CONCURRENCY; i++)
        if (strcmp(s, plan_space_name((enum plan_space)i)) == 0) {
            *out = (enum plan_space)i;
            return 0;
        }
    return tetris_fail(err, TETRIS_E_INVAL, 0,
                       "config space '%s': expected all, batching or concurrency", s);
}

const char *plan_space_name(enum plan_space space)
{
    switch (space) {
    case PLAN_SPACE_ALL:
        return "all";
    case PLAN_SPACE_BATCHING:
        return "batching";
    case PLAN_SPACE_CONCURRENCY:
        return "concurrency";
    }
    return "?";
}

double plan_instance_mib(const profile_config *cfg, const plan_options *o)
{
    return o->sharing ? (double)cfg->private_bytes / MIB : cfg->m_mib;
}

double plan_shared_mib(const profile *p)
{
    uint64_t most = 0;
    for (size_t i = 0; i < p->n_configs; i++)
        if (p->configs[i].shared_bytes > most)
            most = p->configs[i].shared_bytes;
    return (double)most / MIB;
}

int plan_check(const profile *p, const plan_options *o, tetris_error *err)
{
    if (!(o->slo_ms > 0) || !isfinite(o->slo_ms))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "SLO must be a positive number of ms");
    if (!(o->alpha >= 0) || !isfinite(o->alpha))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "alpha must be >= 0");
    if (o->sharing)
        for (size_t i = 0; i < p->n_configs; i++)
            if (p->configs[i].private_bytes == 0)
                return tetris_fail(err, TETRIS_E_INVAL, 0,
                                   "model %s: config %zu (c=%g b=%d p=%d) has no private_bytes; "
                                   "sharing-aware planning needs them",
                                   p->model, i, p->configs[i].c, p->configs[i].b,
                                   p->configs[i].p);
    return 0;
}

int plan_fail_infeasible(const profile *p, const plan_options *o, tetris_error *err)
{
    double best_single = INFINITY, best_batched = INFINITY;
    plan_options in_space = *o;
    in_space.slo_ms = INFINITY; /* eligible but for the SLO */
    for (size_t i = 0; i < p->n_configs; i++) {
        if (!plan_eligible(&p->configs[i], &in_space))
            continue;
        double l = profile_config_latency(&p->configs[i], o->latency);
        if (p->configs[i].b == 1)
            best_single = fmin(best_single, l);
        else
            best_batched = fmin(best_batched, l);
    }
    return tetris_fail(err, TETRIS_E_NOTFOUND, 0,
                       "model %s: no config%s meets the SLO of %g ms (%s latency): the fastest "
                       "b=1 config takes %g ms (needs <= %g), the fastest b>1 config takes "
                       "%g ms (needs <= %g)",
                       p->model,
                       o->space == PLAN_SPACE_BATCHING      ? " with p=1"
                       : o->space == PLAN_SPACE_CONCURRENCY ? " with b=1"
                                                            : "",
                       o->slo_ms, profile_stat_name(o->latency), best_single, o->slo_ms,
                       best_batched, o->slo_ms / 2.0);
}

void plan_total(plan *pl, const profile *p, const plan_options *o)
{
    pl->instances = 0;
    pl->memory_mib = 0;
    pl->cpus = 0;
    pl->covered_rps = 0;
    for (size_t i = 0; i < pl->n_entries; i++) {
        const profile_config *cfg = &p->configs[pl->entries[i].config];
        unsigned n = pl->entries[i].count;
        pl->instances += n;
        pl->memory_mib += n * plan_instance_mib(cfg, o);
        pl->cpus += n * cfg->c;
        pl->covered_rps += n * plan_config_capacity(cfg, o);
    }
    pl->shared_mib = o->sharing && !o->resident && pl->instances > 0 ? plan_shared_mib(p) : 0;
    pl->memory_mib += pl->shared_mib;
}

void plan_clear(plan *pl)
{
    free(pl->entries);
    memset(pl, 0, sizeof *pl);
}

/* ---- DTS ---- */

/* One candidate config and its normalised throughput b*p/(l*memory term). */
typedef struct candidate {
    size_t config;
    double capacity_rps;
    double cost; /* memory term of one more instance: (marginal) MiB + alpha*c */
    double key;
} candidate;

/* Descending key; ties go to the cheaper, then the smaller, then the first
 * config so that plans are reproducible. */
static int by_key_desc(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    if (x->cost != y->cost)
        return x->cost < y->cost ? -1 : 1;
    return x->config < y->config ? -1 : x->config > y->config;
}

static void rank(candidate *cand, size_t n, const profile *p, const plan_options *o,
                 double extra_mib)
{
    for (size_t i = 0; i < n; i++) {
        const profile_config *cfg = &p->configs[cand[i].config];
        cand[i].cost = plan_instance_mib(cfg, o) + extra_mib + o->alpha * cfg->c;
        cand[i].key = cand[i].capacity_rps / cand[i].cost;
    }
    qsort(cand, n, sizeof *cand, by_key_desc);
}

static int add_instances(plan *pl, size_t config, unsigned count, tetris_error *err)
{
    for (size_t i = 0; i < pl->n_entries; i++)
        if (pl->entries[i].config == config) {
            pl->entries[i].count += count;
            return 0;
        }
    plan_entry *grown = realloc(pl->entries, (pl->n_entries + 1) * sizeof *grown);
    if (grown == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "plan entries");
    pl->entries = grown;
    pl->entries[pl->n_entries++] = (plan_entry){.config = config, .count = count};
    return 0;
}

/* Descending capacity; ties by cost, then config, so plans are reproducible. */
static int by_capacity_desc(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->capacity_rps != y->capacity_rps)
        return x->capacity_rps > y->capacity_rps ? -1 : 1;
    if (x->cost != y->cost)
        return x->cost < y->cost ? -1 : 1;
    return x->config < y->config ? -1 : x->config > y->config;
}

/* PLAN_MODE_REFINED (see dts.h): n instances of one config. With configs in
 * descending capacity, those able to take rps/n for n = ceil(rps / cap_k)
 * include the first k; any other n is no better than one of these. So the
 * answer is the least n_k * (cheapest of the first k). */
static int refined_plan(const profile *p, double rps, const plan_options *o, candidate *cand,
                        size_t n, plan *out, tetris_error *err)
{
    for (size_t i = 0; i < n; i++) {
        const profile_config *cfg = &p->configs[cand[i].config];
        cand[i].cost = plan_instance_mib(cfg, o) + o->alpha * cfg->c;
    }
    qsort(cand, n, sizeof *cand, by_capacity_desc);
    size_t cheapest = 0, best = SIZE_MAX;
    double best_total = INFINITY, best_count = 0;
    for (size_t k = 0; k < n; k++) {
        if (cand[k].cost < cand[cheapest].cost)
            cheapest = k;
        double count = ceil((rps - RESIDUAL_EPS_RPS) / cand[k].capacity_rps);
        if (count < 1)
            count = 1;
        double total = count * cand[cheapest].cost;
        if (count <= UINT_MAX &&
            (total < best_total || (total == best_total && count < best_count))) {
            best = cheapest;
            best_total = total;
            best_count = count;
        }
    }
    if (best == SIZE_MAX)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%g rps needs more than %u instances", rps,
                           UINT_MAX);
    int rc = add_instances(out, cand[best].config, (unsigned)best_count, err);
    if (rc < 0) {
        plan_clear(out);
        return rc;
    }
    plan_total(out, p, o);
    return 0;
}

int dts_plan(const profile *p, double rps, const plan_options *o, plan *out,
             tetris_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = plan_check(p, o, err);
    if (rc < 0)
        return rc;
    if (!isfinite(rps))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "request rate must be finite");
    if (rps <= RESIDUAL_EPS_RPS)
        return 0;

    /* Lines 5-8 of Algorithm 1 skip configs that miss the SLO; they can never
     * be chosen, so leave them (and those outside the space) out of the
     * ranking altogether. */
    cleanup_free candidate *cand = calloc(p->n_configs, sizeof *cand);
    if (cand == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "%zu candidates", p->n_configs);
    size_t n = 0;
    for (size_t i = 0; i < p->n_configs; i++)
        if (plan_eligible(&p->configs[i], o))
            cand[n++] = (candidate){.config = i,
                                    .capacity_rps = plan_config_capacity(&p->configs[i], o)};
    if (n == 0)
        return plan_fail_infeasible(p, o, err);
    if (o->mode == PLAN_MODE_REFINED)
        return refined_plan(p, rps, o, cand, n, out, err);

    /* With sharing the first instance also pays for the tensors (unless they
     * are resident); after it the ranking is by private memory alone. */
    bool tensors_paid = !o->sharing || o->resident;
    rank(cand, n, p, o, tensors_paid ? 0 : plan_shared_mib(p));

    double residual = rps;
    while (residual > RESIDUAL_EPS_RPS) {
        const candidate *best = &cand[0];
        /* While the ranking stays the same, Algorithm 1 picks the same config
         * again and again: take all of those instances at once. */
        double want = tensors_paid ? ceil((residual - RESIDUAL_EPS_RPS) / best->capacity_rps) : 1;
        if (want > UINT_MAX) {
            plan_clear(out);
            return tetris_fail(err, TETRIS_E_INVAL, 0,
                               "%g rps needs more than %u instances", rps, UINT_MAX);
        }
        unsigned count = want < 1 ? 1 : (unsigned)want;
        if ((rc = add_instances(out, best->config, count, err)) < 0) {
            plan_clear(out);
            return rc;
        }
        residual -= count * best->capacity_rps;
        if (!tensors_paid) {
            tensors_paid = true;
            rank(cand, n, p, o, 0);
        }
    }
    plan_total(out, p, o);
    return 0;
}
