/* autoscaler_policy.c - when and how a function's instances change.
 *
 * Scale-out: existing instances absorb what they can; when the rate with
 * headroom exceeds their capacity, DTS configures new instances for the
 * residual rate only (the refined mode: the instances to add so that every
 * instance, old and new, takes its equal share). It acts at once: a late
 * scale-out costs SLO misses.
 *
 * Scale-in: only after a cool-down since the last change, and judged against
 * the peak rate of a recent window rather than the current one. Instances
 * are released least-loaded first: the dispatcher fills the instances that
 * serve most requests per MiB first (DTS's order), so the least efficient
 * ones carry the least load, and releasing them frees the most memory per
 * unit of capacity lost. An instance goes only while the capacity left still
 * covers the peak with the (larger) scale-in headroom, so the SLO holds.
 *
 * Bounds: a function never has more than max_instances, whatever its rate
 * (the rate comes from series a tenant may try to inflate; as_rate_ceiling
 * bounds how fast it may grow).
 *
 * Hysteresis: after scale-out capacity >= rate*(1+headroom_out); after
 * scale-in capacity >= peak*(1+headroom_in) with headroom_in > headroom_out.
 * Between the two the autoscaler does nothing, and the cool-down and window
 * keep a falling rate from releasing instances a brief spike needs again. */
#include "scheduler-ext/autoscaler/autoscaler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"

int as_function_new(const char *name, profile *prof, as_function **out, tetris_error *err)
{
    as_function *fn = calloc(1, sizeof *fn);
    if (fn == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "function %s", name);
    fn->name = strdup(name);
    fn->replicas = calloc(prof->n_configs, sizeof *fn->replicas);
    fn->exists = calloc(prof->n_configs, sizeof *fn->exists);
    if (fn->name == NULL || fn->replicas == NULL || fn->exists == NULL) {
        as_function_free(fn);
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "function %s", name);
    }
    fn->prof = prof;
    fn->last_change_s = -INFINITY;
    *out = fn;
    return 0;
}

void as_function_free(as_function *fn)
{
    if (fn == NULL)
        return;
    free(fn->name);
    profile_free(fn->prof);
    rate_trace_free(fn->trace);
    free(fn->replicas);
    free(fn->exists);
    free(fn->seen_t);
    free(fn->seen_rps);
    free(fn->sets);
    json_decref(fn->primary);
    free(fn);
}

static double counts_capacity(const profile *p, const unsigned *count, const plan_options *o)
{
    return as_pods_capacity(p, count, 0, 0, o->mode == PLAN_MODE_REFINED, o);
}

double as_capacity_rps(const as_function *fn, const plan_options *o)
{
    if (fn->openfaas)
        return of_capacity_rps(fn, o);
    return counts_capacity(fn->prof, fn->replicas, o);
}

unsigned as_instances(const as_function *fn)
{
    unsigned n = fn->openfaas ? fn->primary_pods : 0;
    for (size_t i = 0; i < fn->prof->n_configs; i++)
        n += fn->replicas[i];
    return n;
}

double as_memory_mib(const as_function *fn, const plan_options *o)
{
    double sum = 0;
    for (size_t i = 0; i < fn->prof->n_configs; i++)
        sum += fn->replicas[i] * plan_instance_mib(&fn->prof->configs[i], o);
    if (fn->openfaas)
        sum += fn->primary_pods * plan_instance_mib(&fn->prof->configs[fn->primary_config], o);
    if (o->sharing && as_instances(fn) > 0)
        sum += plan_shared_mib(fn->prof);
    return sum;
}

double as_rate_ceiling(const as_function *fn, const plan_options *o)
{
    double one = 0;
    for (size_t i = 0; i < fn->prof->n_configs; i++)
        if (plan_eligible(&fn->prof->configs[i], o))
            one = fmax(one, plan_config_capacity(&fn->prof->configs[i], o));
    return AS_RATE_JUMP * fmax(as_capacity_rps(fn, o), one);
}

/* Remembers rps at now_s and returns the peak over the window. */
static int remember_rate(as_function *fn, double now_s, double rps, double window_s,
                         double *peak, tetris_error *err)
{
    size_t keep = 0;
    for (size_t i = 0; i < fn->n_seen; i++)
        if (fn->seen_t[i] > now_s - window_s) {
            fn->seen_t[keep] = fn->seen_t[i];
            fn->seen_rps[keep] = fn->seen_rps[i];
            keep++;
        }
    fn->n_seen = keep;
    if (fn->n_seen == fn->cap_seen) {
        size_t cap = fn->cap_seen ? fn->cap_seen * 2 : 64;
        double *t = realloc(fn->seen_t, cap * sizeof *t);
        if (t == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "rate window");
        fn->seen_t = t;
        double *r = realloc(fn->seen_rps, cap * sizeof *r);
        if (r == NULL)
            return tetris_fail(err, TETRIS_E_NOMEM, errno, "rate window");
        fn->seen_rps = r;
        fn->cap_seen = cap;
    }
    fn->seen_t[fn->n_seen] = now_s;
    fn->seen_rps[fn->n_seen] = rps;
    fn->n_seen++;
    *peak = 0;
    for (size_t i = 0; i < fn->n_seen; i++)
        *peak = fmax(*peak, fn->seen_rps[i]);
    return 0;
}

/* Refined mode: the instances to add so that all of them, old and new,
 * take target/n each. Adding m of config j gives (n + m) * min(least, cap_j)
 * with least the smallest capacity running. Among the m of each config that
 * cover target, the one whose whole set (running and new) costs least per
 * rps of that capacity wins (fewer instances on a tie), not the cheapest
 * step: a weak instance lowers every instance's share, so the cheapest
 * step that just covers target leaves the function one small rise from
 * another scale-out, each adding a weaker instance, until scale-in. */
static int scale_out_equal_share(const as_function *fn, const plan_options *o, double target,
                                 unsigned *want, tetris_error *err)
{
    const profile *p = fn->prof;
    unsigned n = as_instances(fn);
    double least = INFINITY, running = 0;
    for (size_t i = 0; i < p->n_configs; i++)
        if (fn->replicas[i] > 0) {
            const profile_config *cfg = &p->configs[i];
            least = fmin(least, plan_config_capacity(cfg, o));
            running += fn->replicas[i] * (plan_instance_mib(cfg, o) + o->alpha * cfg->c);
        }
    size_t best = SIZE_MAX;
    unsigned best_m = 0;
    double best_key = INFINITY;
    for (size_t j = 0; j < p->n_configs; j++) {
        const profile_config *cfg = &p->configs[j];
        double cap = fmin(least, plan_config_capacity(cfg, o));
        if (!plan_eligible(cfg, o) || !(cap > 0))
            continue;
        double total = ceil(target / cap - 1e-9);
        unsigned m = total > n ? (unsigned)fmin(total - n, 1e6) : 1;
        double key = (running + m * (plan_instance_mib(cfg, o) + o->alpha * cfg->c)) /
                     ((n + m) * cap);
        if (key < best_key - 1e-12 || (fabs(key - best_key) <= 1e-12 && m < best_m)) {
            best = j;
            best_m = m;
            best_key = key;
        }
    }
    if (best == SIZE_MAX) {
        plan_fail_infeasible(p, o, err);
        return tetris_wrap(err, "function %s", fn->name);
    }
    want[best] += best_m;
    return 0;
}

static int scale_out(const as_function *fn, const as_policy *pol, double residual,
                     unsigned *want, tetris_error *err)
{
    plan_options o = pol->plan;
    /* Instances already running hold the model's tensors in their nodes'
     * stores; the scheduler places new ones next to them. */
    o.resident = o.sharing && as_instances(fn) > 0;
    if (o.mode == PLAN_MODE_REFINED && as_instances(fn) > 0)
        return scale_out_equal_share(fn, &o, residual + as_capacity_rps(fn, &o), want, err);
    plan pl;
    int rc = dts_plan(fn->prof, residual, &o, &pl, err);
    if (rc < 0)
        return tetris_wrap(err, "function %s", fn->name);
    for (size_t i = 0; i < pl.n_entries; i++)
        want[pl.entries[i].config] += pl.entries[i].count;
    plan_clear(&pl);
    return 0;
}

/* Configs by ascending b*p/(l*(memory + alpha*c)): least loaded first. */
typedef struct ranked {
    size_t config;
    double key;
} ranked;

static int by_key_asc(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->config < y->config ? -1 : x->config > y->config;
}

static int scale_in(const as_function *fn, const as_policy *pol, double peak, unsigned *want,
                    tetris_error *err)
{
    const profile *p = fn->prof;
    cleanup_free ranked *order = calloc(p->n_configs, sizeof *order);
    if (order == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "scale-in order");
    for (size_t i = 0; i < p->n_configs; i++) {
        const profile_config *cfg = &p->configs[i];
        double cost = plan_instance_mib(cfg, &pol->plan) + pol->plan.alpha * cfg->c;
        order[i] = (ranked){.config = i, .key = plan_config_capacity(cfg, &pol->plan) / cost};
    }
    qsort(order, p->n_configs, sizeof *order, by_key_asc);

    double needed = peak * (1.0 + pol->headroom_in);
    unsigned instances = as_instances(fn);
    for (size_t k = 0; k < p->n_configs; k++) {
        size_t i = order[k].config;
        while (want[i] > 0 && instances > pol->min_instances) {
            want[i]--;
            if (counts_capacity(p, want, &pol->plan) < needed) {
                want[i]++;
                break;
            }
            instances--;
        }
    }
    return 0;
}

/* Holds want[] to max instances in all: the instances a decision adds go
 * first, then running ones (a lowered cap). Returns whether it cut any. */
static bool cap_instances(const as_function *fn, unsigned max, unsigned *want)
{
    size_t n = fn->prof->n_configs;
    unsigned total = 0;
    for (size_t i = 0; i < n; i++)
        total += want[i];
    bool cut = false;
    for (bool added = true; total > max; added = false)
        for (size_t i = 0; i < n && total > max; i++)
            while (want[i] > (added ? fn->replicas[i] : 0) && total > max) {
                want[i]--;
                total--;
                cut = true;
            }
    return cut;
}

int as_decide(as_function *fn, const as_policy *pol, double now_s, double rps, unsigned *want,
              const char **reason, tetris_error *err)
{
    size_t n = fn->prof->n_configs;
    memcpy(want, fn->replicas, n * sizeof *want);
    *reason = NULL;
    if (!(rps >= 0) || !isfinite(rps))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "function %s: bad rate %g", fn->name, rps);
    double peak = rps;
    int rc = remember_rate(fn, now_s, rps, pol->window_s, &peak, err);
    if (rc < 0)
        return rc;
    if (fn->openfaas)
        return of_decide(fn, pol, now_s, rps, peak, want, reason, err);

    double capacity = as_capacity_rps(fn, &pol->plan);
    double target = rps * (1.0 + pol->headroom_out);
    unsigned instances = as_instances(fn);
    if (target > capacity + 1e-9) {
        rc = scale_out(fn, pol, target - capacity, want, err);
        *reason = "scale-out";
    } else if (instances < pol->min_instances) {
        /* Idle but below the floor: the best-ranked config, one at a time. */
        for (unsigned k = instances; k < pol->min_instances && rc == 0; k++)
            rc = scale_out(fn, pol, 1e-6, want, err);
        *reason = "minimum";
    } else if (now_s - fn->last_change_s >= pol->cooldown_s) {
        rc = scale_in(fn, pol, peak, want, err);
        *reason = "scale-in";
    }
    if (rc < 0)
        return rc;
    if (pol->max_instances > 0 && cap_instances(fn, pol->max_instances, want))
        *reason = "max-instances";
    if (memcmp(want, fn->replicas, n * sizeof *want) == 0)
        *reason = NULL;
    return 0;
}
